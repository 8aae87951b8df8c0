"""Host time per sampled token at a Marian-sized vocabulary (58,101), for 1, 32 and 256 sampled rows a
step: this checkout's token choice (service/engine/row_sampling.py: every row at once) against another
checkout's (--against DIR; its form before the rows were drawn at once was one row at a time, float64 over
the vocabulary). Each checkout in a fresh process of its own each round, the rounds alternating; medians.
Beside them the floor: one pass that reads the rows' logits (their maximum), per token.

    git worktree add ../before <commit>
    .venv/bin/python -m benchmarks.sampling_bench --against ../before [--rounds 3]
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
logits = (np.random.default_rng(0).standard_normal((rows, 58101)) * 3).astype(np.float32)
generated = [list(range(30))] * rows
rngs = [np.random.default_rng(i) for i in range(rows)]
if params.temperature == 0:  # the floor: one read of the logits, their maximum
    choose = lambda: logits.max(axis=1)
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


def per_token_us(checkout: Path, rows: int, params: dict) -> float:
    """CPU time per sampled token (the process's: the host's work, all threads), in a fresh process."""
    steps = max(2, 512 // rows)
    command = [sys.executable, "-c", WORKER, str(rows), json.dumps(params), str(steps)]
    result = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)["us_per_token"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    machine = describe(1)
    print_machine(machine)
    table, figures, floors = [], {}, {}
    for name, params in CASES.items():
        for rows in ROWS:
            before, after = [], []
            for _ in range(args.rounds):
                before.append(per_token_us(args.against, rows, params))
                after.append(per_token_us(ROOT, rows, params))
            b, a = statistics.median(before), statistics.median(after)
            floor = floors.setdefault(rows, statistics.median(per_token_us(ROOT, rows, {}) for _ in range(args.rounds)))
            figures[f"{name}, {rows} rows"] = {"before_us": b, "after_us": a, "floor_us": floor}
            table.append([name, rows, f"{b:,.0f} us", f"{a:,.0f} us", f"{b / a:.1f}x", f"{floor:,.1f} us"])
    print_table(
        f"host CPU per sampled token, 58,101 tokens; medians of {args.rounds}",
        ["sampling", "rows a step", str(args.against), "this checkout", "ratio", "one read of the logits"],
        table,
    )
    write_results("sampling_bench", {"machine": machine, "figures": figures})


if __name__ == "__main__":
    main()
