"""The doors in N API processes against one: small Embed calls and 256 streams through servers started with
--api-processes 1 and with --api-processes N (the doors, tokenizing and detokenizing in N processes sharing
the ports, the models in one engine process behind a Unix socket).

Each round starts a fresh server of each setting in turn, the settings' order turned round each round;
the callers run in a process of their own (host_bench's --caller mode). Throughput, and the server's CPU
per call or token summed over all its processes and the engine process's alone (the one that cannot be
multiplied), medians of --rounds, with each setting's ratio to the first's.

    .venv/bin/python -m benchmarks.api_processes_bench [--rounds 3] [--processes 1,2] [--cases ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from testing.server_process import ServerProcess

from .common import print_table, write_results
from .host_bench import EMBED_CALLERS, EMBED_CASES, ROOM_FOR_EVERY_CALLER, figures, run_case
from .machine import describe, print_machine

CASES = ("embed-1", "grpc-stream", "openai-stream")
STREAMS = 256
SHOWN = (  # the figures in the table, in its columns' order
    "calls/s",
    "tokens/s",
    "CPU us/call",
    "CPU us/token",
    "engine CPU us/call",
    "engine CPU us/token",
    "tokens/message",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", default="1,2", help="the --api-processes settings, the first the baseline")
    parser.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    args = parser.parse_args()
    machine = describe(len(os.sched_getaffinity(0)))  # the server's default ONNX Runtime threads
    print_machine(machine)
    settings = [int(n) for n in args.processes.split(",")]
    cases = [(case, EMBED_CALLERS if case in EMBED_CASES else STREAMS) for case in args.cases.split(",")]
    root = Path(__file__).resolve().parents[1]
    models = [str(root / "build" / "models" / name) for name in ("minilm", "numbers")]
    runs: dict[int, dict[str, list[dict]]] = {n: {} for n in settings}
    for round_ in range(args.rounds):
        for n in settings if round_ % 2 == 0 else settings[::-1]:
            server = ServerProcess(*ROOM_FOR_EVERY_CALLER, "--api-processes", str(n), models=models)
            try:
                assert server.api_processes == n, f"asked for {n} API processes, the server runs {server.api_processes}"
                run_case(server, "grpc-unary", 32)  # warm: first calls allocate
                for case, concurrent in cases if round_ % 2 == 0 else cases[::-1]:
                    run = run_case(server, case, concurrent)
                    result = figures(case, run)
                    each = "token" if "tokens/s" in result else "call"
                    result[f"engine CPU us/{each}"] = run["engine_cpu"] / run[f"{each}s"] * 1e6
                    runs[n].setdefault(f"{case} x{concurrent}", []).append(result)
            finally:
                server.stop()
        print(f"round {round_ + 1} done", file=sys.stderr, flush=True)
    medians = {
        n: {name: {k: statistics.median(r[k] for r in results) for k in results[0]} for name, results in side.items()}
        for n, side in runs.items()
    }
    baseline = medians[settings[0]]
    rows = []
    for n, side in medians.items():
        for name, values in side.items():
            cells = [
                f"{values[k]:,.1f} {k}" + (f" ({values[k] / baseline[name][k]:.2f}x)" if n != settings[0] else "")
                for k in SHOWN
                if k in values
            ]
            rows.append([f"{n} API process{'es' if n > 1 else ''}", name, *cells, *[""] * (4 - len(cells))])
    print_table(
        f"--api-processes {args.processes}, medians of {args.rounds} rounds; (x): against {settings[0]}",
        ["setting", "case", "throughput", "server CPU (all processes)", "the engine process's", "tokens a message"],
        rows,
    )
    write_results("api_processes_bench", {"machine": machine, "medians": medians, "runs": runs, "rows": rows})


if __name__ == "__main__":
    main()
