"""Translation throughput and latency, side by side in one run, on a Marian-base-sized random MarianMT
checkpoint (d_model 512, 8 heads, 6+6 layers, d_ff 2048, vocab 32000): attnserve (a real server, clients
in another process) against transformers `generate` and CTranslate2 (float32, converted from the same
checkpoint). Greedy, exactly --new-tokens tokens per sentence in every engine (eos held off), the same
thread count everywhere; batch 1 (one sentence at a time) and 32 (32 concurrent callers for the server,
batches of 32 for the libraries).

    .venv/bin/pip install -e '.[bench]'    # ctranslate2
    .venv/bin/python -m benchmarks.marian_bench [--sentences 200] [--new-tokens 64] [--threads 2]
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

import grpc

from model.random_marian import MarianShape, sentences
from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

from .common import print_table, write_results

MARIAN_BASE = MarianShape(
    d_model=512, heads=8, encoder_layers=6, decoder_layers=6, d_ff=2048, activation="swish", vocab_size=32000,
    max_positions=512,
)  # fmt: skip
WORK = Path("build/bench/marian-base")


def texts(count: int) -> list[str]:
    """Three written-out numbers a sentence: sources of 20-40 tokens."""
    parts = sentences(3 * count, seed=7)
    return [" ".join(parts[i : i + 3]) for i in range(0, 3 * count, 3)]


def build() -> tuple[Path, Path, Path]:
    """The Hugging Face checkpoint, our model directory and the CTranslate2 model (made once, then reused)."""
    from model.export import export_model_dir
    from model.import_marian import import_marian
    from model.random_marian import random_marian_checkpoint

    hf, ours, ct2 = WORK / "hf", WORK / "attnserve", WORK / "ct2"
    if not (hf / "model.safetensors").exists():
        random_marian_checkpoint(hf, MARIAN_BASE, seed=0)
    if not (ours / "manifest.json").exists():
        import_marian(hf, ours, "marian-base")
        export_model_dir(ours, progress_stream=io.StringIO())
    if not (ct2 / "model.bin").exists():
        import ctranslate2

        ctranslate2.converters.TransformersConverter(str(hf)).convert(str(ct2), force=True)
    return hf, ours, ct2


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def summary(tokens: int, wall: float, latencies: list[float]) -> dict:
    latencies = sorted(latencies)
    return {
        "tokens": tokens,
        "seconds": wall,
        "tokens_per_second": tokens / wall,
        "latency_p50": statistics.median(latencies),
        "latency_p90": latencies[int(0.9 * (len(latencies) - 1))],
    }


def run_transformers(hf_dir: Path, sources: list[str], batch: int, new_tokens: int, threads: int, beams: int = 1):
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    torch.set_num_threads(threads)
    model = MarianMTModel.from_pretrained(hf_dir).eval()
    tokenizer = MarianTokenizer.from_pretrained(hf_dir)
    settings = {"num_beams": beams, "do_sample": False, "max_new_tokens": new_tokens}
    if beams == 1:
        settings["min_new_tokens"] = new_tokens
    ends = {model.config.pad_token_id, model.config.eos_token_id}
    with torch.no_grad():
        model.generate(**tokenizer(sources[:2], return_tensors="pt", padding=True), **settings)  # warm-up
        tokens, latencies = 0, []
        started = time.perf_counter()
        for group in chunks(sources, batch):
            begun = time.perf_counter()
            out = model.generate(**tokenizer(group, return_tensors="pt", padding=True), **settings)
            latencies += [time.perf_counter() - begun] * len(group)
            tokens += (
                sum(1 for row in out[:, 1:].tolist() for t in row if t not in ends)
                if beams > 1
                else ((out.shape[1] - 1) * len(group))
            )
        return summary(tokens, time.perf_counter() - started, latencies)


def run_ctranslate2(
    ct2_dir: Path, model_dir: Path, sources: list[str], batch: int, new_tokens: int, threads: int, beams: int = 1
) -> dict:
    import ctranslate2

    from modeldir.tokenizer import MarianTokenizer

    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=threads, inter_threads=1)
    pieces = [e.tokens for e in MarianTokenizer(model_dir, 512).encode(sources)]
    settings = {"beam_size": beams, "max_decoding_length": new_tokens}
    if beams == 1:
        settings["min_decoding_length"] = new_tokens
    translator.translate_batch(pieces[:2], **settings)  # warm-up
    tokens, latencies = 0, []
    started = time.perf_counter()
    for group in chunks(pieces, batch):
        begun = time.perf_counter()
        results = translator.translate_batch(group, max_batch_size=batch, **settings)
        latencies += [time.perf_counter() - begun] * len(group)
        tokens += sum(len(r.hypotheses[0]) for r in results)
    return summary(tokens, time.perf_counter() - started, latencies)


async def clients(
    target: str, sources: list[str], concurrency: int, new_tokens: int, beams: int = 1, model: str = ""
) -> dict:
    """`concurrency` callers, each sending its next sentence when the last one is answered (to `model`:
    empty, the server's default seq2seq model)."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        params = pb.GenerationParams(max_new_tokens=new_tokens, ignore_eos=beams == 1, num_beams=beams)
        await stub.Generate(pb.GenerateRequest(model=model, input=sources[0], params=params))  # warm-up
        queue = list(reversed(sources))
        latencies, tokens = [], 0

        async def caller():
            nonlocal tokens
            while queue:
                text = queue.pop()
                begun = time.perf_counter()
                response = await stub.Generate(pb.GenerateRequest(model=model, input=text, params=params))
                latencies.append(time.perf_counter() - begun)
                tokens += len(response.token_ids)

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        return summary(tokens, time.perf_counter() - started, latencies)


def run_attnserve(model_dir: Path, sources: list[str], batch: int, new_tokens: int, threads: int, beams: int = 1):
    from service.server_thread import ServerThread

    server = ServerThread([model_dir], intra_op_threads=threads, max_new_tokens=new_tokens)
    try:
        command = [sys.executable, "-m", "benchmarks.marian_bench", "--clients", server.target,
                   "--concurrency", str(batch), "--sentences", str(len(sources)), "--new-tokens", str(new_tokens),
                   "--beams", str(beams)]  # fmt: skip
        return json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--clients", metavar="TARGET", help="(internal) run the gRPC callers against TARGET")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--beams", type=int, default=0, help="also beam search with this many beams, batch 1")
    parser.add_argument("--beam-sentences", type=int, default=50)
    args = parser.parse_args()
    sources = texts(args.sentences)
    if args.clients:
        run = clients(args.clients, sources, args.concurrency, args.new_tokens, max(args.beams, 1))
        print(json.dumps(asyncio.run(run)))
        return

    hf_dir, model_dir, ct2_dir = build()
    figures = {"sentences": args.sentences, "new_tokens": args.new_tokens, "threads": args.threads, "runs": {}}
    rows = []
    for batch in args.batches:
        runs = {
            "transformers": run_transformers(hf_dir, sources, batch, args.new_tokens, args.threads),
            "ctranslate2": run_ctranslate2(ct2_dir, model_dir, sources, batch, args.new_tokens, args.threads),
            "attnserve": run_attnserve(model_dir, sources, batch, args.new_tokens, args.threads),
        }
        figures["runs"][str(batch)] = runs
        for engine, r in runs.items():
            rows.append([
                engine, batch, r["tokens"], round(r["tokens_per_second"], 1), round(r["latency_p50"], 3),
                round(r["latency_p90"], 3),
                round(r["tokens_per_second"] / runs["transformers"]["tokens_per_second"], 2),
                round(r["tokens_per_second"] / runs["ctranslate2"]["tokens_per_second"], 2),
            ])  # fmt: skip
            print(f"batch {batch} {engine}: {r['tokens_per_second']:.1f} tokens/s", file=sys.stderr, flush=True)
    if args.beams > 1:
        # Beam search, batch 1: outputs end at eos, so each engine's tokens are counted as it returns them.
        few = sources[: args.beam_sentences]
        runs = {
            "transformers": run_transformers(hf_dir, few, 1, args.new_tokens, args.threads, args.beams),
            "ctranslate2": run_ctranslate2(ct2_dir, model_dir, few, 1, args.new_tokens, args.threads, args.beams),
            "attnserve": run_attnserve(model_dir, few, 1, args.new_tokens, args.threads, args.beams),
        }
        figures["runs"][f"beams{args.beams}"] = runs
        for engine, r in runs.items():
            rows.append([
                f"{engine} ({args.beams} beams)", 1, r["tokens"], round(r["tokens_per_second"], 1),
                round(r["latency_p50"], 3), round(r["latency_p90"], 3),
                round(r["tokens_per_second"] / runs["transformers"]["tokens_per_second"], 2),
                round(r["tokens_per_second"] / runs["ctranslate2"]["tokens_per_second"], 2),
            ])  # fmt: skip
    print_table(
        f"Marian-base random checkpoint, greedy, {args.new_tokens} new tokens, {args.sentences} sentences, "
        f"{args.threads} threads",
        ["engine", "batch", "tokens", "tokens/s", "p50 s", "p90 s", "x transformers", "x CTranslate2"],
        rows,
    )
    write_results("marian_bench", figures)


if __name__ == "__main__":
    main()
