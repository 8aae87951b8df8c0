"""Host time per sampled token at a Marian-sized vocabulary (58,101), for 1, 32 and 256 sampled rows a
step: this checkout's token choice on the host (service/engine/row_sampling.py: every row at once) and by
its sampling graph on the CPU (service/runner/sampling_graph.py, one ONNX Runtime thread: what
--sampling-graph on costs the CPU) and the graph's host work alone (its inputs: all the host does where
the logits stay on a GPU), against another checkout's host form (--against DIR; its form before the rows
were drawn at once was one row at a time, float64 over the vocabulary). Each in a fresh process of its
own each round; medians. Beside them the floor: one pass that reads the rows' logits (their maximum), per
token.

    git worktree add ../before <commit>
    .venv/bin/python -m benchmarks.sampling_bench [--against ../before] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from .common import print_table, write_results
from .machine import describe, print_machine

ROOT = Path(__file__).resolve().parent.parent
ROWS = (1, 32, 256)
CASES = {
    "temperature 0.8": {"temperature": 0.8},
    "temperature 0.8, top_p 0.9": {"temperature": 0.8, "top_p": 0.9},
    "top_k 50, top_p 0.9, penalty 1.2": {"temperature": 0.8, "top_k": 50, "top_p": 0.9, "repetition_penalty": 1.2},
}

# Run in the checkout measured: its own sampler, whichever form it has, on the same logits, copied first as
# the server copies a step's logits before its rules change them (token_choice.py, processed).
WORKER = """
import json, sys, time
import numpy as np
from service.engine.sampling import SamplingParams
rows, params, steps = int(sys.argv[1]), SamplingParams(**json.loads(sys.argv[2])), int(sys.argv[3])
kind = sys.argv[4]
logits = (np.random.default_rng(0).standard_normal((rows, 58101)) * 3).astype(np.float32)
generated = [list(range(30))] * rows
rngs = [np.random.default_rng(i) for i in range(rows)]
if params.temperature == 0:  # the floor: one read of the logits, their maximum
    choose = lambda: logits.max(axis=1)
elif kind == "graph":
    import onnxruntime as ort
    from service.runner.sampling_graph import SamplingGraph, sampling_graph
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    model = sampling_graph().SerializeToString()
    graph = SamplingGraph(ort.InferenceSession(model, options, providers=["CPUExecutionProvider"]), "cpu")
    choose = lambda: graph.sample(logits, generated, [params] * rows, rngs)
elif kind == "feeds":  # what the graph costs the host where the logits stay on the device: its inputs
    from service.runner.sampling_graph import graph_feeds
    choose = lambda: graph_feeds(58101, generated, [params] * rows, [[rng.random()] for rng in rngs])
else:
  try:
    from service.engine.row_sampling import RowSampler
    sampler = RowSampler()
    choose = lambda: sampler.sample(logits.copy(), generated, [params] * rows, rngs)
  except ImportError:  # one row at a time
    from service.engine.sampling import next_token
    each = lambda copied: [next_token(copied[i], generated[i], params, rngs[i]) for i in range(rows)]
    choose = lambda: each(logits.copy())
choose()
started = time.process_time()
for _ in range(steps):
    choose()
print(json.dumps({"us_per_token": (time.process_time() - started) / steps / rows * 1e6}))
"""


def per_token_us(checkout: Path, rows: int, params: dict, kind: str = "host") -> float:
    """CPU time per sampled token (the process's: the host's work, all threads), in a fresh process."""
    steps = max(2, 512 // rows)
    command = [sys.executable, "-c", WORKER, str(rows), json.dumps(params), str(steps), kind]
    result = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)["us_per_token"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="another checkout (a git worktree), its host form")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    machine = describe(1)
    print_machine(machine)
    engines = {"host": (ROOT, "host"), "graph": (ROOT, "graph"), "graph's host work": (ROOT, "feeds")}
    if args.against:
        engines = {str(args.against): (args.against, "host"), **engines}
    table, figures, floors = [], {}, {}
    for name, params in CASES.items():
        for rows in ROWS:
            runs = {engine: [] for engine in engines}
            for _ in range(args.rounds):
                for engine, (checkout, kind) in engines.items():
                    runs[engine].append(per_token_us(checkout, rows, params, kind))
            us = {engine: statistics.median(values) for engine, values in runs.items()}
            floor = floors.setdefault(rows, statistics.median(per_token_us(ROOT, rows, {}) for _ in range(args.rounds)))
            figures[f"{name}, {rows} rows"] = {**{f"{e}_us": v for e, v in us.items()}, "floor_us": floor}
            ratios = [f"{us[e] / us['host']:.2f}x" for e in engines if e != "host"]
            table.append([name, rows, *(f"{v:,.0f} us" for v in us.values()), *ratios, f"{floor:,.1f} us"])
    others = [f"{e} / host" for e in engines if e != "host"]
    print_table(
        f"host CPU per sampled token, 58,101 tokens; medians of {args.rounds}",
        ["sampling", "rows a step", *engines, *others, "one read of the logits"],
        table,
    )
    write_results("sampling_bench", {"machine": machine, "figures": figures})


if __name__ == "__main__":
    main()
