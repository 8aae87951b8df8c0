"""Text <-> token ids with the model's tokenizer.json, under truncation and padding set here, explicitly:
a tokenizer.json may carry its own (all-MiniLM-L6-v2's pads and truncates everything to 128)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    tokens: list[str]
    truncated: bool  # the text had more than max_tokens tokens


class TextTokenizer:
    def __init__(self, path: Path, max_tokens: int):
        self.max_tokens = max_tokens
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_padding()
        # Counts the special tokens the post-processor adds ([CLS] ... [SEP]), as Hugging Face does.
        self._tokenizer.enable_truncation(max_length=max_tokens)

    def encode(self, texts: list[str], add_special_tokens: bool = True) -> list[Encoded]:
        """add_special_tokens=False: the text's own tokens only (a decoder target, which the caller frames)."""
        encoded = self._tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
        return [Encoded(e.ids, e.tokens, bool(e.overflowing)) for e in encoded]

    def tokens(self, ids: list[int]) -> list[str]:
        return [self._tokenizer.id_to_token(i) or "" for i in ids]

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the tokenizer's special tokens ([CLS], </s>, ...)."""
        return frozenset(i for i, t in self._tokenizer.get_added_tokens_decoder().items() if t.special)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)


def pad_batch(sequences: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad to the longest: -> input_ids, attention_mask, both (B, S) int64."""
    length = max(len(s) for s in sequences)
    ids = np.full((len(sequences), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(sequences), length), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = sequence
        mask[row, : len(sequence)] = 1
    return ids, mask
