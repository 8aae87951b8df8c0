"""bge-m3's three outputs from one call against three one-output calls, on a bge-m3-shaped random checkpoint
(XLM-RoBERTa, 12 layers, d_model 1024, 16 heads, d_ff 4096, its sparse and ColBERT heads; a small
vocabulary, which changes no matrix product but the embedding lookup).

32 concurrent callers, each sentence (10-40 words) asked for its dense vector, lexical weights and
multi-vectors: one gRPC `Embed` with the three outputs, against three `Embed` calls of one output each,
sent at once. Dense vectors and multi-vectors come binary in both. One `attnserve serve` process; the
callers in a process of their own (this script's --caller mode); --rounds rounds, the order turned round
each round; medians of sentences/s, p50 and p99 of a sentence's three outputs, and their ratio. One pass
against three: 3x is the ceiling.

    .venv/bin/python -m benchmarks.multi_output_bench [--rounds 3] [--sentences 192]
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

from .common import print_table, sentences, write_results
from .machine import describe, gemm_probe, print_machine

MODEL_DIR = Path("build/bench/bge-m3-shaped")
CALLERS = 32


def build_model() -> Path:
    """The checkpoint, imported and exported once (float32), kept under build/bench."""
    if (MODEL_DIR / "manifest.json").exists():
        return MODEL_DIR
    from model.export.model_dir import export_model_dir
    from model.families.bert.importer import import_sentence_transformer
    from model.families.xlm_roberta.random_checkpoint import XlmRobertaShape, random_bge_m3_checkpoint

    shape = XlmRobertaShape(
        d_model=1024, heads=16, layers=12, d_ff=4096, pooling="cls", max_position_embeddings=514, max_seq_length=512
    )
    source = random_bge_m3_checkpoint(MODEL_DIR.parent / "bge-m3-shaped-hf", shape, seed=0)
    import_sentence_transformer(source, MODEL_DIR, "bge-m3-shaped")
    export_model_dir(MODEL_DIR, progress_stream=io.StringIO())
    return MODEL_DIR


async def callers(target: str, mode: str, count: int) -> dict:
    """32 callers over `count` sentences; mode "one": one call of three outputs a sentence; "three": three
    calls of one output, at once."""
    import grpc

    from service.grpc_api.pb import inference_pb2 as pb
    from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

    texts = sentences(count, 10, 40, seed=7)
    dense, sparse, multi = pb.EMBEDDING_OUTPUT_DENSE, pb.EMBEDDING_OUTPUT_SPARSE, pb.EMBEDDING_OUTPUT_MULTI_VECTOR
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)

        def embed(text: str, outputs: list[int]):
            request = pb.EmbedRequest(inputs=[text], outputs=outputs, embedding_type=pb.EMBEDDING_TYPE_BINARY)
            return stub.Embed(request)

        async def one_sentence(text: str) -> float:
            started = time.perf_counter()
            if mode == "one":
                await embed(text, [dense, sparse, multi])
            else:
                await asyncio.gather(embed(text, [dense]), embed(text, [sparse]), embed(text, [multi]))
            return time.perf_counter() - started

        await one_sentence("warm up")
        queue = list(reversed(texts))
        latencies: list[float] = []

        async def caller():
            while queue:
                latencies.append(await one_sentence(queue.pop()))

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(CALLERS)))
        return {"wall": time.perf_counter() - started, "latencies": latencies}


def run_callers(server: ServerProcess, mode: str, count: int) -> dict:
    args = ["--caller", mode, "--target", server.target, "--sentences", str(count)]
    out = subprocess.run([sys.executable, "-m", "benchmarks.multi_output_bench", *args], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"callers ({mode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=192)
    parser.add_argument("--caller", choices=["one", "three"], help="(internal)")
    parser.add_argument("--target", help="(internal)")
    args = parser.parse_args()
    if args.caller:
        print(json.dumps(asyncio.run(callers(args.target, args.caller, args.sentences))))
        return
    machine = describe(2)
    print_machine(machine)
    server = ServerProcess(models=(str(build_model()),))
    modes = {"one call, three outputs": "one", "three calls, one output each": "three"}
    runs: dict[str, list[dict]] = {name: [] for name in modes}
    try:
        for round_ in range(args.rounds):
            for name in list(modes) if round_ % 2 == 0 else list(modes)[::-1]:
                runs[name].append(run_callers(server, modes[name], args.sentences))
            print(f"round {round_ + 1} done", file=sys.stderr, flush=True)
    finally:
        server.stop()
    # These shared machines' speed moves within minutes: the probe again, beside the first.
    machine["gemm_gflops_after"] = gemm_probe(2)
    print(f"GEMM probe after the rounds: {machine['gemm_gflops_after']:.0f} GFLOP/s")
    rows, rates = [], {}
    for name, results in runs.items():
        rates[name] = statistics.median(args.sentences / r["wall"] for r in results)
        latencies = [np.array(r["latencies"]) * 1e3 for r in results]
        p50 = statistics.median(float(np.percentile(x, 50)) for x in latencies)
        p99 = statistics.median(float(np.percentile(x, 99)) for x in latencies)
        rows.append([name, f"{rates[name]:.2f}", f"{p50:.0f}", f"{p99:.0f}"])
    ratio = rates["one call, three outputs"] / rates["three calls, one output each"]
    print_table(
        f"bge-m3-shaped (12 x 1024), {CALLERS} callers, {args.sentences} sentences, {args.rounds} rounds, medians; "
        f"one call against three: {ratio:.2f}x",
        ["calls", "sentences/s (all three outputs)", "p50 ms", "p99 ms"],
        rows,
    )
    write_results("multi_output_bench", {"machine": machine, "runs": runs, "rows": rows, "ratio": ratio})


if __name__ == "__main__":
    main()
