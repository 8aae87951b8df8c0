"""The generation cache's rows for beams: one copy of a shared source, the cross layout's query slots, rows
that follow their parents, and the positions a move copies (cache_rows.py's CPU cache)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from service.runner.cache_memory import CrossLayout, filled_positions

from .cache_rows import Holder, admit, assert_holds, encoded, new_cache, views


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
