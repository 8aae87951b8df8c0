"""Numbers written out in four languages, capitalised and punctuated: text with accents to tokenize, for
the random Marian checkpoints' sentencepiece models, their tests and the translation benchmarks. Needs
num2words (the dev extra); no torch."""

from __future__ import annotations

import random

from num2words import num2words

LANGUAGES = ("en", "fr", "de", "es")
PUNCTUATION = (".", "!", "?", ",", "", " ...")


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        words = [num2words(rng.randrange(10 ** rng.randint(1, 7)), lang=rng.choice(LANGUAGES))]
        if rng.random() < 0.3:
            words.append(num2words(rng.randrange(1000), lang=rng.choice(LANGUAGES)))
        lines.append(" ".join(words).capitalize() + rng.choice(PUNCTUATION))
    return lines
