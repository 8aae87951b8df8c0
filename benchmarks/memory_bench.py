"""A server's resident memory through bursts of large embedding calls, and what its memory settings cost in
speed: MiniLM, 8 calls of 32 long texts (256 tokens each), an idle pause, 20 calls of 32 short texts;
twice. A fresh server process per setting and round (`attnserve serve`), the calls from this one; --rounds
rounds in turned order, medians.

    .venv/bin/python -m benchmarks.memory_bench [--model-dir build/models/minilm] [--idle 1.5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from service.grpc_api.client import Client
from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine

SETTINGS = {"arena, released when idle (default)": (), "no arena": ("--no-cpu-mem-arena",)}


def burst(model_dir: str, flags: tuple[str, ...], idle: float) -> dict:
    server = ServerProcess(*flags, models=(model_dir,))
    long = [f"{i} " + "many words in a long text " * 50 for i in range(32)]
    short = [f"sentence number {i} is short" for i in range(32)]
    rss, times = [server.rss_mb()], {"long": [], "short": []}
    try:
        with Client(server.target, timeout=120) as client:
            for _ in range(2):
                for texts, kind, calls in ((long, "long", 8), (short, "short", 20)):
                    for _ in range(calls):
                        started = time.perf_counter()
                        client.embed(texts)
                        times[kind].append(time.perf_counter() - started)
                    if kind == "long":
                        time.sleep(idle)  # the pause after which the memory may go back
                    rss.append(server.rss_mb())
    finally:
        server.stop()
    return {"rss_mb": rss, **{f"{k}_call_ms": statistics.median(v) * 1e3 for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default="build/models/minilm")
    parser.add_argument("--idle", type=float, default=1.5, help="seconds idle after each long burst")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    machine = describe(2)
    print_machine(machine)
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for round_ in range(args.rounds):
        for name in list(SETTINGS) if round_ % 2 == 0 else list(SETTINGS)[::-1]:
            runs[name].append(burst(args.model_dir, SETTINGS[name], args.idle))
    rows = []
    for name, results in runs.items():
        rss = [statistics.median(r["rss_mb"][i] for r in results) for i in range(len(results[0]["rss_mb"]))]
        rows.append(
            [
                name,
                " / ".join(f"{m:.0f}" for m in rss),
                *(statistics.median(r[k] for r in results) for k in ("long_call_ms", "short_call_ms")),
            ]
        )
    print_table(
        f"Resident memory (MB) at start, after long burst + idle, after short calls, twice; call times; medians of"
        f" {args.rounds} rounds",
        ["setting", "RSS MB", "long call ms", "short call ms"],
        rows,
    )
    write_results("memory_bench", {"machine": machine, "rounds": args.rounds, "runs": runs})


if __name__ == "__main__":
    main()
