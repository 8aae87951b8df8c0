"""The front doors of one server side by side: the same work through gRPC, the KServe v2 protocol, the
OpenAI-compatible HTTP API, TEI's and Cohere's APIs, with the clients people use.

- Embeddings, MiniLM, 32 concurrent callers x 1 sentence (512 sentences of 10-60 words): gRPC `Embed`
  (grpc.aio) against KServe v2 `ModelInfer` through tritonclient (its asyncio client), `/v1/embeddings`
  through the `openai` SDK (AsyncOpenAI, base64 as it asks by default), TEI's `/embed` by raw HTTP (httpx,
  and aiohttp), Cohere's `/v2/embed` through its SDK (float, and base64, which it does not parse; and by
  aiohttp, the door's cost without the SDK's) and KServe v2 REST infer through tritonclient.http:
  sentences/s, p50 and p99.
- Completions, the numbers model, 32 sentences of written-out numbers: one `/v1/completions` call with
  all 32 prompts against 32 concurrent gRPC `Generate` calls: tokens/s.

One `attnserve serve` process (its defaults, both models); the callers in processes of their own
(benchmarks/load_clients.py, and this script's --caller mode); --rounds rounds, the doors' order turned
round each round; medians. For the embeddings, the CPU time of the server's event loop per call and of
the callers' process: on two shared cores both come out of the model's share. With --split-cores the
server runs on the first core and every caller on the second, so that a client library's own CPU (the
Cohere SDK's parsing, httpx) no longer takes the server's: the doors' cost alone, at one core's speed.

    .venv/bin/python -m benchmarks.front_doors_bench [--rounds 3] [--precision fp32] [--split-cores]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine

PROMPTS = 32


def numbers(count: int) -> list[str]:
    return [str(n) for n in np.random.default_rng(5).integers(1, 10**9, size=count)]


async def http_completions(url: str) -> dict:
    import openai

    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
        await client.completions.create(model="numbers", prompt="7")  # warm-up
        started = time.perf_counter()
        answer = await client.completions.create(model="numbers", prompt=numbers(PROMPTS))
        return {"wall": time.perf_counter() - started, "tokens": answer.usage.completion_tokens}


async def grpc_generates(target: str) -> dict:
    import grpc

    from service.grpc_api.pb import inference_pb2 as pb
    from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        await stub.Generate(pb.GenerateRequest(model="numbers", input="7"))  # warm-up
        started = time.perf_counter()
        calls = (stub.Generate(pb.GenerateRequest(model="numbers", input=p)) for p in numbers(PROMPTS))
        answers = await asyncio.gather(*calls)
        return {"wall": time.perf_counter() - started, "tokens": sum(len(a.token_ids) for a in answers)}


def caller(server: ServerProcess, *args: str, pinned: tuple[str, ...] = ()) -> dict:
    """One caller process's figures, with the CPU seconds it used and those of the server's event loop.
    pinned: the taskset command that keeps it on its core, if any."""
    children, loop = resource.getrusage(resource.RUSAGE_CHILDREN), server.main_thread_cpu_seconds()
    out = subprocess.run([*pinned, sys.executable, "-m", *args], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{' '.join(args)}: {out.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    return {
        **json.loads(out.stdout.strip().splitlines()[-1]),
        "client_cpu_s": cpu,
        "loop_cpu_s": server.main_thread_cpu_seconds() - loop,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--split-cores", action="store_true", help="the server on core 0, the callers on core 1")
    parser.add_argument("--caller", choices=["http-completions", "grpc-generates"], help="(internal)")
    parser.add_argument("--target", help="(internal) the gRPC target or the HTTP base URL")
    args = parser.parse_args()
    if args.caller:
        run = http_completions if args.caller == "http-completions" else grpc_generates
        print(json.dumps(asyncio.run(run(args.target))))
        return
    machine = describe(2)
    print_machine(machine)
    cores = sorted(os.sched_getaffinity(0))
    if args.split_cores and len(cores) < 2:
        sys.exit("--split-cores needs two cores")
    on_server_core = ("taskset", "-c", str(cores[0])) if args.split_cores else ()
    on_caller_core = ("taskset", "-c", str(cores[1])) if args.split_cores else ()
    server = ServerProcess("--precision", args.precision, launcher=(*on_server_core, sys.executable, "-m", "cli"))

    def call(*args: str) -> dict:
        return caller(server, *args, pinned=on_caller_core)

    url = f"http://127.0.0.1:{server.http_port}"
    doors = {
        "embed, gRPC Embed (grpc.aio)": lambda: call("benchmarks.load_clients", "--target", server.target),
        "embed, KServe v2 ModelInfer (tritonclient)": lambda: call(
            "benchmarks.load_clients", "--triton", server.target
        ),
        "embed, /v1/embeddings (openai SDK, base64)": lambda: call("benchmarks.load_clients", "--openai", url),
        "embed, TEI /embed (httpx)": lambda: call("benchmarks.load_clients", "--tei", url),
        "embed, TEI /embed (aiohttp)": lambda: call("benchmarks.load_clients", "--tei-aiohttp", url),
        "embed, Cohere /v2/embed (cohere SDK)": lambda: call("benchmarks.load_clients", "--cohere", url),
        "embed, Cohere /v2/embed (cohere SDK, base64)": lambda: call("benchmarks.load_clients", "--cohere-base64", url),
        "embed, Cohere /v2/embed (aiohttp)": lambda: call("benchmarks.load_clients", "--cohere-raw", url),
        "embed, KServe v2 REST infer (tritonclient.http)": lambda: call(
            "benchmarks.load_clients", "--triton-http", url.removeprefix("http://")
        ),
        "complete, 32 gRPC Generate calls at once": lambda: call(
            "benchmarks.front_doors_bench", "--caller", "grpc-generates", "--target", server.target
        ),
        "complete, one /v1/completions call of 32 prompts": lambda: call(
            "benchmarks.front_doors_bench", "--caller", "http-completions", "--target", url
        ),
    }
    runs: dict[str, list[dict]] = {name: [] for name in doors}
    try:
        for round_ in range(args.rounds):
            for name in list(doors) if round_ % 2 == 0 else list(doors)[::-1]:
                runs[name].append(doors[name]())
            print(f"round {round_ + 1} done", file=sys.stderr, flush=True)
    finally:
        server.stop()

    rows = []
    for name, results in runs.items():
        wall = statistics.median(r["wall"] for r in results)
        if name.startswith("embed"):
            latencies = [np.array(r["latencies"]) * 1e3 for r in results]
            p50 = statistics.median(float(np.percentile(x, 50)) for x in latencies)
            p99 = statistics.median(float(np.percentile(x, 99)) for x in latencies)
            calls = len(results[0]["latencies"]) + 1  # and the warm-up
            loop = statistics.median(r["loop_cpu_s"] for r in results) / calls * 1e3
            client = statistics.median(r["client_cpu_s"] for r in results)
            rows.append(
                [name, f"{512 / wall:.1f} sentences/s", f"{p50:.0f}", f"{p99:.0f}", f"{loop:.2f}", f"{client:.1f}"]
            )
        else:
            tokens = statistics.median(r["tokens"] / r["wall"] for r in results)
            rows.append([name, f"{tokens:.0f} tokens/s", "", "", "", ""])
    grpc_embed = statistics.median(r["wall"] for r in runs["embed, gRPC Embed (grpc.aio)"])
    ratios = ", ".join(
        f"{name.removeprefix('embed, ')} {grpc_embed / statistics.median(r['wall'] for r in results):.2f}x"
        for name, results in runs.items()
        if name.startswith("embed") and "gRPC Embed" not in name
    )
    split = ", the server on one core and the callers on the other" if args.split_cores else ""
    print_table(
        f"One server ({args.precision}{split}), {args.rounds} rounds, medians; sentences/s against gRPC Embed's: {ratios}",
        ["door", "throughput", "p50 ms", "p99 ms", "server loop ms/call", "client CPU s"],
        rows,
    )
    write_results(
        "front_doors_bench" + ("_split_cores" if args.split_cores else ""),
        {"machine": machine, "rounds": args.rounds, "split_cores": args.split_cores, "runs": runs, "rows": rows},
    )


if __name__ == "__main__":
    main()
