"""Whether each model works: consecutive failed model calls turn it unhealthy, and a probe through the
serving path (the runner call or scheduler step that requests use) turns it healthy again."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import TYPE_CHECKING

import numpy as np

from modeldir.tokenizer import pad_batch

from ..engine.sequence import GenerationParams

if TYPE_CHECKING:
    from .served_models import EmbeddingModel, ServedModel

PROBE_TEXT = "1"  # a token or two in every tokenizer


class ModelHealth:
    """Consecutive failed model calls. Past the threshold the model is unhealthy; any call that passes
    (a request's, or a probe's) makes it healthy again."""

    def __init__(self, threshold: int, on_change):
        self.threshold, self.on_change = threshold, on_change
        self.failures = 0
        self.healthy = True

    def succeeded(self) -> None:
        self.failures = 0
        if not self.healthy:
            self.healthy = True
            self.on_change()

    def failed(self) -> None:
        self.failures += 1
        if self.healthy and self.failures >= self.threshold:
            self.healthy = False
            self.on_change()


def run_encoder(model: EmbeddingModel, texts: list[str]) -> None:
    """One call of the embedding runner, as the batcher makes it (blocking: run it in the model thread)."""
    ids, mask = pad_batch([e.ids for e in model.tokenizer.encode(texts)], model.special.pad)
    (vectors,) = model.runner.run(ids, mask)
    if not np.isfinite(vectors).all():
        raise RuntimeError(f"model {model.name}: the encoder gave non-finite embeddings")


async def probe(model: ServedModel, executor: Executor) -> None:
    """A small real call through the model's serving path; raises if it fails. An embedding model: one
    runner call in the model thread. A seq2seq model: a one-token generation through the scheduler (the
    cache, the runner's encoder and decoder step, token choice), counted in no metric."""
    if model.batched:  # embeddings and cross-encoders
        await asyncio.get_running_loop().run_in_executor(executor, run_encoder, model, [PROBE_TEXT])
        return
    (encoded,) = model.tokenizer.encode([PROBE_TEXT])
    params = GenerationParams(max_new_tokens=1, ignore_eos=True, stream=False, probe=True)
    async for event in model.scheduler.generate(encoded.ids, params):
        last = event
    if last.finish_reason is None or len(last.token_ids) != 1:
        raise RuntimeError(f"model {model.name}: the probe generation gave {last}")
