"""ONNX Runtime's intra-op threads and spinning, measured: every setting against every model and load, so
that the server's default can be a rule that is never far from the best fixed setting.

One `attnserve serve` per setting and round, with the numbers model, MiniLM and a Marian-base-sized model
(random weights: benchmarks/generate_bench.py build()); for each, one caller and many (Generate of 32 new
tokens, or Embed of one short sentence), callers in a process of their own. Settings take turns round by
round (fresh processes each time); medians of --rounds, with the rounds' spread, and each setting's ratio
to the best one of its row. `--settings auto` is the server's own default.

    .venv/bin/python -m benchmarks.thread_bench [--rounds 5] [--settings 1,2,2-spin,auto]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from testing.server_process import ServerProcess

from .common import print_table, write_results
from .generate_bench import build
from .host_bench import many
from .machine import describe, print_machine

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "A cat sleeps on the warm windowsill while the rain taps on the glass."
NEW_TOKENS = 32
# (model, kind, callers, calls): a few seconds each on 2 cores
LOADS = [
    ("numbers", "generate", 1, 12),
    ("numbers", "generate", 128, 256),
    ("minilm", "embed", 1, 200),
    ("minilm", "embed", 64, 1024),
    ("base", "generate", 1, 4),
    ("base", "generate", 32, 64),
]
SETTINGS = {  # name -> the server's flags
    "1": ["--intra-op-threads", "1", "--no-ort-spinning"],
    "2": ["--intra-op-threads", "2", "--no-ort-spinning"],
    "2-spin": ["--intra-op-threads", "2", "--ort-spinning"],
    "auto": [],
}


async def load_calls(target: str, model: str, kind: str, concurrent: int, calls: int) -> None:
    import grpc

    from service.grpc_api.pb import inference_pb2 as pb
    from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

    text = "nine hundred and ninety-nine thousand" if model == "numbers" else SENTENCE
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        if kind == "embed":
            request = pb.EmbedRequest(model=model, inputs=[text])
            await many(concurrent, calls, lambda: stub.Embed(request, timeout=600))
        else:
            params = pb.GenerationParams(ignore_eos=True, max_new_tokens=NEW_TOKENS)
            request = pb.GenerateRequest(model=model, input=text, params=params)
            await many(concurrent, calls, lambda: stub.Generate(request, timeout=600))


def run_load(server: ServerProcess, model: str, kind: str, concurrent: int, calls: int) -> float:
    """One load in the callers' process: -> tokens or calls a second."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.thread_bench",
        "--caller",
        json.dumps([server.target, model, kind, concurrent, calls]),
    ]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{model} {kind} x{concurrent}: {out.stderr[-2000:]}")
    wall = float(out.stdout.strip().splitlines()[-1])
    return calls * (NEW_TOKENS if kind == "generate" else 1) / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--caller", help="(internal) run one load's callers")
    args = parser.parse_args()
    if args.caller:
        target, model, kind, concurrent, calls = json.loads(args.caller)
        started = time.perf_counter()
        asyncio.run(load_calls(target, model, kind, concurrent, calls))
        print(time.perf_counter() - started)
        return
    machine = describe(2)
    print_machine(machine)
    models = [str(ROOT / "build" / "models" / m) for m in ("numbers", "minilm")] + [str(build())]
    settings = args.settings.split(",")
    rates: dict[str, dict[str, list[float]]] = {}
    for round_ in range(args.rounds):
        for name in settings if round_ % 2 == 0 else settings[::-1]:
            server = ServerProcess(*SETTINGS[name], "--max-running-sequences", "128", models=models)
            try:
                run_load(server, "numbers", "generate", 4, 8)  # warm
                for model, kind, concurrent, calls in LOADS:
                    rate = run_load(server, model, kind, concurrent, calls)
                    rates.setdefault(f"{model} {kind} x{concurrent}", {}).setdefault(name, []).append(rate)
            finally:
                server.stop()
        print(f"round {round_ + 1} done", flush=True)
    rows = []
    for load, by_setting in rates.items():
        medians = {name: statistics.median(values) for name, values in by_setting.items()}
        best = max(medians.values())
        cells = []
        for name in settings:
            values = by_setting[name]
            spread = (max(values) - min(values)) / medians[name]
            cells.append(f"{medians[name]:,.0f} ({medians[name] / best:.2f}x, ±{spread / 2:.0%})")
        rows.append([load, *cells])
    unit = "tokens/s for generate, calls/s for embed; (ratio to the row's best, half the rounds' spread)"
    print_table(f"ONNX Runtime threads; medians of {args.rounds} rounds; {unit}", ["load", *settings], rows)
    write_results("thread_bench", {"machine": machine, "rates": rates, "rows": rows})


if __name__ == "__main__":
    main()
