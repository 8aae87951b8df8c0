"""Where a Whisper decode step's time goes: `make run`'s tiny.en decoder graph (int8 and float32) alone in
ONNX Runtime, one step at a time, at several row counts, groups of rows (the rows that read one copy of
a source's cross-attention K/V: a beam search's beams) and source lengths, with and without every row's
logits fetched. The cache buffers bound as the server binds them (each layer's past and present one
buffer, written in place). Each graph in a fresh session; medians of --reps steps after 3 warm-up steps;
the machine and its GEMM probe first.

    .venv/bin/python -m benchmarks.whisper_step_bench [--reps 20]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from modeldir.config import ModelConfig
from modeldir.files import decoder_inputs, read_manifest
from service.runner.cache_memory import CrossLayout

from .common import print_table
from .machine import describe, print_machine

MODEL = Path("build/models/whisper-tiny.en")
# rows, groups, source, logit rows: 5 windows of 5 beams and 2 greedy rows, each row a group of its own (as
# before beams shared their source) and in 7 groups; 12 windows of 5 beams (a long file cut at silences)
SHAPES = [
    (27, 27, 1500, 27),
    (27, 7, 1500, 27),
    (27, 7, 1500, 0),
    (27, 7, 150, 27),
    (60, 60, 1500, 60),
    (60, 12, 1500, 60),
    (5, 1, 1500, 5),
    (1, 1, 1500, 1),
]


def step_ms(session, config: ModelConfig, shape: tuple[int, int, int, int], reps: int) -> float:
    """One step of `rows` rows in `groups` groups (the first groups - 1 of as many rows each as they can
    take, the last the rest), each row with 100 of its 448 cache positions filled."""
    rows, groups, source, logit_rows = shape
    rng = np.random.default_rng(0)
    buffer, past = config.max_positions, 100
    width = -(-rows // groups)
    group_of = np.minimum(np.arange(rows) // width, groups - 1).astype(np.int32)
    layout = CrossLayout.of_rows(group_of, np.full(groups, source, np.int32))
    feeds = {
        "input_ids": rng.integers(0, config.vocab_size, (rows, 1)),
        "past_lengths": np.full(rows, past, np.int32),
        "source_lengths": layout.source_lengths,
        "logit_rows": np.arange(logit_rows, dtype=np.int64),
        "total_length": np.array([past + 1], np.int32),
        "query_slots": layout.query_slots,
        "row_slots": layout.row_slots,
    }
    binding = session.io_binding()
    for name, array in feeds.items():
        binding.bind_cpu_input(name, array)
    for name in decoder_inputs(config.n_decoder_layers)[7:]:
        count, length = (groups, source) if name.startswith("cross") else (rows, buffer)
        buffer_value = ort.OrtValue.ortvalue_from_numpy(
            rng.standard_normal((count, config.n_heads, length, config.d_head), dtype=np.float32)
        )
        binding.bind_ortvalue_input(name, buffer_value)
        if name.startswith("past"):  # as the server binds it: the step writes its K/V into the same buffer
            binding.bind_ortvalue_output(name.replace("past", "present"), buffer_value)
    for name in ("next_token", "logits"):
        binding.bind_output(name, "cpu")
    for _ in range(3):
        session.run_with_iobinding(binding)
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        session.run_with_iobinding(binding)
        times.append(time.perf_counter() - started)
    return float(np.median(times)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print_machine(describe(args.threads))
    config = ModelConfig.from_dict(read_manifest(MODEL)["config"])
    rows = []
    for graph in ("onnx/int8/decoder.onnx", "onnx/decoder.onnx"):
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(str(MODEL / graph), options, providers=["CPUExecutionProvider"])
        for shape in SHAPES:
            rows.append([graph, *shape, step_ms(session, config, shape, args.reps)])
    columns = ["graph", "rows", "groups", "source", "logit rows", "ms"]
    print_table(f"a decode step, medians of {args.reps}", columns, rows)


if __name__ == "__main__":
    main()
