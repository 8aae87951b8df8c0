"""What an embedding call gives beside the pooled vector, from the same pass: sparse lexical weights
(FlagEmbedding's bge-m3: a weight per token, the largest per vocabulary id, special tokens dropped, weights
above 0 kept; SPLADE: the graph's weight per vocabulary id, those above 0) and multi-vectors (bge-m3: a vector
per token but the first; ColBERT-style models: as modeldir/late_interaction.py keeps them); and the types
vectors are given in, as sentence-transformers' quantize_embeddings defines them (float; int8 and uint8: a
byte a value, within calibrated ranges; binary and ubinary: a bit a value)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import invalid
from ..models.served_models import OUTPUT_OF_GRAPH

OUTPUTS = ("dense", "sparse", "multi_vector", "token_embeddings")
EMBEDDING_TYPES = ("float", "int8", "uint8", "binary", "ubinary")


@dataclass(frozen=True)
class SparseVector:
    indices: np.ndarray  # (n,) int64: vocabulary ids, ascending
    values: np.ndarray  # (n,) float32, each above 0


def check_outputs(outputs: tuple[str, ...], model) -> tuple[str, ...]:
    """The outputs asked for, each named once and given by the model; none asked: its first (dense, or a
    SPLADE model's sparse weights)."""
    if not outputs:
        return model.outputs[:1]
    for name in outputs:
        if name not in OUTPUTS:
            raise invalid("outputs", f"{name!r} is not an output; one of {', '.join(OUTPUTS)}")
        if name not in model.outputs:
            raise invalid(
                "outputs", f"model {model.name!r} gives no {name} output; it gives {', '.join(model.outputs)}"
            )
    if len(set(outputs)) != len(outputs):
        raise invalid("outputs", f"{list(outputs)} names an output twice")
    return tuple(outputs)


def check_embedding_type(embedding_type: str, outputs: tuple[str, ...], model, normalize: bool, dimensions: int) -> str:
    """The type of the dense and multi-vector outputs asked for (sparse weights stay float). int8 and uint8
    need the model's calibrated ranges of each, which hold for its vectors as it normalises them by default
    and with all their dimensions. (Token embeddings stay float too.)"""
    if embedding_type not in EMBEDDING_TYPES:
        raise invalid("embedding_type", f"{embedding_type!r}; one of {', '.join(EMBEDDING_TYPES)}")
    if embedding_type in ("int8", "uint8"):
        if any(o in ("dense", "multi_vector") and o not in model.int8_ranges for o in outputs):
            raise invalid("embedding_type", f"model {model.name!r} has no int8 ranges; export it again to make them")
        if "dense" in outputs and (normalize != model.normalize_by_default or dimensions != model.dimensions):
            raise invalid(
                "embedding_type",
                f"{embedding_type} takes model {model.name!r}'s own normalisation and all its {model.dimensions} "
                "dimensions (its ranges were calibrated on those); leave normalize and dimensions unset",
            )
    return embedding_type


def sparse_vector(ids: list[int], weights: np.ndarray, special: frozenset[int]) -> SparseVector:
    """One input's token weights (its row, padding included) -> the largest weight per id, above 0, of
    every id but the special tokens'."""
    ids_array = np.asarray(ids, dtype=np.int64)
    weights = weights[: len(ids)]
    keep = (weights > 0) & ~np.isin(ids_array, list(special))
    unique, where = np.unique(ids_array[keep], return_inverse=True)
    largest = np.zeros(len(unique), dtype=np.float32)
    np.maximum.at(largest, where, weights[keep])
    return SparseVector(unique, largest)


def graph_output(model, name: str) -> str:
    """The model's graph output that gives `name` (sparse: token_weights or vocabulary_weights)."""
    return next(graph for graph in model.runner.extra if OUTPUT_OF_GRAPH[graph] == name)


def sparse_of(graph: str, ids: list[int], row: np.ndarray, special: frozenset[int]) -> SparseVector:
    """One input's sparse vector from its row of the graph's output: bge-m3's token weights, or SPLADE's
    weight per vocabulary id (kept above 0, special tokens' ids included, as SparseEncoder keeps them)."""
    if graph == "token_weights":
        return sparse_vector(ids, row, special)
    indices = np.flatnonzero(row > 0)
    return SparseVector(indices, row[indices])


def multi_vector(model, role: str | None, ids: list[int], rows: dict[str, np.ndarray]) -> np.ndarray:
    """One input's multi-vectors from its rows of the graph's outputs (padding included): bge-m3's every
    token but the first, (tokens - 1, dim); a ColBERT-style model's those its role keeps (late_interaction)."""
    if model.colbert:
        return rows["token_vectors"][model.colbert.kept(ids, role)]
    return rows["multi_vectors"][: len(ids) - 1]


def quantized(vectors: np.ndarray, embedding_type: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """(..., d) float32 -> the type asked, as quantize_embeddings makes it: float as it is; uint8 / int8 each
    value's place among 256 steps between its dimension's calibrated least and largest (ranges (2, d)),
    clipped (int8: minus 128); binary / ubinary one bit a value (1: above 0), packed 8 to a byte along the
    last axis (binary: each byte minus 128, int8)."""
    if embedding_type == "float":
        return vectors
    if embedding_type in ("int8", "uint8"):
        starts = ranges[0]
        steps = (ranges[1] - starts) / 255
        steps = np.where(steps == 0, 1, steps)
        steps_taken = np.clip(np.floor((vectors - starts) / steps), 0, 255)
        return steps_taken.astype(np.uint8) if embedding_type == "uint8" else (steps_taken - 128).astype(np.int8)
    packed = np.packbits(vectors > 0, axis=-1)
    return packed if embedding_type == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)
