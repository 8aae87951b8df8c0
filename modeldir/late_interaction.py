"""A ColBERT-style model's settings, and how its queries and documents are framed and which of their token
vectors are kept, as PyLate's ColBERT does it: a marker token ([Q] or [D]) after the first token; a query
padded with the expansion token ([MASK]) to the query length, all its vectors kept; a document's vectors
kept but for its punctuation (the skiplist). Shared by export (calibration) and the server."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROLES = ("query", "document")
PROJECTION_ACTIVATIONS = ("identity", "tanh")


@dataclass(frozen=True, kw_only=True)
class ColbertSettings:
    # The projection stack after the encoder (PyLate's Dense layers): each layer's width, bias, activation.
    dims: tuple[int, ...]
    bias: tuple[bool, ...]
    activations: tuple[str, ...]
    query_prefix_id: int | None  # the marker token's id; None: no marker (an empty prefix)
    document_prefix_id: int | None
    query_length: int  # a query's length, marker included: cut to it, and padded to it (query expansion)
    document_length: int  # the most a document keeps, marker included
    query_expansion: bool  # pad queries with expansion_id to query_length, and keep those vectors
    attend_to_expansion: bool  # the other tokens attend to the expansion tokens (else those are masked keys)
    expansion_id: int  # the tokenizer's mask token (PyLate's padding token)
    skiplist_ids: tuple[int, ...]  # documents' tokens whose vectors are dropped (punctuation)

    def __post_init__(self) -> None:
        for name in ("dims", "bias", "activations", "skiplist_ids"):  # lists, read from JSON
            object.__setattr__(self, name, tuple(getattr(self, name)))
        problems = []
        if not self.dims or not len(self.dims) == len(self.bias) == len(self.activations):
            problems.append("a projection needs a width, a bias flag and an activation per layer")
        if unknown := sorted(set(self.activations) - set(PROJECTION_ACTIVATIONS)):
            problems.append(f"projection activations {unknown}: one of {', '.join(PROJECTION_ACTIVATIONS)}")
        for role in ROLES:
            if self.length(role) < 3 + (self.prefix_id(role) is not None):
                problems.append(f"{role}_length {self.length(role)} leaves no room for a token")
        if problems:
            raise ValueError("invalid ColbertSettings: " + "; ".join(problems))

    @property
    def dim(self) -> int:
        return self.dims[-1]

    def length(self, role: str) -> int:
        return self.query_length if role == "query" else self.document_length

    def prefix_id(self, role: str) -> int | None:
        return self.query_prefix_id if role == "query" else self.document_prefix_id

    def max_tokens(self, role: str) -> int:
        """The most tokens the tokenizer may give a text of this role (special tokens included), before
        the marker goes in."""
        return self.length(role) - (self.prefix_id(role) is not None)

    def frame(self, ids: list[int], role: str) -> tuple[list[int], int]:
        """A text's ids (cut at max_tokens(role)) -> (the model's input, how many of its first tokens are
        attended to: the rest are the query's expansion tokens, masked as keys)."""
        attended = len(ids) + (self.prefix_id(role) is not None)
        if role == "query" and self.query_expansion:
            ids = ids + [self.expansion_id] * (self.max_tokens(role) - len(ids))
        if self.prefix_id(role) is not None:
            ids = ids[:1] + [self.prefix_id(role)] + ids[1:]
        return ids, len(ids) if role == "query" and self.attend_to_expansion else attended

    def kept(self, ids: list[int], role: str) -> np.ndarray:
        """The rows of a framed input whose vectors are given: a query's all; a document's but for the
        skiplist's tokens."""
        if role == "query":
            return np.arange(len(ids))
        return np.flatnonzero(~np.isin(np.asarray(ids), self.skiplist_ids))
