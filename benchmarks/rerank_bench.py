"""Rerank against sentence-transformers' CrossEncoder.predict and infinity-emb's /rerank, on a MiniLM-sized
random cross-encoder (BERT: 6 layers, d_model 384, 12 heads, d_ff 1536, MiniLM's WordPiece vocabulary: the
shape of ms-marco-MiniLM-L-6-v2; no reranker weights can be downloaded here).

32 callers, each with 1 query and 16 documents a call (real English sentences: the Python standard
library's docstrings, model/export/stdlib_sentences.py), 128 queries in all (2,048 pairs): our gRPC `Rerank`
and `POST /v1/rerank` (httpx), and infinity-emb 0.0.78's `POST /rerank` with its ONNX Runtime engine (the
same checkpoint exported by optimum, `make peers`; without it its row is left out); CrossEncoder.predict
in-process over the same pairs (batch 32), the baseline. Every engine in a fresh process of its own, the
callers in one more; --rounds rounds, the order turned round each round; medians of pairs/s, p50 and p99.

    .venv/bin/python -m benchmarks.rerank_bench [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, gemm_probe, print_machine
from .peer_servers import PEERS_BIN, InfinityServer

SOURCE = Path("build/bench/rerank-minilm-hf")
OURS = Path("build/bench/rerank-minilm")
PEER = Path("build/peers/rerank-minilm")
CALLERS, QUERIES, DOCUMENTS = 32, 128, 16


def workload() -> list[tuple[str, list[str]]]:
    from model.export.stdlib_sentences import stdlib_sentences

    texts = stdlib_sentences(QUERIES * (DOCUMENTS + 1), 4, 60)
    step = DOCUMENTS + 1
    return [(texts[i * step], texts[i * step + 1 : (i + 1) * step]) for i in range(QUERIES)]


def build_models() -> None:
    """The checkpoint (CrossEncoder's folder), ours imported and exported, and infinity-emb's folder."""
    if not (OURS / "manifest.json").exists():
        from model.export.model_dir import export_model_dir
        from model.families.cross_encoder.importer import import_cross_encoder
        from model.families.cross_encoder.random_checkpoint import CrossEncoderShape, random_cross_encoder

        shape = CrossEncoderShape(d_model=384, heads=12, layers=6, d_ff=1536, max_length=512)
        model = random_cross_encoder(SOURCE, shape, seed=0)
        import_cross_encoder(model, OURS, "rerank-minilm")
        export_model_dir(OURS, progress_stream=io.StringIO())
    if (PEERS_BIN / "python").exists() and not (PEER / "model.onnx").exists():
        peer = [str(PEERS_BIN / "python"), "benchmarks/peer_models.py", "--cross-encoder", str(SOURCE / "model")]
        subprocess.run([*peer, "--out", str(PEER)], check=True, capture_output=True)


async def http_callers(url: str, model: str) -> dict:
    import httpx

    queries = workload()
    async with httpx.AsyncClient(timeout=600) as client:

        async def rerank(query: str, documents: list[str]) -> float:
            started = time.perf_counter()
            answer = await client.post(url, json={"model": model, "query": query, "documents": documents})
            answer.raise_for_status()
            assert len(answer.json()["results"]) == len(documents)
            return time.perf_counter() - started

        return await run_callers(queries, rerank)


async def grpc_callers(target: str, model: str) -> dict:
    import grpc

    from service.grpc_api.pb import inference_pb2 as pb
    from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)

        async def rerank(query: str, documents: list[str]) -> float:
            started = time.perf_counter()
            answer = await stub.Rerank(pb.RerankRequest(model=model, query=query, documents=documents))
            assert len(answer.results) == len(documents)
            return time.perf_counter() - started

        return await run_callers(workload(), rerank)


async def run_callers(queries, rerank) -> dict:
    await rerank(*queries[0])  # warm-up
    waiting = list(reversed(queries))
    latencies: list[float] = []

    async def caller():
        while waiting:
            latencies.append(await rerank(*waiting.pop()))

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(CALLERS)))
    return {"wall": time.perf_counter() - started, "latencies": latencies}


def in_process() -> dict:
    """CrossEncoder.predict over every pair, batch 32, two threads."""
    import torch
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(2)
    model = CrossEncoder(str(SOURCE / "model"), device="cpu")
    pairs = [(query, document) for query, documents in workload() for document in documents]
    model.predict(pairs[:64], batch_size=32)  # warm-up
    started = time.perf_counter()
    model.predict(pairs, batch_size=32)
    return {"wall": time.perf_counter() - started, "latencies": []}


def fresh(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.rerank_bench", *args], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{' '.join(args)}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ours(kind: str) -> dict:
    server = ServerProcess(models=(str(OURS),))
    try:
        if kind == "grpc":
            return fresh("--caller", "grpc", "--target", server.target)
        return fresh("--caller", "http", "--target", f"http://127.0.0.1:{server.http_port}/v1/rerank")
    finally:
        server.stop()


def infinity() -> dict:
    peer = InfinityServer("fp32", folder=PEER)
    try:
        return fresh("--caller", "http", "--target", f"{peer.url}/rerank", "--model", ".")
    finally:
        peer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--caller", choices=["grpc", "http", "predict"], help="(internal)")
    parser.add_argument("--target", help="(internal)")
    parser.add_argument("--model", default="rerank-minilm", help="(internal)")
    args = parser.parse_args()
    if args.caller:
        run = {
            "grpc": lambda: asyncio.run(grpc_callers(args.target, args.model)),
            "http": lambda: asyncio.run(http_callers(args.target, args.model)),
            "predict": in_process,
        }
        print(json.dumps(run[args.caller]()))
        return
    machine = describe(2)
    print_machine(machine)
    build_models()
    engines = {
        "CrossEncoder.predict, in-process (batch 32)": lambda: fresh("--caller", "predict"),
        "attnserve gRPC Rerank": lambda: ours("grpc"),
        "attnserve POST /v1/rerank (httpx)": lambda: ours("http"),
    }
    if (PEER / "model.onnx").exists():
        engines["infinity-emb 0.0.78 POST /rerank (optimum, fp32)"] = infinity
    else:
        print("infinity-emb left out: `make peers` installs it", file=sys.stderr)
    runs: dict[str, list[dict]] = {name: [] for name in engines}
    for round_ in range(args.rounds):
        for name in list(engines) if round_ % 2 == 0 else list(engines)[::-1]:
            runs[name].append(engines[name]())
        print(f"round {round_ + 1} done", file=sys.stderr, flush=True)
    machine["gemm_gflops_after"] = gemm_probe(2)
    print(f"GEMM probe after the rounds: {machine['gemm_gflops_after']:.0f} GFLOP/s")
    pairs = QUERIES * DOCUMENTS
    rates = {name: statistics.median(pairs / r["wall"] for r in results) for name, results in runs.items()}
    rows = []
    for name, results in runs.items():
        cells = [name, f"{rates[name]:.0f}", "", ""]
        if results[0]["latencies"]:
            latencies = [np.array(r["latencies"]) * 1e3 for r in results]
            cells[2] = f"{statistics.median(float(np.percentile(x, 50)) for x in latencies):.0f}"
            cells[3] = f"{statistics.median(float(np.percentile(x, 99)) for x in latencies):.0f}"
        baseline = rates["CrossEncoder.predict, in-process (batch 32)"]
        peer = next((rate for n, rate in rates.items() if n.startswith("infinity")), None)
        cells += [f"{rates[name] / baseline:.2f}x", f"{rates[name] / peer:.2f}x" if peer else ""]
        rows.append(cells)
    print_table(
        f"MiniLM-sized cross-encoder, {CALLERS} callers x 1 query + {DOCUMENTS} documents, {QUERIES} queries, "
        f"{args.rounds} rounds, medians",
        ["engine", "pairs/s", "p50 ms", "p99 ms", "x predict", "x infinity-emb"],
        rows,
    )
    write_results("rerank_bench", {"machine": machine, "runs": runs, "rows": rows})


if __name__ == "__main__":
    main()
