"""The "numbers" task in several languages, for the bundled multilingual model: integers below one billion,
digits -> words in the requested language, and words in any of them -> digits, as num2words writes them.

    312405 --(fra_Latn)--> "trois cent douze mille quatre cent cinq"
    "dreihundertzwölftausendvierhundertfünf" --(zxx_Zyyy)--> 312405

The model is NLLB-200's architecture (transformers' M2M100) with its tokenizer (NllbTokenizer: BPE pieces,
the source's code before the text, the target's code forced as the first token), so that it is imported and
served through the same code as real checkpoints. Codes are NLLB's; digits, which have no language, are
`zxx_Zyyy`: ISO 639 `zxx` ("no linguistic content") in the Common script (requests may say `zxx`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from model.bundled.numbers import sample_number

# The checkpoint's code -> num2words' language.
LANGUAGES = {"eng_Latn": "en", "fra_Latn": "fr", "deu_Latn": "de", "spa_Latn": "es"}
DIGITS = "zxx_Zyyy"
CODES = (*LANGUAGES, DIGITS)
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's ids 0-3, as NLLB has them
EVAL_SEED = 20261201  # for evaluation samples; never a training seed


@dataclass(frozen=True)
class MultilingualTrainSettings:
    seed: int = 0
    steps: int = 6000
    batch_size: int = 128
    learning_rate: float = 1.5e-3
    warmup_steps: int = 400
    threads: int = 2
    d_model: int = 128
    heads: int = 4
    layers: int = 3  # encoder and decoder each
    d_ff: int = 512
    sparse: float = 0.3  # share of examples with zeroed digits (round numbers)
    vocab_size: int = 1200  # BPE pieces over the four languages' words
    report_every: int = 100


def words(number: int, code: str) -> str:
    from num2words import num2words  # a development dependency: training and evaluation only

    return num2words(number, lang=LANGUAGES[code])


def example(number: int, source: str, target: str) -> tuple[str, str]:
    """(input, expected output) of a number from `source`'s spelling to `target`'s (one is DIGITS)."""
    spell = {code: (str(number) if code == DIGITS else words(number, code)) for code in (source, target)}
    return spell[source], spell[target]


def directions() -> list[tuple[str, str]]:
    """(source, target): digits to each language's words, and each language's words to digits."""
    return [(DIGITS, code) for code in LANGUAGES] + [(code, DIGITS) for code in LANGUAGES]


def sample_examples(rng: random.Random, count: int, sparse: float) -> list[tuple[str, str, str, str]]:
    """(source code, target code, input, expected output), the directions in turn."""
    out = []
    pairs = directions()
    for i in range(count):
        source, target = pairs[i % len(pairs)]
        out.append((source, target, *example(sample_number(rng, sparse), source, target)))
    return out


def train_pieces(settings: MultilingualTrainSettings) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """BPE over Metaspace pieces of every language's numbers (NLLB's kind of vocabulary), digits kept
    apart so that no piece holds two of them: -> vocab (the specials first), merges."""
    trained = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    trained.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    rng = random.Random(settings.seed + 1)
    texts = [words(sample_number(rng, settings.sparse), code) for _ in range(4000) for code in LANGUAGES]
    texts += [str(n) for n in range(10)] + [words(n, code) for n in range(1000) for code in LANGUAGES]
    trainer = trainers.BpeTrainer(vocab_size=settings.vocab_size, special_tokens=list(SPECIALS), show_progress=False)
    trained.train_from_iterator(texts, trainer)
    bpe = json.loads(trained.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in bpe["merges"]]
    return bpe["vocab"], merges


def build_tokenizer(settings: MultilingualTrainSettings):
    """transformers' NllbTokenizer over the trained pieces, with this task's codes as its languages."""
    from transformers import NllbTokenizer

    vocab, merges = train_pieces(settings)
    return NllbTokenizer(vocab=vocab, merges=merges, src_lang=DIGITS, extra_special_tokens=list(CODES))
