"""The tasks of the bundled cross-encoders, on the multilingual numbers' data: a reranker ("which of these
texts in words is this number?": digits as the query, number words in any of four languages as documents)
and a language classifier ("which language are these number words in?").

    query "4711", documents ["four thousand, seven hundred and eleven", "quatre mille sept cent douze", ...]
    "vierhundertelf" -> de

Hard negatives are the point: most wrong documents are a number one digit away from the query's, so that a
reranker must read every digit. Both models share one BERT-framed WordPiece vocabulary over the four
languages' number words ([CLS] a [SEP] b [SEP], as BERT cross-encoders frame pairs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from model.bundled.multilingual_numbers import LANGUAGES, words

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0-4
CLASSES = tuple(LANGUAGES.values())  # en, fr, de, es: ISO 639-1, as users name them (and num2words)
WRITTEN = dict(zip(CLASSES, LANGUAGES))  # label -> the multilingual numbers' code for words()
EVAL_SEED = 20261202  # for evaluation samples; never a training seed


@dataclass(frozen=True)
class RankerSettings:
    seed: int = 0
    steps: int = 3000
    batch_size: int = 64  # queries (reranker) or texts (classifier) per step
    documents: int = 4  # per query: one right, the rest wrong (most one digit away)
    learning_rate: float = 1e-3
    warmup_steps: int = 200
    threads: int = 2
    d_model: int = 128
    heads: int = 4
    layers: int = 3
    d_ff: int = 256
    max_digits: int = 4  # numbers below 10,000: nine digits take a larger model longer than a build should
    report_every: int = 100


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([pre_tokenizers.BertPreTokenizer(), pre_tokenizers.Digits(individual_digits=True)])


def _pieces(texts) -> set[str]:
    pre_tokenizer = _pre_tokenizer()
    return {piece for text in texts for piece, _ in pre_tokenizer.pre_tokenize_str(text.lower())}


def _vocabulary(settings: RankerSettings) -> list[str]:
    """Every piece of every number's words below the limit, sorted, so that the vocabulary is the same on
    every run (tokenizers' trainers break ties between equally frequent pairs in no fixed order). German
    writes a number as one word: its pieces are the words below 100 (and "ein", as in "eintausend") as a
    word's start, and those, "hundert" and "tausend" as its continuation (WordPiece's "##")."""
    limit = 10**settings.max_digits
    pieces = _pieces([str(n) for n in range(10)])
    for code in LANGUAGES:
        if code != "deu_Latn":
            pieces |= _pieces(words(n, code) for n in range(limit))
    german = {words(n, "deu_Latn") for n in range(100)} | {"ein"}
    pieces |= german | {"##" + piece for piece in german | {"hundert", "tausend"}}
    return [*SPECIALS, *sorted(pieces - set(SPECIALS))]


def build_tokenizer(settings: RankerSettings) -> Tokenizer:
    """WordPiece over every language's number words (digits one token each), framed as BERT frames texts;
    checked to cover every number below the limit in each language without an unknown piece."""
    vocabulary = _vocabulary(settings)
    tokenizer = Tokenizer(models.WordPiece({piece: i for i, piece in enumerate(vocabulary)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(handle_chinese_chars=False, strip_accents=False, lowercase=True)
    tokenizer.pre_tokenizer = _pre_tokenizer()
    tokenizer.add_special_tokens(list(SPECIALS))  # already in the vocabulary: this marks them special
    unknown = tokenizer.token_to_id("[UNK]")
    for code in LANGUAGES:
        for encoded in tokenizer.encode_batch([words(n, code) for n in range(10**settings.max_digits)]):
            if unknown in encoded.ids:
                raise ValueError(f"the vocabulary misses a piece of {encoded.tokens}")
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return tokenizer


def sample_number(rng: random.Random, max_digits: int) -> int:
    """Length first (1..max_digits digits, uniformly), then a number of that length."""
    digits = rng.randint(1, max_digits)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def near(number: int, rng: random.Random, max_digits: int) -> int:
    """A different number one digit away: one digit changed, one added or dropped at the end, or two
    neighbours swapped, as a misread would make it."""
    digits = list(str(number))
    while True:
        kind = rng.random()
        changed = list(digits)
        if kind < 0.6 or len(digits) == 1:
            i = rng.randrange(len(changed))
            changed[i] = str(rng.randint(1 if i == 0 and len(changed) > 1 else 0, 9))
        elif kind < 0.75 and len(digits) < max_digits:
            changed.append(str(rng.randint(0, 9)))
        elif kind < 0.9:
            changed.pop()
        else:
            i = rng.randrange(len(changed) - 1)
            changed[i], changed[i + 1] = changed[i + 1], changed[i]
        candidate = int("".join(changed)) if changed and changed[0] != "0" or changed == ["0"] else None
        if candidate is not None and candidate != number:
            return candidate


def rerank_example(rng: random.Random, documents: int, max_digits: int) -> tuple[str, list[str], int]:
    """(query in digits, documents in words, index of the right one): one right, the wrong ones one digit
    away but for one drawn at random, each in a language of its own draw."""
    number = sample_number(rng, max_digits)
    wrong = [near(number, rng, max_digits) for _ in range(documents - 2)] + [sample_number(rng, max_digits)]
    wrong = [w if w != number else number + 1 for w in wrong]
    numbers = [number, *wrong]
    rng.shuffle(numbers)
    texts = [words(n, rng.choice(list(LANGUAGES))) for n in numbers]
    return str(number), texts, numbers.index(number)


def classify_example(rng: random.Random, max_digits: int) -> tuple[str, int]:
    """(number words, index of their language in CLASSES)."""
    label = rng.randrange(len(CLASSES))
    return words(sample_number(rng, max_digits), WRITTEN[CLASSES[label]]), label
