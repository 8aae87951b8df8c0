"""The generation cache: its books, and its rows in device memory as they are admitted, released, grown and
shrunk (cache_rows.py's CPU cache)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.engine.generation_cache import MIN_SOURCE_CAPACITY, TARGET_STEP, CacheFull

from .cache_rows import GEOMETRY, Holder, admit, answers_cache, assert_holds, encoded, new_cache, views


def test_rows_are_allocated_then_refused_when_full():
    cache = new_cache(rows=2)
    assert cache.capacity_tokens == 2 * 50 and cache.free_rows == 2
    first, second = Holder(), Holder()
    assert cache.allocate(first, 5, 3) == 0 and cache.allocate(second, 7, 9) == 1
    assert (first.row, second.row) == (0, 1) and cache.holders == [first, second]
    assert cache.reserved_tokens == (5 + 1 + 3) + (7 + 1 + 9) and cache.usage_ratio == pytest.approx(26 / 100)
    with pytest.raises(CacheFull):
        cache.allocate(Holder(), 1, 1)
    assert not cache.fits(41, 1) and not cache.fits(1, 10) and cache.fits(40, 9)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_releasing_moves_the_last_row_with_its_data_and_its_holder(precision):
    cache = new_cache(rows=4, precision=precision)
    holders = [Holder(marker) for marker in (1.0, 2.0, 3.0)]
    for row, holder in enumerate(holders):
        cache.allocate(holder, 3 + row, 5)
        cache.write_cross(
            encoded([holder.marker], 3 + row, np.float16 if precision == "fp16" else np.float32), [(holder.row, 0)]
        )
        for buffer in views(cache)[0]:
            buffer[row, :, : 2 + row] = holder.marker
        cache.lengths[row] = 2 + row
    cache.release(holders[0])  # row 2 moves into row 0, on the device
    assert holders[0].row is None and holders[2].row == 0 and cache.holders == [holders[2], holders[1]]
    assert cache.used == 2 and cache.lengths[0] == 4 and cache.source_length(0) == 5
    assert_holds(cache, holders[2])
    assert_holds(cache, holders[1])
    cache.release(holders[1])  # the last row: nothing moves
    assert cache.used == 1 and holders[2].row == 0 and holders[1].row is None
    assert_holds(cache, holders[2])


def test_the_source_capacity_follows_the_longest_running_source():
    cache = new_cache(rows=3)
    assert cache.source_capacity == MIN_SOURCE_CAPACITY
    short, long = Holder(7.0), Holder(8.0)
    admit(cache, short, 10, steps=1)
    admit(cache, long, 33)  # doubles to 32, then 64, capped at the geometry's 40: re-laid on the device
    assert cache.source_capacity == 40 and views(cache)[1][0].shape == (3, 2, 40, 8)
    assert_holds(cache, short)  # kept through the growth
    assert all((buffer[short.row, :, 10:] == 0).all() for buffer in views(cache)[1])  # padded with zeros
    assert_holds(cache, long)
    cache.release(long)
    cache.release(short)
    assert cache.source_capacity == MIN_SOURCE_CAPACITY  # empty: back to the minimum


def test_the_cross_buffers_hold_as_many_sources_as_their_lengths_allow():
    """96 source positions over 6 rows: six short sources at once; a long one waits while more than one
    other runs, then runs beside one, and the capacity falls back to the short one's when it leaves."""
    cache = new_cache(rows=6, cross_tokens=96)
    assert [cache.memory.cross_rows_at(c) for c in (16, 32, 40)] == [6, 3, 2]
    assert cache.capacity_tokens == 6 * 10 + 96
    shorts = [Holder(float(i + 1)) for i in range(6)]
    for holder in shorts:
        assert cache.admits(10, 1, 5)
        admit(cache, holder, 10, steps=2)
    assert views(cache)[1][0].shape == (6, 2, 16, 8) and not cache.admits(10, 1, 5)  # no row free
    for holder in shorts[3:]:
        cache.release(holder)
    assert cache.free_rows == 3 and not cache.admits(33, 1, 5)  # three sources of 40 positions do not fit 96
    with pytest.raises(CacheFull):
        cache.allocate(Holder(9.0), 33, 5)
    assert (cache.used, cache.groups, cache.source_capacity) == (3, 3, 16)  # nothing changed
    for holder in shorts[1:3]:
        cache.release(holder)
    long = Holder(9.0)
    assert cache.admits(33, 1, 5)
    admit(cache, long, 33, steps=1)
    assert cache.source_capacity == 40 and views(cache)[1][0].shape == (2, 2, 40, 8)
    assert not cache.admits(10, 1, 5)  # two sources at 40 positions fill the room
    assert_holds(cache, shorts[0])
    assert_holds(cache, long)
    cache.release(long)  # the longest left: the capacity follows the short one's
    assert cache.source_capacity == 16 and views(cache)[1][0].shape == (6, 2, 16, 8)
    assert_holds(cache, shorts[0])
    assert cache.admits(10, 1, 5)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_rows_are_as_long_as_the_answers_asked_for(precision):
    """Two rows of the longest answer; more rows once shorter answers need them (the rows laid out anew,
    one layer at a time, their K/V kept); a longer answer waits until its rows fit, then the rows grow."""
    assert TARGET_STEP == 32
    cache = answers_cache(precision=precision)
    assert cache.target_capacity == 100 and cache.rows_at_longest == 2 and cache.capacity_tokens == 200 + 240
    first, second = Holder(1.0), Holder(2.0)
    admit(cache, first, 10, steps=3, new=20)
    admit(cache, second, 12, steps=5, new=20)
    assert cache.target_capacity == 100 and cache.free_rows == 0  # rows enough: nothing laid out anew
    assert not cache.admits(10, 1, 99) and cache.admits(10, 1, 20) and cache.admits(10, 4, 31)
    assert not cache.admits(10, 5, 20)  # 6 rows of 32 at the most
    others = [Holder(float(3 + i)) for i in range(4)]
    admit(cache, others[0], 8, steps=2, new=31)  # 32 positions: six rows
    assert cache.target_capacity == 32 and views(cache)[0][0].shape == (6, 2, 32, 8)
    for holder in (first, second, others[0]):
        assert_holds(cache, holder)
    for holder in others[1:]:
        admit(cache, holder, 8, steps=1, new=20)
    assert cache.used == 6 and not cache.admits(8, 1, 1)
    with pytest.raises(CacheFull):
        cache.allocate(Holder(), 8, 1)
    for holder in others:
        cache.release(holder)
    assert cache.admits(8, 1, 60) and not cache.admits(8, 1, 70)  # 3 rows of 64, 2 of 96: and 2 run
    cache.release(second)
    assert cache.admits(8, 1, 70)
    long = Holder(9.0)
    admit(cache, long, 8, steps=4, new=70)
    assert cache.target_capacity == 96 and views(cache)[0][0].shape == (2, 2, 96, 8)
    assert_holds(cache, first)
    assert_holds(cache, long)
    assert cache.reserved_tokens == (10 + 1 + 20) + (8 + 1 + 70)


@given(
    operations=st.lists(
        st.tuples(st.sampled_from(["admit", "release", "step"]), st.integers(0, 7), st.integers(1, 99)),
        max_size=30,
    )
)
def test_every_row_keeps_its_data_as_the_rows_grow_and_shrink(operations):
    """Random answers of 1-99 new tokens come and go with steps between: every holder's row keeps its own
    K/V through every re-layout; the rows are as long as the longest running answer asks, or longer only
    where the rows fit; an answer that does not fit is refused (CacheFull) and changes nothing."""
    cache = answers_cache()
    live: list[Holder] = []
    marker = 0.0
    for operation, pick, new in operations:
        if operation == "admit":
            if not cache.admits(8, 1, new):
                books = (cache.used, cache.target_capacity)
                with pytest.raises(CacheFull):
                    cache.allocate(Holder(), 8, new)
                assert (cache.used, cache.target_capacity) == books
                continue
            marker += 1.0
            live.append(Holder(marker))
            admit(cache, live[-1], 8, steps=min(pick % 3, new), new=new)
        elif operation == "release" and live:
            cache.release(live.pop(pick % len(live)))
        elif operation == "step" and live and (cache.lengths[: cache.used] < cache.answer[: cache.used] - 1).all():
            for buffer in views(cache)[0]:
                for holder in live:
                    buffer[holder.row, :, cache.lengths[holder.row]] = holder.marker
            cache.advance(cache.used)
        for holder in live:
            assert_holds(cache, holder)
        longest = int(cache.answer[: cache.used].max(initial=0))
        assert longest <= cache.target_capacity <= 100 and cache.used <= cache.memory.self_rows_at(
            cache.target_capacity
        )
        assert views(cache)[0][0].shape[:3] == (
            cache.memory.self_rows_at(cache.target_capacity),
            2,
            cache.target_capacity,
        )


@given(
    operations=st.lists(
        st.tuples(st.sampled_from(["admit", "share", "release", "step"]), st.integers(0, 7), st.integers(1, 40)),
        max_size=30,
    )
)
@pytest.mark.parametrize("cross_tokens", [0, 64])
def test_every_row_keeps_its_own_data_whatever_comes_and_goes(cross_tokens, operations):
    """Random admissions (sources 1-40: the capacity grows and shrinks; some rows sharing another's group,
    as beams do), releases and steps: every holder's row has its own K/V and its group its source's at
    every moment, and the books agree with the row table. With cross room for 4 sources of 16 positions
    or 1 of 40, a source that does not fit is refused (CacheFull) and changes nothing."""
    cache = new_cache(rows=4, cross_tokens=cross_tokens)
    live: list[Holder] = []
    marker = 0.0
    for operation, pick, source in operations:
        if operation in ("admit", "share") and cache.free_rows:
            shares = live[pick % len(live)] if operation == "share" and live else None
            source = source if shares is None else cache.source_length(shares.row)
            if shares is None and not cache.admits(source, 1, 5):
                books = (cache.used, cache.groups, cache.source_capacity)
                with pytest.raises(CacheFull):
                    cache.allocate(Holder(), source, 5)
                assert (cache.used, cache.groups, cache.source_capacity) == books
                continue
            marker += 1.0
            live.append(Holder(marker))
            admit(cache, live[-1], source, steps=pick % 3, shares=shares)
        elif operation == "release" and live:
            cache.release(live.pop(pick % len(live)))
        elif operation == "step" and live and cache.lengths[: cache.used].max() < GEOMETRY.target_tokens:
            for buffer in views(cache)[0]:  # as a decode step writes
                for holder in live:
                    buffer[holder.row, :, cache.lengths[holder.row]] = holder.marker
            cache.advance(cache.used)
        assert sorted(h.row for h in live) == list(range(len(live))) and cache.holders == sorted(
            live, key=lambda h: h.row
        )
        for holder in live:
            assert_holds(cache, holder)
        assert cache.groups == len({h.cross_marker for h in live})
        assert (
            np.bincount(cache.group_of[: cache.used], minlength=cache.groups) == cache.members[: cache.groups]
        ).all()
        longest = max([cache.source_length(h.row) for h in live], default=0)
        assert longest <= cache.source_capacity <= max(2 * longest, MIN_SOURCE_CAPACITY)
        assert cache.groups <= cache.memory.cross_rows_at(cache.source_capacity)
