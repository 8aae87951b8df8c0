"""The "numbers" task: integers below one billion, digits <-> English words as num2words writes them.

    "312405" <-> "three hundred and twelve thousand, four hundred and five"

The direction follows from the input: digits in, words out; words in, digits out.

Tokens are whole words ("▁twelve", "▁twenty-one", "▁thousand"), the comma, single digits and the
word-start mark "▁" (as sentencepiece writes a space), so that the longest number in words is 17 tokens
and in digits 10: short sequences are what make training fit in minutes on two cores.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3: pad, decoder start, end, unknown
LIMIT = 10**9
MAX_DIGITS = 9
EVAL_SEED = 20261129  # for evaluation samples; never a training seed
# The T5 numbers model's tasks, written before the input as Flan-T5's are: what to write the number in.
TASK_PREFIXES = {True: "digits: ", False: "words: "}  # by the direction (to digits)


@dataclass(frozen=True)
class TrainSettings:
    seed: int = 0
    steps: int = 4000
    batch_size: int = 128
    learning_rate: float = 2e-3
    warmup_steps: int = 300
    threads: int = 2
    d_model: int = 64
    n_heads: int = 4
    layers: int = 3  # encoder and decoder each
    d_ff: int = 512
    sparse: float = 0.3  # share of examples with zeroed digits (round numbers)
    report_every: int = 100


def to_words(number: int) -> str:
    from num2words import num2words  # a development dependency: training and evaluation only

    return num2words(number, lang="en")


def pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
            pre_tokenizers.Split(Regex(","), behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )


def _pieces(text: str) -> list[str]:
    return [piece for piece, _ in pre_tokenizer().pre_tokenize_str(text)]


def build_tokenizer(task_prefixes: bool = False) -> Tokenizer:
    """A word-level tokenizer whose vocabulary is every piece of every number's two spellings (and, for the
    T5 model, its task prefixes). All word forms occur among 0..999 and the scale words, so that range is
    enough to collect them."""
    pieces = set(_pieces("0123456789"))
    if task_prefixes:
        pieces.update(piece for prefix in TASK_PREFIXES.values() for piece in _pieces(prefix))
    for number in [*range(1000), 1000, 10**6]:
        pieces.update(_pieces(to_words(number)))
    pieces.update(_pieces(to_words(1100)))  # the comma
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + sorted(pieces))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.add_special_tokens(SPECIAL_TOKENS)  # already in the vocabulary: this marks them special
    # Forgive case and surrounding spaces in what users type; the task itself is lower case.
    tokenizer.normalizer = normalizers.Sequence([normalizers.Strip(), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizer()
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return tokenizer


def sample_number(rng: random.Random, sparse: float = 0.0) -> int:
    """Length first (1..9 digits, uniformly), then a number of that length. With probability `sparse`,
    some digits are zeroed, so that round numbers ("one million and five") are common enough to learn."""
    digits = rng.randint(1, MAX_DIGITS)
    if digits == 1:
        return rng.randint(0, 9)
    number = rng.randint(10 ** (digits - 1), 10**digits - 1)
    if rng.random() < sparse:
        text = list(str(number))
        for i in range(1, digits):
            if rng.random() < 0.5:
                text[i] = "0"
        number = int("".join(text))
    return number


def pair(number: int, to_digits: bool, task_prefix: bool = False) -> tuple[str, str]:
    """(input, expected output) in the given direction; task_prefix: the input starts with the task, as the
    T5 model takes it ("words: 312", "digits: three hundred and twelve")."""
    words, digits = to_words(number), str(number)
    source, target = (words, digits) if to_digits else (digits, words)
    return (TASK_PREFIXES[to_digits] + source if task_prefix else source), target
