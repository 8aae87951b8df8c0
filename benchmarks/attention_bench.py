"""Embed and Generate throughput with attention maps on (`--attention-maps`: each model's attention-map
graph loaded, the Attention RPC served) against off, side by side in one run; and what Attention calls
cost while they are served.

- Embed: MiniLM, 512 sentences of 10-60 words, 32 concurrent clients, one sentence a call
  (benchmarks/load_clients.py);
- Generate: a Transformer-base-sized random seq2seq model (d_model 512, 8 heads, 6+6 layers, vocab 32000),
  32 concurrent GenerateStream calls of 128 new tokens, greedy, ignore_eos (benchmarks/stream_clients.py).

Each round starts a fresh `attnserve serve` process per variant, alone on the machine with its clients,
and measures both loads on it; the order of the variants alternates from round to round. Besides the
medians, the on / off ratio of each round (the two variants measured within a minute) is reported: on
shared machines it is steadier than a ratio of medians.

    .venv/bin/python -m benchmarks.attention_bench [--minilm build/models/minilm] [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from model.architecture.random_model import BASE_SEQ2SEQ, random_model_dir
from model.export.model_dir import export_model_dir
from service.grpc_api.client import Client
from testing.server_process import ServerProcess

from .common import median_seconds, print_table, write_results
from .machine import describe, print_machine
from .stream_clients import source

TRUCK = "The delivery truck, which was late, blocked the narrow street."


def clients(module: str, *args: str) -> dict:
    command = [sys.executable, "-m", f"benchmarks.{module}", *args]
    return json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def attention_ms(target: str, repeats: int) -> dict:
    """Median milliseconds of Attention calls: MiniLM on one sentence; the seq2seq model on a 32-word
    source, generating 32 tokens first."""
    out = {}
    with Client(target, timeout=120) as client:
        for name, call in (
            ("minilm, 15 tokens", lambda: client.attention(TRUCK, model="minilm")),
            (
                "base, 34 source tokens + 32 generated",
                lambda: client.attention(source(1), model="base", max_new_tokens=32),
            ),
        ):
            out[name] = median_seconds(call, repeats, warmup=1) * 1e3
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm", type=Path, default=Path("build/models/minilm"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    machine = describe(2)
    print_machine(machine)

    runs: dict[str, dict[str, list[float]]] = {v: {"embed": [], "generate": [], "rss_mb": []} for v in ("off", "on")}
    latencies: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = random_model_dir(BASE_SEQ2SEQ, Path(tmp) / "base", "base", seed=0)
        export_model_dir(base, progress_stream=io.StringIO())
        for round_ in range(args.rounds):
            for variant in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                flags = ["--attention-maps"] if variant == "on" else []
                server = ServerProcess(*flags, models=(str(args.minilm), str(base)))
                try:
                    runs[variant]["rss_mb"].append(server.rss_mb())
                    embed = clients("load_clients", "--target", server.target, "--clients", "32", "--per-call", "1")
                    runs[variant]["embed"].append(512 / embed["wall"])
                    stream = clients(
                        "stream_clients",
                        "--target",
                        server.target,
                        "--streams",
                        "32",
                        "--new-tokens",
                        str(args.new_tokens),
                    )
                    runs[variant]["generate"].append(stream["tokens"] / stream["wall"])
                    if variant == "on":
                        latencies.append(attention_ms(server.target, repeats=10))
                finally:
                    server.stop()

    medians = {v: {k: statistics.median(x) for k, x in r.items()} for v, r in runs.items()}
    rows, ratios = [], {}
    measures = [("embed", "Embed, sentences/s"), ("generate", "Generate, tokens/s"), ("rss_mb", "server RSS, MB")]
    for key, label in measures:
        off, on = medians["off"][key], medians["on"][key]
        ratios[key] = [b / a for a, b in zip(runs["off"][key], runs["on"][key])]
        each = " ".join(f"{r:.2f}" for r in ratios[key])
        rows.append([label, off, on, f"{on / off:.3f}", f"{statistics.median(ratios[key]):.3f}", each])
    print_table(
        f"Attention maps off vs on, median of {args.rounds} rounds (each: a fresh server per variant)",
        ["measure", "off", "on", "on / off (medians)", "median of rounds' on / off", "each round's on / off"],
        rows,
    )
    attention = {name: statistics.median(r[name] for r in latencies) for name in latencies[0]}
    print_table(
        "Attention calls (server with attention maps on), median ms",
        ["call", "ms"],
        [[name, ms] for name, ms in attention.items()],
    )
    figures = {
        "machine": machine,
        "rounds": args.rounds,
        "runs": runs,
        "medians": medians,
        "ratios": ratios,
        "attention_ms": attention,
    }
    write_results("attention_bench", figures)


if __name__ == "__main__":
    main()
