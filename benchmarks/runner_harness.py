"""The serving runner of a seq2seq model outside a server, with a cache of its own, for benchmarks that
time decode steps: the same sessions, cache memory and cache graphs as the server uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from modeldir.files import CACHE_GRAPHS, open_model_dir
from service.engine.generation_cache import MIN_SOURCE_CAPACITY, GenerationCache
from service.runner.cache_memory import CacheGeometry, one_buffer_resize
from service.runner.seq2seq import Seq2SeqRunner
from service.runner.sessions import SessionSettings, create_session


class Row:
    row = None


class RunnerHarness:
    def __init__(
        self,
        model_dir: Path,
        threads: int,
        spinning: bool = True,
        precision: str = "fp32",
        device: str = "cpu",
        profile_prefix: str = "",
    ):
        """profile_prefix: ONNX Runtime profiles every session's runs there (SessionSettings)."""
        files = open_model_dir(model_dir, precision=precision)
        self.config = c = files.config
        settings = SessionSettings(
            device=device, intra_op_threads=threads, spinning=spinning, profile_prefix=profile_prefix
        )
        self.sessions = {role: create_session(path, settings) for role, path in files.graphs.items()}
        self.sessions["cache_resize"] = create_session(one_buffer_resize(files.graphs["cache_resize"]), settings)
        graphs = {role: self.sessions[role] for role in CACHE_GRAPHS}
        encoder, decoder = self.sessions["encoder"], self.sessions["decoder"]
        self.runner = Seq2SeqRunner(encoder, decoder, graphs, c.n_decoder_layers, precision)
        self.heads, self.d_head = c.n_heads, c.d_head

    def cache(self, ids: np.ndarray, mask: np.ndarray, target_tokens: int) -> GenerationCache:
        """A cache of one row per source (right-padded ids and mask), their cross K/V written in."""
        c, rows = self.config, len(ids)
        geometry = CacheGeometry(
            c.n_decoder_layers, self.heads, self.d_head, target_tokens, ids.shape[1], self.runner.precision
        )
        memory = self.runner.cache_memory(geometry, rows, MIN_SOURCE_CAPACITY)
        cache = GenerationCache(memory)
        for length in mask.sum(axis=1).tolist():
            cache.allocate(Row(), length, target_tokens - 1)
        cache.write_cross(self.runner.encode(ids, mask).cross, [(row, row) for row in range(rows)])
        return cache

    def step(self, cache: GenerationCache, tokens: np.ndarray):
        """One decode step of every row: tokens (rows, T) -> the runner's StepOutput; the books advance."""
        rows = cache.used
        out = self.runner.step(tokens, cache.lengths[:rows], cache.cross_layout(rows), [], cache.memory, rows)
        cache.advance(rows)
        return out

    def greedy(self, ids: np.ndarray, mask: np.ndarray, steps: int) -> list[list[int]]:
        """Greedy decoding of a batch in lockstep through the cache: -> each row's tokens."""
        cache = self.cache(ids, mask, steps + 1)
        tokens = np.full((len(ids), 1), self.config.bos_id, np.int64)
        out = []
        for _ in range(steps):
            tokens = self.step(cache, tokens).next_tokens[:, None]
            out.append(tokens[:, 0])
        return np.stack(out, axis=1).tolist()
