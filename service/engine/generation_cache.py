"""The generation cache of one seq2seq model: preallocated rows, one per running sequence (one per beam of a
beam search), and all of its books: who holds which row, how much of each row is filled, which rows share
a source, and the moves.

The memory itself is the runner's (runner/cache_memory.py): per decoder layer, a self-attention key and
value buffer of shape (rows, heads, target_tokens, d_head) and cross-attention buffers (rows, heads,
source capacity, d_head), on the sessions' device, allocated once (docs/kv_cache.md explains the choice).
Holders occupy rows 0..used-1, so a decode step binds the leading `used` rows of every self-attention
buffer, a contiguous range, as its past input and present output: the step writes its keys and values in
place and reads only each row's filled positions. When a holder leaves, the last row's holder moves into
its place (one row copied on the device, once).

The cross buffers hold one row per group: the rows that share a source (a beam search's beams, which
open one group for all of them) read one copy of its K/V, their queries as one block (CrossLayout).
Groups occupy cross rows 0..groups-1 in the same way: when a group's last row leaves, the last group
moves into its place.

The self-attention buffers' rows are as long as their target capacity: the positions of the longest
answer any running row may give (its start token, forced tokens and max new tokens), in steps of
TARGET_STEP, at most the model's. Their room is a budget of decoder positions (CacheMemory.self_tokens), so
they hold as many rows as the running answers' lengths allow: many rows for short answers, fewer for
long ones. The capacity grows when a longer answer is admitted, and falls to what the running rows need
when that lets a waiting sequence in (a re-layout on the device at admission, never per step; unless
CUDA graphs replay steps: there it stays at the model's longest answer).

Cross-attention reads its buffer's whole source capacity, so that capacity follows the longest source
among running sequences: it doubles when a longer one arrives and returns to its minimum when the cache
empties (a re-layout on the device at admission, never per step), unless CUDA graphs replay steps: a
graph keeps the buffers' addresses it was captured with, so there the capacity only grows. The cross
buffers' room is a budget of source positions (CacheMemory.cross_tokens), so they hold as many groups as
the running sources need: many short ones, or a few long ones. A sequence is admitted when there are
rows for all its beams at the target capacity it needs and room for its group at the source capacity it
needs; otherwise it waits.

A holder is any object with a `row` attribute (int or None), which the cache keeps up to date.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np

from ..errors import invalid
from ..runner.cache_memory import CacheMemory, CrossLayout

log = logging.getLogger("attnserve.engine")

MIN_SOURCE_CAPACITY = 16
TARGET_STEP = 32  # the target capacity's size classes: fewer re-layouts than exact lengths, less waste than doubling


class CacheFull(Exception):
    """No free row, or no room for another group's source."""


def reorder_beams(beam_rows: list, parents: list[int]) -> tuple[list, list[tuple[int, int]]]:
    """Rows for the new beams, whose parents are `parents` (old beam indices). -> the holders in new beam
    order, and the (from row, to row) copies that make it so: a parent's first child keeps its row;
    each further child takes the row of a beam that has no child, with a copy of its parent's."""
    children = defaultdict(list)
    for new, parent in enumerate(parents):
        children[parent].append(new)
    spare = [holder for old, holder in enumerate(beam_rows) if old not in children]
    ordered: list = [None] * len(parents)
    copies = []
    for parent, kids in children.items():
        ordered[kids[0]] = beam_rows[parent]
        for kid in kids[1:]:
            holder = spare.pop()
            copies.append((beam_rows[parent].row, holder.row))
            ordered[kid] = holder
    return ordered, copies


class GenerationCache:
    def __init__(self, memory: CacheMemory, shrinks: bool = True):
        """memory: the buffers on the device and their row operations (runner/cache_memory.py), its rows of
        its geometry, source capacity MIN_SOURCE_CAPACITY; shrinks: whether the source capacity returns
        to its minimum when the cache empties (not under CUDA graphs: runner/decode_buckets.py)."""
        self.shrinks = shrinks
        geometry, rows = memory.geometry, memory.rows
        if rows < 1:
            raise ValueError(f"the cache must hold at least one row of {geometry.bytes_per_row} bytes")
        self.geometry, self.rows, self.memory = geometry, rows, memory
        self.holders: list = []  # the row table: holders[i] holds row i
        self.lengths = np.zeros(rows, np.int32)  # decoder positions filled per row
        self.group_of = np.zeros(rows, np.int32)  # each row's group: its row of the cross buffers
        self.reserved = np.zeros(rows, np.int64)  # tokens each row's sequence may need
        self.answer = np.zeros(rows, np.int32)  # decoder positions each row's sequence may need
        self._books = [self.lengths, self.group_of, self.reserved, self.answer]
        self.groups = 0  # groups in use: cross rows 0..groups-1
        self.source_lengths = np.zeros(rows, np.int32)  # per group: its source's tokens
        self.members = np.zeros(rows, np.int32)  # per group: the rows that read it

    def books(self, dtype, width: int = 0) -> np.ndarray:
        """A new per-row array (zeros; `width` values a row if given), which moves with its rows."""
        books = np.zeros((self.rows, width) if width else self.rows, dtype)
        self._books.append(books)
        return books

    @property
    def used(self) -> int:
        return len(self.holders)

    @property
    def source_capacity(self) -> int:
        return self.memory.capacity

    @property
    def target_capacity(self) -> int:
        return self.memory.target_capacity

    @property
    def rows_at_longest(self) -> int:
        """The rows the cache holds when every row may give the model's longest answer: a beam search of
        at most this many beams is admitted whatever the other rows ask."""
        return self.memory.self_rows_at(self.geometry.target_tokens)

    @property
    def capacity_tokens(self) -> int:
        """Positions the cache holds: the self-attention buffers' budget and the cross buffers'."""
        return self.memory.self_tokens + self.memory.cross_tokens

    @property
    def reserved_tokens(self) -> int:
        return int(self.reserved[: self.used].sum())

    @property
    def usage_ratio(self) -> float:
        """Share of the cache's tokens reserved by running sequences."""
        return self.reserved_tokens / self.capacity_tokens

    @property
    def free_rows(self) -> int:
        """Rows free at the current target capacity."""
        return self.memory.self_rows_at(self.target_capacity) - self.used

    def admits(self, source_tokens: int, rows: int, new_tokens: int) -> bool:
        """Whether a sequence of this source, `rows` rows (its beams) and up to `new_tokens` decoder steps
        can start now: rows for it at the target capacity it would take, and room for one more group at
        the source capacity it would take."""
        target = self._target_for(new_tokens, self.used + rows)
        capacity = self._capacity_for(source_tokens)
        fits_rows = self.used + rows <= self.memory.self_rows_at(target)
        return fits_rows and self.groups < self.memory.cross_rows_at(capacity)

    def _target_for(self, new_tokens: int, rows: int) -> int:
        """The target capacity once a sequence of up to `new_tokens` steps runs beside the running rows, `rows`
        in all: the current one if it holds every answer and the rows, else the least that holds every
        answer (fewer positions, so more rows; or more, for a longer answer)."""
        longest = max(1 + new_tokens, int(self.answer[: self.used].max(initial=0)))
        least = min(-(-longest // TARGET_STEP) * TARGET_STEP, self.geometry.target_tokens)
        current = self.target_capacity
        if current >= least and (rows <= self.memory.self_rows_at(current) or not self.shrinks):
            return current
        return least if self.shrinks else max(least, current)

    def _capacity_for(self, source_tokens: int) -> int:
        """The source capacity once this source runs: the current one, doubled until it holds it."""
        return self._doubled(self.source_capacity, source_tokens)

    def _doubled(self, capacity: int, source_tokens: int) -> int:
        """`capacity` doubled until it holds the source, at most the longest source (or `capacity`)."""
        ceiling = max(capacity, self.geometry.source_tokens)
        while capacity < source_tokens:
            capacity *= 2
        return min(capacity, ceiling)

    def fits(self, source_tokens: int, new_tokens: int) -> bool:
        """Whether a request could ever run here (else it is too large for the whole cache)."""
        g = self.geometry
        return source_tokens <= g.source_tokens and 1 + new_tokens <= g.target_tokens

    def refuse_unless_fits(self, source_tokens: int, new_tokens: int, model: str) -> None:
        """InvalidArgument naming the input, for a request that could never run here."""
        if not self.fits(source_tokens, new_tokens):
            g = self.geometry
            raise invalid(
                "input",
                f"{source_tokens} tokens and {new_tokens} decoder steps never fit the cache of model {model!r} "
                f"(at most {g.source_tokens} tokens and {g.target_tokens - 1} steps)",
            )

    def allocate(self, holder, source_tokens: int, new_tokens: int, shares=None) -> int:
        """The next row, for a holder whose sequence has this source and may generate `new_tokens`; a new
        group for its cross K/V, or the group of `shares` (a holder of the same source, a beam beside it).
        Sets holder.row. Raises CacheFull."""
        if not self.fits(source_tokens, new_tokens):
            raise ValueError(f"a request of {source_tokens} + {new_tokens} tokens never fits this cache")
        target = self._target_for(new_tokens, self.used + 1)
        if self.used >= self.memory.self_rows_at(target):
            raise CacheFull(f"all {self.used} rows are in use at {target} positions a row")
        capacity = self._capacity_for(source_tokens)
        if shares is None and self.groups >= self.memory.cross_rows_at(capacity):
            raise CacheFull(f"no room for another source of {source_tokens} tokens beside {self.groups}")
        if target != self.target_capacity:  # nothing has changed before: a failed re-layout leaves the cache as it was
            self.memory.resize_self(target, self.used)
        group = self._open_group(source_tokens, capacity) if shares is None else int(self.group_of[shares.row])
        row = self.used
        self.holders.append(holder)
        holder.row = row
        self.lengths[row] = 0
        self.group_of[row] = group
        self.members[group] += 1
        self.reserved[row] = source_tokens + 1 + new_tokens
        self.answer[row] = 1 + new_tokens
        return row

    def allocate_all(self, holders: list, source_tokens: int, new_tokens: int) -> None:
        """Rows for every holder of one sequence (a beam search's beams share the first's group). If one
        fails (a re-layout on the device), the rows already given are freed and the error raised."""
        first = None
        try:
            for holder in holders:
                self.allocate(holder, source_tokens, new_tokens, shares=first)
                first = first or holder
        except Exception:
            log.exception("admission failed: the request's rows are freed")
            for holder in holders:
                if holder.row is not None:
                    self.release(holder)
            raise

    def _open_group(self, source_tokens: int, capacity: int) -> int:
        """A new group for a source, at the source capacity it takes (room for it checked)."""
        if capacity > self.source_capacity:
            self.memory.resize_cross(capacity, self.groups)
        group = self.groups
        self.groups += 1
        self.source_lengths[group] = source_tokens
        self.members[group] = 0
        return group

    def cross_layout(self, rows: int) -> CrossLayout:
        """Where the first `rows` rows (those in use) find their groups' K/V, for a step over them."""
        return CrossLayout.of_rows(self.group_of[:rows], self.source_lengths[: self.groups])

    def source_length(self, row: int) -> int:
        return int(self.source_lengths[self.group_of[row]])

    def write_cross(self, encoded, assignments: list[tuple[int, int]]) -> None:
        """Rows' cross-attention K/V, computed once per request: encoded is the runner's encoder output
        for a batch of sources; assignments, (row, index of its source in that batch). Written once per
        group."""
        sources = {int(self.group_of[row]): source for row, source in assignments}
        self.memory.write_cross(self.groups, encoded, list(sources), list(sources.values()))

    def advance(self, rows: int) -> None:
        """A decode step filled one more position of each of the first `rows` rows."""
        self.lengths[:rows] += 1

    def release(self, holder) -> None:
        """Free the holder's row; the last row's holder moves into it. A group left without rows is freed
        too; the last group moves into it."""
        row, last = holder.row, self.used - 1
        group = int(self.group_of[row])
        self.members[group] -= 1
        groups = self.groups  # before the group closes, if it does
        cross_moves = None if self.members[group] else self._close_group(group)
        self_moves = [(last, row, int(self.lengths[last]))] if row != last else []
        if self_moves or cross_moves:
            self.memory.move_rows(self.used, self_moves, groups, cross_moves or [])
        if self_moves:
            for books in self._books:
                books[row] = books[last]
            moved = self.holders[last]
            self.holders[row] = moved
            moved.row = row
        self.holders.pop()
        self.reserved[last] = self.answer[last] = 0
        holder.row = None
        if self.shrinks and cross_moves is not None:
            self._shrink()

    def _shrink(self) -> None:
        """The least source capacity (MIN_SOURCE_CAPACITY doubled) that the longest running source fits, where
        it is less than now: a long source once need not cost every step after it, nor keep the cross
        buffers' room from shorter ones."""
        capacity = self._doubled(MIN_SOURCE_CAPACITY, int(self.source_lengths[: self.groups].max(initial=0)))
        if capacity < self.source_capacity:
            try:
                self.memory.resize_cross(capacity, self.groups)
            except Exception:  # (a device whose Pad cannot crop: the buffers stay as they were)
                log.exception("shrinking the cross buffers to %d positions failed; they keep their size", capacity)

    def _close_group(self, group: int) -> list[tuple[int, int]]:
        """Free a group no row reads; the last group takes its place. -> the cross row moves that makes it so."""
        last = self.groups - 1
        self.groups -= 1
        if group == last:
            return []
        self.source_lengths[group] = self.source_lengths[last]
        self.members[group] = self.members[last]
        rows = self.group_of[: self.used]
        rows[rows == last] = group
        return [(last, group)]

    def follow_parents(self, beam_rows: list, parents: list[int]) -> list:
        """A beam search's rows after a step whose new beams continue `parents` (old beam indices): each
        new beam's row holds its parent's self-attention K/V. -> the holders in new beam order.
        Cross-attention rows are alike for all beams of a sequence and are left alone."""
        ordered, copies = reorder_beams(beam_rows, parents)
        if copies:
            filled = [(source, target, int(self.lengths[source])) for source, target in copies]
            self.memory.move_rows(self.used, filled, self.groups, [])
        return ordered
