"""The embedding batcher's running loop (engine/batcher.py EmbeddingBatcher) over a fake embed function whose
vectors are known functions of each text's ids: no model, no server."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.engine.batcher import BatchLimits, EmbeddingBatcher
from service.errors import QueueFull, Unavailable

from .health_record import HealthRecord
from .waits import wait_until

PAD = 0
POISON = 999  # a text holding this id makes the fake model fail its call
PATIENCE = 20.0  # seconds: only a broken batcher makes a test wait this long


def vector_of(ids: list[int]) -> np.ndarray:
    """What the fake model gives a text: the sum of its ids, its length, its first id."""
    return np.array([sum(ids), len(ids), ids[0]], np.float32)


class FakeEmbed:
    """embed(input_ids, attention_mask, extra, run_options) as the batcher calls it, in its model thread:
    vector_of each row's attended ids. Records each call's shape, texts and run options; fails a call that
    holds POISON; with `gate`, waits for it to open before giving its vectors (and says it has begun)."""

    def __init__(self, gate: threading.Event | None = None):
        self.gate, self.begun = gate, threading.Event()
        self.shapes: list[tuple[int, int]] = []
        self.texts: list[list[tuple[int, ...]]] = []
        self.options: list[object] = []

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray, extra: tuple[str, ...], options):
        lengths = attention_mask.sum(axis=1)
        assert (attention_mask == (np.arange(input_ids.shape[1]) < lengths[:, None])).all(), attention_mask
        assert (input_ids[attention_mask == 0] == PAD).all() and extra == ()
        texts = [row[:n].tolist() for row, n in zip(input_ids, lengths)]
        self.shapes.append(input_ids.shape)
        self.texts.append([tuple(t) for t in texts])
        self.options.append(options)
        self.begun.set()
        if self.gate is not None:
            assert self.gate.wait(PATIENCE), "the gate never opened"
        if any(POISON in t for t in texts):
            raise RuntimeError("fake model fault")
        return (np.stack([vector_of(t) for t in texts]),)

    @property
    def embedded(self) -> list[tuple[int, ...]]:
        return [text for call in self.texts for text in call]


@dataclass
class Batching:
    batcher: EmbeddingBatcher
    embed: FakeEmbed
    health: HealthRecord


def limits(**fields) -> BatchLimits:
    return BatchLimits(**{"max_batch_tokens": 4096, "max_batch_size": 32, "max_delay": 0.0, "max_queue": 256, **fields})


@contextlib.asynccontextmanager
async def batching(limits: BatchLimits, embed: FakeEmbed | None = None, start: bool = True, **options):
    """A batcher, its model thread one worker; stopped after."""
    embed, health = embed or FakeEmbed(), HealthRecord()
    with ThreadPoolExecutor(1) as executor:
        batcher = EmbeddingBatcher(embed, PAD, limits, executor, name="fake", health=health, **options)
        if start:
            batcher.start()
        try:
            yield Batching(batcher, embed, health)
        finally:
            if embed.gate is not None:
                embed.gate.set()
            await batcher.stop(Unavailable("the test is over"))


def run(main):
    return asyncio.run(asyncio.wait_for(main(), PATIENCE))


async def until(condition, what: str) -> None:
    """Wait for a condition of the loop's state (polled in a thread, so the loop runs meanwhile)."""
    await asyncio.to_thread(wait_until, condition, PATIENCE, what)


def texts_of(caller: int, lengths: list[int]) -> list[list[int]]:
    """Texts no other caller has: caller c's ids are 1000 * (c + 1) + their place."""
    return [[1000 * (caller + 1) + i * 10 + j for j in range(n)] for i, n in enumerate(lengths)]


def assert_vectors(results, texts: list[list[int]]) -> None:
    assert len(results) == len(texts)
    for embedded, ids in zip(results, texts):
        np.testing.assert_array_equal(embedded.vector, vector_of(ids))


def test_every_text_gets_its_own_vector_in_order_across_concurrent_callers():
    rng = np.random.default_rng(7)
    calls = [texts_of(c, rng.integers(1, 30, size=rng.integers(1, 9)).tolist()) for c in range(6)]

    async def main():
        async with batching(limits(max_batch_size=5, max_batch_tokens=80)) as b:
            results = await asyncio.gather(*(b.batcher.submit(texts) for texts in calls))
            assert b.batcher.queue_depth == 0 and b.batcher.running == []
        for result, texts in zip(results, calls):
            assert_vectors(result, texts)
        everything = sorted(tuple(t) for texts in calls for t in texts)
        assert sorted(b.embed.embedded) == everything  # each text ran once
        assert b.batcher.texts_run == len(everything) and b.batcher.batches_run == len(b.embed.shapes)
        assert len(b.embed.shapes) > 1  # the calls' texts were spread over several model calls
        batch_of = {tuple(t): i + 1 for i, call in enumerate(b.embed.texts) for t in call}
        for result, texts in zip(results, calls):
            assert [e.batch_id for e in result] == [batch_of[tuple(t)] for t in texts]
        assert set(b.health.calls) == {"succeeded"}

    run(main)


@given(
    lengths=st.lists(st.lists(st.integers(1, 64), min_size=1, max_size=8), min_size=1, max_size=6),
    max_batch_size=st.integers(1, 16),
    max_batch_tokens=st.integers(16, 512),
    max_attention_pairs=st.sampled_from([0, 4096, 20000]),
)
def test_model_calls_keep_the_batch_limits(lengths, max_batch_size, max_batch_tokens, max_attention_pairs):
    """Each call within the size, the token budget (padding counted) and the attention budget, unless one
    text alone is over them; every text runs once and gets its own vector."""
    calls = [texts_of(c, n) for c, n in enumerate(lengths)]
    bounds = limits(
        max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens, max_attention_pairs=max_attention_pairs
    )

    async def main():
        async with batching(bounds) as b:
            results = await asyncio.gather(*(b.batcher.submit(texts) for texts in calls))
        for result, texts in zip(results, calls):
            assert_vectors(result, texts)
        for texts, longest in zip(b.embed.texts, (shape[1] for shape in b.embed.shapes)):
            assert longest == max(len(t) for t in texts)
            assert len(texts) == 1 or bounds.fits(len(texts), longest), (len(texts), longest)
            assert len(texts) <= max_batch_size
        assert sorted(b.embed.embedded) == sorted(tuple(t) for texts in calls for t in texts)

    run(main)


def test_a_full_batch_runs_without_waiting_for_max_delay():
    async def main():
        async with batching(limits(max_batch_size=4, max_delay=3600.0)) as b:
            texts = texts_of(0, [3, 5, 2, 4])
            results = await b.batcher.submit(texts)  # would take an hour if it waited
        assert_vectors(results, texts)
        assert b.embed.shapes == [(4, 5)]

    run(main)


def test_a_full_queue_refuses_a_call_naming_its_limit():
    async def main():
        async with batching(limits(max_queue=4), start=False) as b:
            batcher = b.batcher
            with pytest.raises(QueueFull, match="0 texts are waiting; the queue holds 4"):
                await batcher.submit(texts_of(0, [1] * 5))  # more than the queue holds, at once
            first = asyncio.create_task(batcher.submit(texts_of(1, [2, 3, 4])))
            await until(lambda: batcher.queue_depth == 3, "three texts waiting")
            with pytest.raises(QueueFull, match="3 texts are waiting; the queue holds 4") as refused:
                await batcher.submit(texts_of(2, [5, 6]))  # none of it is taken
            assert refused.value.message == str(refused.value)
            assert batcher.queue_depth == 3
            last = asyncio.create_task(batcher.submit(texts_of(3, [7])))  # fits
            await until(lambda: batcher.queue_depth == 4, "four texts waiting")
            batcher.start()
            assert_vectors(await first, texts_of(1, [2, 3, 4]))
            assert_vectors(await last, texts_of(3, [7]))
        assert sorted(b.embed.embedded) == sorted(map(tuple, texts_of(1, [2, 3, 4]) + texts_of(3, [7])))

    run(main)


def test_a_cancelled_caller_leaves_the_queue_and_takes_no_ones_vectors():
    async def main():
        async with batching(limits(), start=False) as b:
            batcher = b.batcher
            calls = [texts_of(c, n) for c, n in enumerate([[4, 4], [4, 4, 4], [4]])]
            tasks = [asyncio.create_task(batcher.submit(texts)) for texts in calls]
            await until(lambda: batcher.queue_depth == 6, "six texts waiting")
            tasks[1].cancel()
            with pytest.raises(asyncio.CancelledError):
                await tasks[1]
            assert sorted(item.ids for item in batcher.waiting) == sorted(calls[0] + calls[2])
            batcher.start()
            assert_vectors(await tasks[0], calls[0])
            assert_vectors(await tasks[2], calls[2])
            assert batcher.queue_depth == 0
        assert sorted(b.embed.embedded) == sorted(map(tuple, calls[0] + calls[2]))  # the cancelled texts never ran
        assert b.embed.shapes == [(3, 4)]

    run(main)


def test_a_running_call_whose_callers_all_left_is_told_to_stop():
    gate = threading.Event()
    embed = FakeEmbed(gate)

    async def main():
        async with batching(limits(), embed, make_run_options=lambda: types.SimpleNamespace(terminate=False)) as b:
            batcher = b.batcher
            leaving = asyncio.create_task(batcher.submit(texts_of(0, [3, 3])))
            await asyncio.to_thread(embed.begun.wait, PATIENCE)
            options = embed.options[0]
            assert options.terminate is False
            staying = asyncio.create_task(batcher.submit(texts_of(1, [3])))  # waits for the next call
            await until(lambda: batcher.queue_depth == 1, "the next text waiting")
            leaving.cancel()
            with pytest.raises(asyncio.CancelledError):
                await leaving
            assert options.terminate is True  # every caller of the running call has gone
            gate.set()
            assert_vectors(await staying, texts_of(1, [3]))
            assert embed.options[1].terminate is False
        assert embed.texts == [list(map(tuple, texts_of(0, [3, 3]))), list(map(tuple, texts_of(1, [3])))]

    run(main)


def test_a_failing_call_fails_its_callers_reports_it_and_the_next_call_works():
    async def main():
        async with batching(limits(), start=False) as b:
            batcher = b.batcher
            poisoned, beside = [[5, POISON, 6]], texts_of(1, [3])  # one model call: both fail
            apart = texts_of(2, [200])  # a length of its own: another model call, which passes
            tasks = [asyncio.create_task(batcher.submit(texts)) for texts in (poisoned, beside, apart)]
            await until(lambda: batcher.queue_depth == 3, "three texts waiting")
            batcher.start()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert [str(r) for r in results[:2]] == ["fake model fault"] * 2 and all(
                isinstance(r, RuntimeError) for r in results[:2]
            )
            assert_vectors(results[2], apart)
            assert len(b.embed.shapes) == 2 and b.health.calls == ["failed", "succeeded"]
            after = texts_of(3, [2, 7])
            assert_vectors(await batcher.submit(after), after)
            assert b.health.calls == ["failed", "succeeded", "succeeded"] and batcher.queue_depth == 0

    run(main)
