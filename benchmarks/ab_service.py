"""The service of two checkouts side by side (before and after a change), on the same models in one run.

Each server runs in a fresh process of its own (`attnserve serve` of that checkout, no PyTorch in it),
its clients in another (benchmarks/stream_clients.py, benchmarks/load_clients.py); the checkouts take
turns, round after round, so that the machine's drift falls on both alike.

    git worktree add ../before <commit>
    .venv/bin/python -m benchmarks.ab_service --before ../before --after . \\
        --seq2seq build/models/numbers --embedding build/models/minilm --rounds 3

Prints tokens/s (generation: 32 streams and 1, ignore_eos) and sentences/s (embeddings: 32 clients
with 1 and 16 sentences a call), medians of the rounds, and after / before.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
from pathlib import Path

from .common import print_table, write_results
from .load_clients import SENTENCES
from .machine import describe, print_machine


def serve(checkout: Path, models: list[str], threads: int) -> tuple[subprocess.Popen, int]:
    """The checkout's server in a process of its own, once its models are served: -> process, port."""
    package = "cli" if (checkout / "cli" / "__main__.py").is_file() else "service"  # before the cli package
    command = [
        sys.executable,
        "-m",
        package,
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--metrics-port",
        "0",
        "--log-format",
        "text",
        "--intra-op-threads",
        str(threads),
        "--models",
        *models,
    ]
    process = subprocess.Popen(command, cwd=checkout, env=_env(checkout), stderr=subprocess.PIPE, text=True)
    port = None
    for line in process.stderr:
        if match := re.search(r"listening on port (\d+)|gRPC on \S+:(\d+)", line):  # older and newer servers
            port = int(match.group(1) or match.group(2))
        if port and "serving" in line:
            break
    else:
        raise RuntimeError(f"{checkout}: the server did not start (exit {process.wait()})")
    threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()  # keep the pipe drained
    return process, port


def _env(checkout: Path) -> dict:
    # ATTNSERVE_HTTP_PORT: a free port for a checkout with the HTTP API (one without it ignores it)
    return {**os.environ, "PYTHONPATH": str(checkout), "ATTNSERVE_HTTP_PORT": "0"}


def clients(checkout: Path, module: str, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=checkout,
        env=_env(checkout),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def one_round(checkout: Path, args, side: str) -> dict[str, float]:
    figures = {}
    seq2seq = getattr(args, f"{side}_seq2seq") or args.seq2seq
    embedding = getattr(args, f"{side}_embedding") or args.embedding
    process, port = serve(checkout, [str(Path(seq2seq).resolve())], args.threads)
    try:
        for streams in (32, 1):
            r = clients(
                checkout,
                "benchmarks.stream_clients",
                "--target",
                f"127.0.0.1:{port}",
                "--streams",
                str(streams),
                "--new-tokens",
                str(args.new_tokens),
            )
            figures[f"generate, {streams} streams (tokens/s)"] = r["tokens"] / r["wall"]
    finally:
        process.terminate()
        process.wait()
    process, port = serve(checkout, [str(Path(embedding).resolve())], args.threads)
    try:
        for per_call in (1, 16):
            r = clients(
                checkout,
                "benchmarks.load_clients",
                "--target",
                f"127.0.0.1:{port}",
                "--clients",
                "32",
                "--per-call",
                str(per_call),
            )
            figures[f"embed, 32 clients x {per_call} (sentences/s)"] = len(SENTENCES) / r["wall"]
    finally:
        process.terminate()
        process.wait()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the code before the change")
    parser.add_argument("--after", type=Path, default=Path("."))
    parser.add_argument("--seq2seq", required=True, help="a model directory both checkouts can serve")
    parser.add_argument("--embedding", required=True, help="a model directory both checkouts can serve")
    for side in ("before", "after"):  # where the two checkouts read different model directory formats
        parser.add_argument(f"--{side}-seq2seq", help=f"the seq2seq model directory for {side}; default: --seq2seq")
        parser.add_argument(
            f"--{side}-embedding", help=f"the embedding model directory for {side}; default: --embedding"
        )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    runs: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for round_ in range(args.rounds):
        for side in ("before", "after") if round_ % 2 == 0 else ("after", "before"):  # turned round each round
            for name, value in one_round(getattr(args, side).resolve(), args, side).items():
                runs[side].setdefault(name, []).append(value)
            print(
                f"round {round_ + 1} {side}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in runs[side].items()),
                flush=True,
            )
    rows = []
    for name in runs["before"]:
        before, after = statistics.median(runs["before"][name]), statistics.median(runs["after"][name])
        rows.append([name, f"{before:.1f}", f"{after:.1f}", f"{after / before:.3f}"])
    title = f"medians of {args.rounds} rounds, each server in a fresh process"
    print_table(title, ["figure", "before", "after", "after / before"], rows)
    write_results("ab_service", {"machine": machine, "runs": runs, "rows": rows})


if __name__ == "__main__":
    main()
