"""The generation cache: its books, and its rows in device memory (CPU OrtValues here, moved by the
model's cache graphs, as on CUDA)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st

from model.export.cache_graphs import CACHE_GRAPHS
from service.engine.generation_cache import MIN_SOURCE_CAPACITY, TARGET_STEP, CacheFull, GenerationCache
from service.runner.cache_memory import CacheGeometry, CacheMemory, CrossLayout, filled_positions, one_buffer_resize

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


def test_beams_share_one_copy_of_their_source():
    cache = new_cache(rows=4)
    beams = [Holder(5.0), Holder(5.0), Holder(5.0)]
    for beam in beams:
        cache.allocate(beam, 6, 5, shares=beams[0] if beam is not beams[0] else None)
    other = Holder(4.0)
    cache.allocate(other, 9, 5)
    assert cache.groups == 2 and list(cache.group_of[:4]) == [0, 0, 0, 1] and list(cache.members[:2]) == [3, 1]
    # One encoder call for two sources: the beams take item 1, the other sequence item 0.
    cache.write_cross(encoded([4.0, 5.0], 9), [(b.row, 1) for b in beams] + [(other.row, 0)])
    for holder in beams + [other]:
        assert_holds(cache, holder)
    layout = cache.cross_layout(4)  # 2 groups of 3 query slots: the beams', and the other's with 2 spare
    assert list(layout.source_lengths) == [6, 9] and list(layout.row_slots) == [0, 1, 2, 3]
    assert list(layout.query_slots) == [0, 1, 2, 3, 0, 0]
    cache.release(beams[0])  # the last row (the other) moves in; the beams' group stays
    assert cache.groups == 2 and other.row == 0 and cache.group_of[0] == 1
    cache.release(beams[1])
    cache.release(beams[2])  # the beams' group closes; the other's moves into cross row 0
    assert cache.groups == 1 and other.row == 0 and cache.group_of[0] == 0
    assert_holds(cache, other)


@given(groups=st.lists(st.integers(0, 5), min_size=1, max_size=40))
def test_a_layout_puts_each_row_s_query_in_its_group_s_block(groups):
    """Any rows in any groups (renumbered 0..G-1 by first appearance): each row's slot lies in its group's
    block of W slots, no two rows share a slot, and query_slots reads each row back from its slot."""
    first_seen = {g: i for i, g in reversed(list(enumerate(dict.fromkeys(groups))))}
    group_of = np.array([first_seen[g] for g in groups], np.int32)
    count = len(first_seen)
    layout = CrossLayout.of_rows(group_of, np.arange(1, count + 1, dtype=np.int32))
    width = int(np.bincount(group_of).max())
    assert layout.groups == count and len(layout.query_slots) == count * width
    assert (layout.row_slots // width == group_of).all() and len(set(layout.row_slots.tolist())) == len(groups)
    assert (layout.query_slots[layout.row_slots] == np.arange(len(groups))).all()
    assert ((layout.query_slots >= 0) & (layout.query_slots < len(groups))).all()


def test_beam_rows_follow_their_parents_copying_rows_on_the_device():
    cache = new_cache(rows=3)
    beams = [Holder(float(i + 1)) for i in range(3)]
    for beam in beams:
        admit(cache, beam, 4, steps=3)
    for buffer in views(cache)[0]:
        buffer[2, :, 3:] = 99.0  # past row 2's filled positions: what a copy must leave behind
    ordered = cache.follow_parents(beams, [1, 2, 2])  # beam 0 died; beam 2 has two children
    assert [b.row for b in ordered] == [1, 2, 0]  # the second child of beam 2 takes row 0, with a copy
    self_views, cross_views = views(cache)
    for buffer in self_views:
        assert (buffer[0, :, :3] == 3.0).all() and (buffer[1, :, :3] == 2.0).all() and (buffer[2, :, :3] == 3.0).all()
        assert (buffer[0, :, 3:] == 0.0).all()  # only the 3 filled positions were copied
    for buffer in cross_views:  # cross rows are the sequence's source: never moved for beams
        assert (buffer[0, :, :4] == 1.0).all()


@given(
    moves=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 6)), max_size=5),
    heads=st.integers(1, 3),
)
def test_a_move_copies_each_head_s_filled_positions(moves, heads):
    sources, targets = filled_positions(moves, heads)
    expected = [
        ((source, head, position), (target, head, position))
        for source, target, filled in moves
        for head in range(heads)
        for position in range(filled)
    ]
    assert sources.dtype == targets.dtype == np.int64 and sources.shape == targets.shape == (len(expected), 3)
    assert list(zip(map(tuple, sources.tolist()), map(tuple, targets.tolist()))) == expected


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
