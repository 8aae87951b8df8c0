"""Decoder steps at a few fixed row counts (buckets), each with its inputs and outputs in buffers of fixed
address and shape, as ONNX Runtime's CUDA graph capture needs: a decoder session created with
enable_cuda_graph captures one graph per gpu_graph_id on its first runs and then replays it, kernels and
host inputs as captured, with whatever the bound buffers hold.

So a step of `rows` rows runs as the smallest bucket that holds them: the rows beyond `rows` are padding
(cache rows that no sequence holds: token pad, nothing filled, a group of their own with a source of one
position, so that their attention stays finite); a bucketed step's rows are greedy ones, each a group of
its own (a step with a beam search needs logits, and runs eager); GroupQueryAttention's host input
total_length is the cache's positions, the same for every step (each row still reads only its own filled
positions); and only each row's argmax comes back (a step that needs some rows' logits runs eager). Cross buffers change address when the cache's
source capacity grows, so each (bucket, capacity) pair has its own binding and graph id; the cache does
not shrink its capacity while graphs are on (engine/generation_cache.py), so a replayed graph never reads
freed buffers. On the CPU nothing is captured and the same steps run as they are: the CPU tests cover
the bucketing and the padding (tests/test_decode_buckets.py)."""

from __future__ import annotations

import logging

import numpy as np
import onnxruntime as ort

from .cache_memory import CacheMemory, CrossLayout
from .seq2seq import Seq2SeqRunner, StepOutput

log = logging.getLogger("attnserve.runner")

# The row counts of the buckets below the cache's rows (which are a bucket too): few graphs to capture,
# at most half a step of padding.
BUCKET_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def buckets_for(rows: int) -> list[int]:
    """The buckets of a cache of `rows` rows: BUCKET_ROWS below it, and the cache's rows."""
    return [b for b in BUCKET_ROWS if b < rows] + [rows]


class _Bucket:
    """One bucket's buffers on the device and, per cross capacity, its binding."""

    def __init__(self, runner: Seq2SeqRunner, rows: int, pad_id: int):
        self.rows, self.pad_id = rows, pad_id
        device = runner.device
        self.host = {  # what the device buffers are filled from, padding rows included
            "input_ids": np.full((rows, 1), pad_id, np.int64),
            "past_lengths": np.zeros(rows, np.int32),
            "source_lengths": np.ones(rows, np.int32),
            "query_slots": np.arange(rows, dtype=np.int64),
            "row_slots": np.arange(rows, dtype=np.int64),
        }
        self.every_row = np.arange(rows, dtype=np.int64)
        self.inputs = {name: _buffer(array.shape, array.dtype, device) for name, array in self.host.items()}
        self.inputs["logit_rows"] = _buffer((0,), np.int64, device)
        self.next_token = _buffer((rows,), np.int64, device)
        logits = next(o for o in runner.decoder.get_outputs() if o.name == "logits")  # (logit rows, vocabulary)
        dtype = np.float16 if logits.type == "tensor(float16)" else np.float32
        self.logits = _buffer((0, logits.shape[1]), dtype, device)
        self.bindings: dict[int, ort.IOBinding] = {}  # by cross capacity

    def fill(self, input_ids: np.ndarray, past_lengths: np.ndarray, layout: CrossLayout) -> int:
        """The step's rows first (each a group of its own), then padding rows; the device buffers updated.
        -> bytes sent."""
        rows, host, spare = len(past_lengths), self.host, self.every_row[len(past_lengths) :]
        for name, values, pad in (
            ("input_ids", input_ids, self.pad_id),
            ("past_lengths", past_lengths, 0),
            ("source_lengths", layout.source_lengths, 1),
            ("query_slots", layout.query_slots, spare),
            ("row_slots", layout.row_slots, spare),
        ):
            host[name][:rows] = values
            host[name][rows:] = pad
            self.inputs[name].update_inplace(host[name])
        return sum(array.nbytes for array in host.values())


def _buffer(shape, dtype, device: str) -> ort.OrtValue:
    return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype, device, 0)


class DecodeBuckets:
    """A cache's greedy decode steps in buckets; a captured session replays one graph per bucket and
    cross capacity."""

    def __init__(self, runner: Seq2SeqRunner, memory: CacheMemory, pad_id: int, name: str = ""):
        """name: the model's, for logs. The steps are captured where the runner's decoder session was
        created with enable_cuda_graph (runner.cuda_graphs); elsewhere, as on the CPU, only bucketed."""
        self.runner, self.memory, self.name = runner, memory, name
        self.capture = runner.cuda_graphs
        self.buckets = [_Bucket(runner, rows, pad_id) for rows in buckets_for(memory.rows)]
        # GroupQueryAttention reads it on the host, once, when a graph is captured: the cache's positions.
        self.total_length = ort.OrtValue.ortvalue_from_numpy(np.array([memory.geometry.target_tokens], np.int32))
        self.capacities: list[int] = []  # the cross capacities seen, in order: their index names graphs
        self.run_options: dict[int, ort.RunOptions] = {}  # by graph id
        self.bucketed_steps = 0  # steps run in a bucket (for the tests and the GPU check)
        self.failed: Exception | None = None  # why bucketed steps stopped, if they did

    @property
    def largest(self) -> int:
        return self.buckets[-1].rows

    def bucket(self, rows: int) -> _Bucket:
        return next(b for b in self.buckets if b.rows >= rows)

    def graph_id(self, bucket: _Bucket) -> int:
        """1 and up (0 is ONNX Runtime's own): one id per bucket and cross capacity."""
        level = self.capacities.index(self.memory.capacity)
        return 1 + self.buckets.index(bucket) + level * len(self.buckets)

    def _binding(self, bucket: _Bucket) -> ort.IOBinding:
        capacity = self.memory.capacity
        if capacity not in self.capacities:
            self.capacities.append(capacity)
        binding = bucket.bindings.get(capacity)
        if binding is None:
            runner = self.runner
            binding = runner.decoder.io_binding()
            for name, value in bucket.inputs.items():
                binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_input("total_length", self.total_length)
            binding.bind_ortvalue_output("next_token", bucket.next_token)
            binding.bind_ortvalue_output("logits", bucket.logits)
            names = runner.past_names, runner.present_names, runner.cross_names
            self.memory.bind_step(binding, *names, bucket.rows, bucket.rows)
            bucket.bindings[capacity] = binding
        return binding

    def step_rows(
        self,
        input_ids: np.ndarray,
        past_lengths: np.ndarray,
        layout: CrossLayout,
        logit_rows: list[int],
        rows: int,
        *,
        logits_on_device: bool = False,
    ) -> StepOutput:
        """A decoder step of the cache's first `rows` rows: in a bucket when no row needs its logits (a
        graph gives argmaxes only) and each row is a group of its own, else eager (Seq2SeqRunner.step). A
        bucketed step that fails (a graph ONNX Runtime could not capture or replay) runs again eager, with
        the same inputs, so the K/V it writes in place are the same; and every step after it runs eager too."""
        if not logit_rows and layout.groups == rows and self.failed is None:
            try:
                return self.step(input_ids, past_lengths, layout, rows)
            except Exception as error:
                log.exception("model %s: a bucketed decode step failed: CUDA graphs off, steps eager", self.name)
                self.failed = error
        return self.runner.step(
            input_ids, past_lengths, layout, logit_rows, self.memory, rows, logits_on_device=logits_on_device
        )

    def step(self, input_ids: np.ndarray, past_lengths: np.ndarray, layout: CrossLayout, rows: int) -> StepOutput:
        """One greedy decoder step of the cache's first `rows` rows (at most `largest`), each a group of its
        own, as in Seq2SeqRunner.step with no logit rows: each row's argmax."""
        bucket = self.bucket(rows)
        sent = bucket.fill(input_ids, past_lengths, layout)
        binding = self._binding(bucket)
        self.runner.decoder.run_with_iobinding(binding, self._run_options(self.graph_id(bucket)))
        self.bucketed_steps += 1
        next_tokens = bucket.next_token.numpy()[:rows].copy()  # the buffer is the next step's
        return StepOutput(next_tokens, np.zeros((0, 0), np.float32), [], sent, bucket.next_token.tensor_size_in_bytes())

    def _run_options(self, graph_id: int) -> ort.RunOptions:
        options = self.run_options.get(graph_id)
        if options is None:
            options = self.run_options[graph_id] = ort.RunOptions()
            if self.capture:
                options.add_run_config_entry("gpu_graph_id", str(graph_id))
        return options
