"""The generation cache's books and moves, and the text stream's hold-back, as plain objects."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.engine.generation_cache import MIN_SOURCE_CAPACITY, CacheFull, CacheGeometry, GenerationCache
from service.engine.text_stream import TextStream

GEOMETRY = CacheGeometry(n_layers=2, n_heads=2, d_head=8, target_tokens=10, source_tokens=40)


class Holder:
    """What holds a row: the cache keeps its `row` up to date."""

    def __init__(self, name: str = ""):
        self.name, self.row = name, None


def fill(cache: GenerationCache, row: int, marker: float, steps: int) -> None:
    """Write `steps` positions of `marker` into a row, as decode steps would."""
    for buffer in cache.self_keys + cache.self_values:
        buffer[row, :, cache.lengths[row] : cache.lengths[row] + steps] = marker
    cache.lengths[row] += steps
    keys = [np.full((2, cache.source_lengths[row], 8), marker, np.float32)] * 2
    cache.write_cross(row, keys, keys)


def test_rows_are_allocated_then_refused_when_full():
    cache = GenerationCache(GEOMETRY, rows=2)
    assert cache.capacity_tokens == 2 * 50 and cache.free_rows == 2
    first, second = Holder(), Holder()
    assert cache.allocate(first, 5, 3) == 0 and cache.allocate(second, 7, 9) == 1
    assert (first.row, second.row) == (0, 1) and cache.holders == [first, second]
    assert cache.reserved_tokens == (5 + 1 + 3) + (7 + 1 + 9) and cache.usage_ratio == pytest.approx(26 / 100)
    with pytest.raises(CacheFull):
        cache.allocate(Holder(), 1, 1)
    assert not cache.fits(41, 1) and not cache.fits(1, 10) and cache.fits(40, 9)


def test_releasing_moves_the_last_row_with_its_data_and_its_holder():
    cache = GenerationCache(GEOMETRY, rows=4)
    holders = [Holder(str(row)) for row in range(3)]
    for row, marker in enumerate((1.0, 2.0, 3.0)):
        cache.allocate(holders[row], 3 + row, 5)
        fill(cache, row, marker, steps=2 + row)
    cache.release(holders[0])  # row 2 moves into row 0
    assert holders[0].row is None and holders[2].row == 0 and cache.holders == [holders[2], holders[1]]
    assert cache.used == 2 and cache.lengths[0] == 4 and cache.source_lengths[0] == 5
    assert (cache.self_keys[1][0, :, :4] == 3.0).all() and (cache.cross_values[0][0, :, :5] == 3.0).all()
    assert cache.source_mask[0].tolist()[:6] == [1, 1, 1, 1, 1, 0]
    cache.release(holders[1])  # the last row: nothing moves
    assert cache.used == 1 and holders[2].row == 0 and holders[1].row is None
    inputs = cache.step_inputs()
    assert inputs["past_lengths"].tolist() == [4] and inputs["self"][0].shape == (1, 2, 10, 8)
    assert np.shares_memory(inputs["self"][0], cache.self_keys[0])  # views, not copies


def test_the_source_capacity_follows_the_longest_running_source():
    cache = GenerationCache(GEOMETRY, rows=3)
    assert cache.source_capacity == MIN_SOURCE_CAPACITY
    short, long = Holder(), Holder()
    cache.allocate(short, 10, 2)
    fill(cache, 0, 7.0, steps=1)
    cache.allocate(long, 33, 2)  # doubles to 32, then 64, capped at the geometry's 40
    assert cache.source_capacity == 40
    assert (cache.cross_keys[0][0, :, :10] == 7.0).all()  # kept through the growth
    assert cache.step_inputs()["encoder_attention_mask"].sum(axis=1).tolist() == [10, 33]
    cache.release(long)
    cache.release(short)
    assert cache.source_capacity == MIN_SOURCE_CAPACITY  # empty: back to the minimum


WORDS = ["one ", "two ", "three ", "stop", "here ", "sto", "p"]


@given(ids=st.lists(st.integers(0, len(WORDS) - 1), max_size=12))
def test_streamed_text_adds_up_and_never_contains_a_stop_sequence(ids):
    stream = TextStream(lambda tokens: "".join(WORDS[t] for t in tokens), stop=("stop",))
    sent = "".join(stream.update(ids[: i + 1]) for i in range(len(ids))) + stream.update(ids, final=True)
    full = "".join(WORDS[t] for t in ids)
    expected = full[: full.index("stop")] if "stop" in full else full
    assert sent == expected and "stop" not in sent
    assert stream.stopped == ("stop" in full)


def test_half_characters_and_possible_stop_prefixes_are_held_back():
    stream = TextStream(lambda tokens: "".join(tokens), stop=("END",))
    assert stream.update(["caf\ufffd"]) == "caf"
    assert stream.update(["café", " E"]) == "é "
    assert stream.update(["café", " E", "N"]) == ""
    assert stream.update(["café", " E", "N", "D"]) == "" and stream.stopped
    assert stream.sent == "café "
