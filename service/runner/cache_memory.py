"""The generation cache's memory on the sessions' device: every layer's self-attention and cross-attention
K/V buffers (self-attention: a row per running sequence or beam, as many rows as a budget of decoder
positions holds at the current target capacity; cross-attention: a row per group of rows that share a
source, so a beam search's beams read one copy, as many rows as a budget of source positions holds at the
current source capacity), allocated as OrtValues (zeroed:
never-written positions must not hold NaN bit patterns, which a zero attention weight would still spread),
and the device-side operations on their rows, run by the model's cache graphs (model/export/cache_graphs.py)
with every buffer bound in place by pointer. The books (which row holds what, how much of it is filled) are
the engine's (engine/generation_cache.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from modeldir.files import cache_names

# The cache's element type for each precision of the graphs: int8 graphs quantize weights only, and keep
# a float32 cache.
ELEMENT_TYPES = {"fp32": np.float32, "fp16": np.float16, "int8": np.float32}


@dataclass(frozen=True)
class CacheGeometry:
    """What one row of a model's cache holds, and in how many bytes."""

    n_layers: int
    n_heads: int
    d_head: int
    target_tokens: int  # decoder positions a row holds: the start token + max new tokens
    source_tokens: int  # the longest source a row holds
    precision: str = "fp32"  # of the graphs (ELEMENT_TYPES)

    @property
    def dtype(self):
        return ELEMENT_TYPES[self.precision]

    @property
    def bytes_per_value(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def bytes_per_token(self) -> int:
        return self.n_layers * 2 * self.n_heads * self.d_head * self.bytes_per_value  # keys and values

    @property
    def tokens_per_row(self) -> int:
        return self.target_tokens + self.source_tokens

    @property
    def bytes_per_row(self) -> int:
        return self.tokens_per_row * self.bytes_per_token


@dataclass(frozen=True)
class CrossLayout:
    """Where a decoder step's rows find their cross-attention K/V: the first G rows of the cross buffers,
    one per group of rows that share a source. source_lengths (G) int32, each group's; query_slots (G * W)
    and row_slots (B) int64, as the decoder step takes them (modeldir/files.py decoder_inputs)."""

    source_lengths: np.ndarray
    query_slots: np.ndarray
    row_slots: np.ndarray

    @property
    def groups(self) -> int:
        return len(self.source_lengths)

    @staticmethod
    def row_per_group(source_lengths: np.ndarray) -> CrossLayout:
        """Every row a group of its own (row i reads cross row i)."""
        every_row = np.arange(len(source_lengths), dtype=np.int64)
        return CrossLayout(np.asarray(source_lengths, np.int32), every_row, every_row)

    @staticmethod
    def of_rows(group_of: np.ndarray, source_lengths: np.ndarray) -> CrossLayout:
        """Each row's group (B), every group 0..G-1 holding a row, and each group's source length (G) -> the
        layout: W the most rows of a group, a group's rows in row order, spare slots reading row 0."""
        groups = len(source_lengths)
        members = np.bincount(group_of, minlength=groups)
        width = int(members.max())
        if width == 1:  # every row alone: the slots are each row's group
            slots = group_of.astype(np.int64)
            query_slots = np.empty(groups, np.int64)
            query_slots[slots] = np.arange(len(group_of))
            return CrossLayout(source_lengths, query_slots, slots)
        order = np.argsort(group_of, kind="stable")
        first = np.cumsum(members) - members  # where each group starts in `order`
        place = np.empty(len(group_of), np.int64)
        place[order] = np.arange(len(group_of)) - first[group_of[order]]
        row_slots = group_of.astype(np.int64) * width + place
        query_slots = np.zeros(groups * width, np.int64)
        query_slots[row_slots] = np.arange(len(group_of))
        return CrossLayout(source_lengths, query_slots, row_slots)


class CacheMemory:
    def __init__(
        self,
        geometry: CacheGeometry,
        rows: int,
        device: str,
        graphs: dict[str, ort.InferenceSession],
        capacity: int,
        *,
        cross_tokens: int = 0,
        self_tokens: int = 0,
    ):
        """device: "cpu" or "cuda"; graphs: the cache_moves, cross and resize sessions on it; rows: the most
        rows the self-attention buffers hold (at their least target capacity); capacity: the cross buffers'
        first source capacity; cross_tokens: the source positions the cross buffers may hold in all (rows x
        capacity), at least the longest source; 0: a row for every row at the longest source; self_tokens:
        the decoder positions the self-attention buffers may hold in all, at least the longest answer; 0:
        every row at the longest answer (what CUDA graphs' fixed bindings need: the target capacity starts,
        and stays unless resized, at the longest answer)."""
        self.geometry, self.rows, self.device, self.graphs = geometry, rows, device, graphs
        self.cross_tokens = cross_tokens or rows * geometry.source_tokens
        self.self_tokens = self_tokens or rows * geometry.target_tokens
        if self.cross_tokens < geometry.source_tokens:
            raise ValueError(
                f"cross buffers of {self.cross_tokens} positions hold no {geometry.source_tokens}-token source"
            )
        if self.self_tokens < geometry.target_tokens:
            raise ValueError(
                f"self-attention buffers of {self.self_tokens} positions hold no {geometry.target_tokens}-token answer"
            )
        self.dtype = geometry.dtype
        g = geometry
        self.self_names = cache_names("self", g.n_layers)
        self.cross_names = cache_names("cross", g.n_layers)
        self.target_capacity = g.target_tokens
        self.self_buffers = [self._zeros(self._self_shape(g.target_tokens)) for _ in self.self_names]
        self.capacity = capacity
        self.cross_buffers = [self._zeros(self._cross_shape(capacity)) for _ in self.cross_names]

    def self_rows_at(self, target_capacity: int) -> int:
        """The rows the self-attention buffers hold at a target capacity: fewer, the longer the answers."""
        return min(self.rows, self.self_tokens // min(target_capacity, self.geometry.target_tokens))

    def cross_rows_at(self, capacity: int) -> int:
        """The groups the cross buffers hold at a source capacity: fewer, the longer the sources. (The least
        capacity may pass a tiny model's longest source: it counts as that source.)"""
        return min(self.rows, self.cross_tokens // min(capacity, self.geometry.source_tokens))

    def _self_shape(self, target_capacity: int, rows: int | None = None) -> tuple[int, ...]:
        g = self.geometry
        return (self.self_rows_at(target_capacity) if rows is None else rows, g.n_heads, target_capacity, g.d_head)

    def _cross_shape(self, capacity: int, rows: int | None = None) -> tuple[int, ...]:
        g = self.geometry
        return (self.cross_rows_at(capacity) if rows is None else rows, g.n_heads, capacity, g.d_head)

    def _zeros(self, shape: tuple[int, ...]) -> ort.OrtValue:
        zeros = np.zeros(shape, self.dtype)  # calloc'ed: its pages take memory only once written
        if self.device == "cpu":
            return ort.OrtValue.ortvalue_from_numpy(zeros)  # wraps the array (and keeps it)
        value = ort.OrtValue.ortvalue_from_shape_and_type(shape, self.dtype, self.device, 0)
        value.update_inplace(zeros)
        return value

    @property
    def nbytes(self) -> int:
        return sum(v.tensor_size_in_bytes() for v in self.self_buffers + self.cross_buffers)

    def bind(self, binding: ort.IOBinding, name: str, value: ort.OrtValue, rows: int, output: str | None = None):
        """Bind the leading `rows` rows of a buffer (contiguous) as input `name`, and as `output` too."""
        shape = [rows, *value.shape()[1:]]
        binding.bind_input(name, self.device, 0, self.dtype, shape, value.data_ptr())
        if output is not None:
            binding.bind_output(output, self.device, 0, self.dtype, shape, value.data_ptr())

    def bind_step(self, binding: ort.IOBinding, past_names, present_names, cross_names, rows: int, groups: int):
        """A decoder step's cache: each self-attention buffer as its layer's past and present at once (the
        step writes its K/V in place), its leading `rows` rows; each cross buffer's leading `groups` rows
        as its cross input."""
        for past, present, value in zip(past_names, present_names, self.self_buffers):
            self.bind(binding, past, value, rows, output=present)
        for name, value in zip(cross_names, self.cross_buffers):
            self.bind(binding, name, value, groups)

    def move_rows(
        self, rows: int, self_moves: list[tuple[int, int, int]], groups: int, cross_moves: list[tuple[int, int]]
    ):
        """Copy rows of the self-attention buffers (of their first `rows`: (from, to, filled), the first
        `filled` positions of row `from` into row `to`) and whole rows (from, to) of the cross buffers (of
        their first `groups`), on the device."""
        session = self.graphs["cache_moves"]
        binding = session.io_binding()
        sources, targets = filled_positions(self_moves, self.geometry.n_heads)
        binding.bind_cpu_input("self_from", sources)
        binding.bind_cpu_input("self_to", targets)
        binding.bind_cpu_input("cross_from", np.array([m[0] for m in cross_moves], np.int64))
        binding.bind_cpu_input("cross_to", np.array([m[1] for m in cross_moves], np.int64).reshape(-1, 1))
        for name, value in zip(self.self_names, self.self_buffers):
            self.bind(binding, name, value, rows, output=f"moved_{name}")
        for name, value in zip(self.cross_names, self.cross_buffers):
            self.bind(binding, name, value, groups, output=f"moved_{name}")
        session.run_with_iobinding(binding)

    def write_cross(self, used: int, encoded: list[ort.OrtValue], rows: list[int], sources: list[int]) -> None:
        """Each of the cross buffers' `rows` (of their first `used`) takes the encoder output of batch item
        sources[i] (the encoder's cross K/V of a batch of sources, device OrtValues), padded to the
        buffers' capacity."""
        session = self.graphs["cache_cross"]
        binding = session.io_binding()
        binding.bind_cpu_input("rows", np.array(rows, np.int64).reshape(-1, 1))
        binding.bind_cpu_input("sources", np.array(sources, np.int64))
        for name, encoded_name, value, source in zip(
            self.cross_names, cache_names("encoded", self.geometry.n_layers), self.cross_buffers, encoded
        ):
            self.bind(binding, name, value, used, output=f"written_{name}")
            binding.bind_ortvalue_input(encoded_name, source)
        session.run_with_iobinding(binding)

    def resize_cross(self, capacity: int, used: int) -> None:
        """New cross buffers of `capacity` source positions (more or fewer), as many rows as cross_tokens
        holds there (at least `used`); their first `used` rows keep their K/V, padded or cut (laid out anew
        on the device). The old buffers stay if that fails."""
        if used > self.cross_rows_at(capacity):
            raise ValueError(f"{used} groups do not fit cross buffers of capacity {capacity}")
        self._resize(self.cross_buffers, self._cross_shape(capacity), used)
        self.capacity = capacity

    def resize_self(self, target_capacity: int, used: int) -> None:
        """New self-attention buffers of `target_capacity` decoder positions, as many rows as self_tokens
        holds there (at least `used`); their first `used` rows keep their K/V, padded or cut (the positions
        cut must be unfilled). The old buffers stay if that fails."""
        if used > self.self_rows_at(target_capacity):
            raise ValueError(f"{used} rows do not fit self-attention buffers of capacity {target_capacity}")
        self._resize(self.self_buffers, self._self_shape(target_capacity), used)
        self.target_capacity = target_capacity

    def _resize(self, buffers: list[ort.OrtValue], shape: tuple[int, ...], used: int) -> None:
        """Each of `buffers` (every layer's, in place) replaced by one of `shape`, whose first `used` rows
        take the old one's, their third axis padded or cut by the cache_resize graph. One layer at a time,
        each old buffer dropped once copied: the cache never holds more than one layer's buffer beyond its
        size (on a GPU the cache was given what the device had). If a layer fails, the layers done go back
        to the old shape and the error is raised."""
        old, done = tuple(buffers[0].shape()), 0
        try:
            for done in range(len(buffers)):
                buffers[done] = self._copied(buffers, done, shape, used)
        except Exception:
            for layer in range(done):
                buffers[layer] = self._copied(buffers, layer, old, used)
            raise

    def _copied(self, buffers: list[ort.OrtValue], layer: int, shape: tuple[int, ...], used: int) -> ort.OrtValue:
        """A buffer of `shape` whose first `used` rows take those of buffers[layer], by the cache_resize
        graph cut to one buffer (one_buffer_resize: every buffer has the same layout)."""
        copy = self._zeros(shape)
        if not used:
            return copy
        session = self.graphs["cache_resize"]
        (name,) = [i.name for i in session.get_inputs() if i.name != "capacity"]
        binding = session.io_binding()
        binding.bind_cpu_input("capacity", np.array([shape[2]], np.int64))
        self.bind(binding, name, buffers[layer], used)
        binding.bind_output(f"resized_{name}", self.device, 0, self.dtype, [used, *shape[1:]], copy.data_ptr())
        session.run_with_iobinding(binding)
        return copy


def one_buffer_resize(graph) -> bytes:
    """A model's cache_resize graph (a path, or its bytes) cut to its first buffer, for CacheMemory's
    session: a resize runs it once a layer. (Run whole with the other layers bound with no rows, ONNX
    Runtime's planner reuses buffers across the layers, whose rows it takes for one dimension, and fails.)"""
    model = onnx.load_from_string(graph) if isinstance(graph, bytes) else onnx.load(str(graph))
    name = next(i.name for i in model.graph.input if i.name != "capacity")
    return onnx.utils.Extractor(model).extract_model(["capacity", name], [f"resized_{name}"]).SerializeToString()


def filled_positions(moves: list[tuple[int, int, int]], heads: int) -> tuple[np.ndarray, np.ndarray]:
    """Moves (from row, to row, filled positions) -> the (row, head, position) of every position copied,
    from and to: (P, 3) int64 each, a row's heads and positions in memory order."""
    if not moves:
        return np.zeros((0, 3), np.int64), np.zeros((0, 3), np.int64)
    rows_from, rows_to, filled = (np.array(column, np.int64) for column in zip(*moves))
    per_move = filled * heads  # positions a move copies, over all heads
    move = np.repeat(np.arange(len(moves)), per_move)
    within = np.arange(per_move.sum()) - np.repeat(np.cumsum(per_move) - per_move, per_move)
    head, position = within // filled[move], within % filled[move]
    sources = np.stack([rows_from[move], head, position], axis=1)
    return sources, np.stack([rows_to[move], head, position], axis=1)
