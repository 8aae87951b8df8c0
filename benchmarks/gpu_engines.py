"""The engines benchmarks/gpu_check.py measures, each run in a process of its own (a runtime in a process
where another has run is not what it is alone): one engine a call, one JSON line out.

    python -m benchmarks.gpu_engines st-embed --model DIR --device cuda --count 8192 --batch 64
    python -m benchmarks.gpu_engines ort-embed --model DIR --device cuda --count 8192 --batch 64
    python -m benchmarks.gpu_engines hf-generate --model DIR --device cuda --count 256 --batch 64 --new-tokens 64
    python -m benchmarks.gpu_engines attnserve-generate --target HOST:PORT --count 256 --concurrency 64 --new-tokens 64

On --device cuda the PyTorch baselines run in float16 and ONNX Runtime takes the float16 graphs; on
--device cpu (the dry run) float32 throughout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from .common import sentences


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def embed_texts(count: int) -> list[str]:
    return sentences(count, 10, 60, seed=11)


def st_embed(args) -> dict:
    """sentence-transformers encode, in float16 on CUDA."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(args.model, device=args.device)
    if args.device == "cuda":
        model = model.half()
    texts_ = embed_texts(args.count)
    model.encode(texts_[: args.batch], batch_size=args.batch)  # warm-up
    if args.device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    model.encode(texts_, batch_size=args.batch)
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return {"engine": "sentence-transformers", "sentences": len(texts_), "seconds": seconds,
            "sentences_per_second": len(texts_) / seconds}  # fmt: skip


def ort_embed(args) -> dict:
    """ONNX Runtime in-process on the model directory's serving graph: batches of --batch, sorted by length
    (as the server's batcher tends to form them), inputs from the host and the vectors back, as the server."""
    from modeldir.files import open_model_dir
    from modeldir.tokenizer import TextTokenizer, pad_batch
    from service.runner.sessions import CPU, CUDA, SessionSettings, create_session

    precision = "fp16" if args.device == "cuda" else "fp32"
    files = open_model_dir(args.model, precision=precision)
    session = create_session(files.encoder, SessionSettings(device=args.device), CUDA if args.device == "cuda" else CPU)
    tokenizer = TextTokenizer(files.tokenizer, files.config["max_input_tokens"])
    encoded = sorted((e.ids for e in tokenizer.encode(embed_texts(args.count))), key=len)
    batches = [pad_batch(group, files.config["pad_id"]) for group in chunks(encoded, args.batch)]
    session.run(["embedding"], {"input_ids": batches[0][0], "attention_mask": batches[0][1]})  # warm-up
    started = time.perf_counter()
    for ids, mask in batches:
        session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
    seconds = time.perf_counter() - started
    return {"engine": f"onnxruntime ({precision})", "sentences": len(encoded), "seconds": seconds,
            "sentences_per_second": len(encoded) / seconds}  # fmt: skip


def hf_generate(args) -> dict:
    """transformers' MarianMTModel.generate, greedy, exactly --new-tokens tokens, in float16 on CUDA."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    from .marian_bench import summary, texts

    model = MarianMTModel.from_pretrained(args.model).eval().to(args.device)
    if args.device == "cuda":
        model = model.half()
    tokenizer = MarianTokenizer.from_pretrained(args.model)
    settings = {"num_beams": 1, "do_sample": False, "max_new_tokens": args.new_tokens,
                "min_new_tokens": args.new_tokens}  # fmt: skip
    sources = texts(args.count)

    def run(group):
        batch = tokenizer(group, return_tensors="pt", padding=True).to(args.device)
        out = model.generate(**batch, **settings)
        if args.device == "cuda":
            torch.cuda.synchronize()
        return out

    with torch.no_grad():
        run(sources[: args.batch])  # warm-up
        tokens, latencies = 0, []
        started = time.perf_counter()
        for group in chunks(sources, args.batch):
            begun = time.perf_counter()
            out = run(group)
            latencies += [time.perf_counter() - begun] * len(group)
            tokens += (out.shape[1] - 1) * len(group)
        result = summary(tokens, time.perf_counter() - started, latencies)
    return {"engine": "transformers", "batch": args.batch, **result,
            "seconds_per_token": result["latency_p50"] / args.new_tokens}  # fmt: skip


def attnserve_generate(args) -> dict:
    """Callers of a running server: --concurrency at once, each sending its next sentence when answered."""
    from .marian_bench import clients, texts

    result = asyncio.run(clients(args.target, texts(args.count), args.concurrency, args.new_tokens, 1, args.served))
    return {"engine": "attnserve", "concurrency": args.concurrency, **result,
            "seconds_per_token": result["latency_p50"] / args.new_tokens}  # fmt: skip


ENGINES = {"st-embed": st_embed, "ort-embed": ort_embed, "hf-generate": hf_generate,
           "attnserve-generate": attnserve_generate}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("engine", choices=list(ENGINES))
    parser.add_argument("--model", help="a model directory (ours, or the Hugging Face one for the baselines)")
    parser.add_argument("--target", help="attnserve-generate: the server")
    parser.add_argument("--served", default="", help="attnserve-generate: the model's name on the server")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--count", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    print(json.dumps(ENGINES[args.engine](args)))


if __name__ == "__main__":
    main()
