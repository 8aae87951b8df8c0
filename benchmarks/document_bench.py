"""A whole document through DeepL's /v2/translate against its sentences sent as separate calls of one
sentence each (one caller after another, and 32 callers at once), on the bundled multilingual numbers
model and on the M2M100-418M-shaped random checkpoint (multilingual_bench.py builds it): wall time,
generated tokens a second (the server's own count, from /metrics) and sentences a second, medians of
--rounds rounds, the loads' order turned round each round. The document's translation is checked equal to
the separate calls' answers, line for line.

The server runs as `attnserve serve` in a fresh process for each model; the callers are this process'
(httpx), whose work is small beside the model's. The machine and its GEMM probe come first.

    .venv/bin/python -m benchmarks.document_bench [--rounds 3] [--sentences 200] [--models numbers m2m100]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

from testing.server_process import ServerProcess

from .common import print_table, sentences, write_results
from .machine import describe, print_machine

NUMBERS = Path("build/models/numbers-multilingual")
GENERATED = "attnserve_generated_tokens_total"
LOADS = ("document", "sentences, 1 caller", "sentences, 32 callers")


def workload(model: str, count: int) -> tuple[list[str], dict]:
    """The sentences (one a line of the document) and the DeepL fields of every call."""
    if model == "numbers":
        rng = random.Random(0)
        return [str(rng.randrange(10**9)) for _ in range(count)], {"source_lang": "ZXX", "target_lang": "FR"}
    return sentences(count, 8, 16, seed=0), {"source_lang": "EN", "target_lang": "FR"}


async def translate(client: httpx.AsyncClient, text: str, fields: dict) -> str:
    response = await client.post("/v2/translate", json={"text": [text], **fields}, timeout=3600)
    response.raise_for_status()
    return response.json()["translations"][0]["text"]


async def run_load(base: str, load: str, lines: list[str], fields: dict) -> list[str]:
    """-> the translation of each line."""
    async with httpx.AsyncClient(base_url=base) as client:
        if load == "document":
            return (await translate(client, "\n".join(lines), fields)).split("\n")
        if load == "sentences, 1 caller":
            return [await translate(client, line, fields) for line in lines]
        gate = asyncio.Semaphore(32)

        async def one(line: str) -> str:
            async with gate:
                return await translate(client, line, fields)

        return list(await asyncio.gather(*(one(line) for line in lines)))


def measure(server: ServerProcess, load: str, lines: list[str], fields: dict) -> tuple[dict, list[str]]:
    base = f"http://127.0.0.1:{server.http_port}"
    before = server.metric(GENERATED)
    started = time.perf_counter()
    answers = asyncio.run(run_load(base, load, lines, fields))
    seconds = time.perf_counter() - started
    tokens = server.metric(GENERATED) - before
    figures = {"seconds": seconds, "tokens": tokens, "tokens_per_second": tokens / seconds}
    figures["sentences_per_second"] = len(lines) / seconds
    return figures, answers


def run_model(model: str, args) -> dict:
    """One server for the model, every load --rounds times: -> load -> [figures]."""
    if model == "numbers":
        directory, extra = NUMBERS, []
    else:
        from .multilingual_bench import build

        directory = build()[0]
        extra = ["--max-new-tokens", str(args.new_tokens), "--kv-cache-bytes", str(args.kv_cache_bytes)]
    server = ServerProcess("--intra-op-threads", str(args.threads), *extra, models=[str(directory.resolve())])
    lines, fields = workload(model, args.sentences)
    try:
        measure(server, "sentences, 32 callers", lines[:32], fields)  # warm: the first calls of a fresh server
        runs: dict[str, list[dict]] = {load: [] for load in LOADS}
        for round_ in range(args.rounds):
            answers = {}
            for load in LOADS if round_ % 2 == 0 else LOADS[::-1]:
                figures, answers[load] = measure(server, load, lines, fields)
                runs[load].append(figures)
                print(f"{model} round {round_ + 1}: {load} {figures['seconds']:.1f} s", file=sys.stderr, flush=True)
            same = all(answers[load] == answers["document"] for load in LOADS)
            runs.setdefault("same", []).append(same)
        return runs
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--models", nargs="+", default=["numbers", "m2m100"], choices=["numbers", "m2m100"])
    parser.add_argument("--new-tokens", type=int, default=16, help="M2M100's (a random model runs to the limit)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kv-cache-bytes", type=int, default=4 << 30, help="M2M100's server; default: 4 GiB")
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    rows, results = [], {}
    for model in args.models:
        runs = run_model(model, args)
        results[model] = runs
        document = statistics.median(r["tokens_per_second"] for r in runs["document"])
        for load in LOADS:
            rate = statistics.median(r["tokens_per_second"] for r in runs[load])
            seconds = statistics.median(r["seconds"] for r in runs[load])
            per_second = statistics.median(r["sentences_per_second"] for r in runs[load])
            same = "yes" if all(runs["same"]) else "NO"
            rows.append(
                [model, load, round(seconds, 2), round(rate, 1), round(per_second, 1), round(document / rate, 2), same]
            )
    title = (
        f"{args.sentences} sentences through /v2/translate: one document against one call a sentence, "
        f"{args.threads} threads, median of {args.rounds} rounds"
    )
    header = ["model", "load", "wall s", "tokens/s", "sentences/s", "document / this", "same answers"]
    print_table(title, header, rows)
    write_results("document_bench", {"machine": machine, "rounds": args.rounds, "rows": rows, "runs": results})


if __name__ == "__main__":
    main()
