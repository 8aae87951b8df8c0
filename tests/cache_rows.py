"""A small generation cache for its tests (CPU OrtValues, moved by the model's cache graphs, as on CUDA), holders
whose rows carry a marker, and what writes and checks their K/V."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort

from model.export.cache_graphs import CACHE_GRAPHS
from service.engine.generation_cache import MIN_SOURCE_CAPACITY, GenerationCache
from service.runner.cache_memory import CacheGeometry, CacheMemory, one_buffer_resize

GEOMETRY = CacheGeometry(n_layers=2, n_heads=2, d_head=8, target_tokens=10, source_tokens=40)
SESSIONS = {
    precision: {
        role: ort.InferenceSession(
            (one_buffer_resize if role == "cache_resize" else bytes)(
                make(GEOMETRY.n_layers, precision).SerializeToString()
            ),
            providers=["CPUExecutionProvider"],
        )
        for role, make in CACHE_GRAPHS.items()
    }
    for precision in ("fp32", "fp16")
}


class Holder:
    """What holds a row: the cache keeps its `row` up to date. marker: what its K/V hold; cross_marker:
    what its source's cross K/V hold (another holder's, when it shares that holder's group)."""

    def __init__(self, marker: float = 0.0):
        self.marker, self.cross_marker, self.row = marker, marker, None


def new_cache(rows: int, precision: str = "fp32", cross_tokens: int = 0) -> GenerationCache:
    """cross_tokens: the cross buffers' source positions (0: each row room for the longest source)."""
    g = dataclasses.replace(GEOMETRY, precision=precision)
    return GenerationCache(
        CacheMemory(g, rows, "cpu", SESSIONS[precision], MIN_SOURCE_CAPACITY, cross_tokens=cross_tokens)
    )


def answers_cache(rows: int = 6, self_tokens: int = 200, precision: str = "fp32") -> GenerationCache:
    """A cache of answers up to 99 new tokens (100 positions: TARGET_STEP's 32, 64 and 96, then 100), whose
    self-attention buffers hold `self_tokens` positions: 6 rows of 32, 3 of 64, 2 of 96 or 100."""
    g = dataclasses.replace(GEOMETRY, target_tokens=100, precision=precision)
    return GenerationCache(
        CacheMemory(
            g, rows, "cpu", SESSIONS[precision], MIN_SOURCE_CAPACITY, cross_tokens=rows * 40, self_tokens=self_tokens
        )
    )


def views(cache: GenerationCache) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The buffers as numpy views (CPU OrtValues only): self-attention, cross-attention."""
    m = cache.memory
    return [v.numpy() for v in m.self_buffers], [v.numpy() for v in m.cross_buffers]


def encoded(markers: list[float], length: int, dtype=np.float32) -> list[ort.OrtValue]:
    """An encoder output for a batch of sources, each item filled with its marker: (B, H, length, Dh)."""
    g = GEOMETRY
    batch = np.stack([np.full((g.n_heads, length, g.d_head), m, dtype) for m in markers])
    return [ort.OrtValue.ortvalue_from_numpy(batch.copy()) for _ in range(2 * g.n_layers)]


def admit(
    cache: GenerationCache, holder: Holder, source: int, steps: int = 0, shares: Holder | None = None, new: int = 5
) -> None:
    """A sequence's row, of up to `new` steps: its cross K/V written (its marker) unless it shares the group
    of `shares` (whose source it has), and `steps` decode steps' K/V (its marker)."""
    cache.allocate(holder, source, new, shares=shares)
    if shares is None:
        cache.write_cross(encoded([holder.marker], source, cache.memory.dtype), [(holder.row, 0)])
    else:
        holder.cross_marker = shares.cross_marker
    self_views, _ = views(cache)
    for buffer in self_views:  # as a decode step writes: at the row's filled length
        buffer[holder.row, :, cache.lengths[holder.row] : cache.lengths[holder.row] + steps] = holder.marker
    cache.lengths[holder.row] += steps


def assert_holds(cache: GenerationCache, holder: Holder) -> None:
    """The holder's row has its own K/V at the filled positions, and its group's cross row its source's
    (beyond the source's length, the row holds what the encoder gave for padding, which the decoder masks)."""
    self_views, cross_views = views(cache)
    row, filled, source = holder.row, cache.lengths[holder.row], cache.source_length(holder.row)
    group = cache.group_of[row]
    assert group < cache.groups
    for buffer in self_views:
        assert (buffer[row, :, :filled] == holder.marker).all()
    for buffer in cross_views:
        assert (buffer[group, :, :source] == holder.cross_marker).all()
