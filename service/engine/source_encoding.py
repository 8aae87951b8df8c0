"""The encoder's part of a scheduler turn: the sources admitted this turn through the encoder, their
cross-attention K/V written into their sequences' cache rows. Texts of similar length go together
(padding costs as much as real tokens); audio windows, all as long, as many at once as the settings allow."""

from __future__ import annotations

import time

import numpy as np

from modeldir.tokenizer import pad_batch

from .batcher import split_by_length
from .generation_cache import GenerationCache
from .sequence import Sequence
from .steps import ModelCall, SchedulerSettings


def encode_sources(
    runner, cache: GenerationCache, admitted: list[Sequence], settings: SchedulerSettings
) -> list[ModelCall]:
    """-> the encoder calls made, for the metrics."""
    calls = []
    texts = [s for s in admitted if s.features is None]
    windows = [s for s in admitted if s.features is not None]
    for group in split_by_length(texts, settings.encode_split_cost, length=lambda s: len(s.prompt)):
        started = time.perf_counter()
        ids, mask = pad_batch([s.prompt for s in group], settings.pad_id)
        calls.append(_written(cache, group, started, runner.encode(ids, mask), int(ids.size)))
    at_once = settings.windows_per_encode
    for group in (windows[i : i + at_once] for i in range(0, len(windows), at_once)):
        started = time.perf_counter()
        encoded = runner.encode_features(np.stack([s.features for s in group]))
        calls.append(_written(cache, group, started, encoded, sum(s.source_length for s in group)))
    return calls


def _written(cache: GenerationCache, group: list[Sequence], started: float, encoded, positions: int) -> ModelCall:
    """The encoder's cross K/V of a group of sources into their rows; -> the call."""
    cache.write_cross(encoded.cross, [(h.row, i) for i, s in enumerate(group) for h in s.holders])
    seconds = time.perf_counter() - started
    return ModelCall("encode", len(group), positions, seconds, encoded.sent, encoded.fetched)
