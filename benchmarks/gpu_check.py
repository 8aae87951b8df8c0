"""Our PyTorch model on a CUDA GPU: float32 and float16 parity against float32 on the CPU, and speed.

For a machine with a GPU and PyTorch but no onnxruntime-gpu: it checks the model code (not ONNX Runtime's
CUDA provider) and tells what float16 costs in accuracy and gains in speed.

    python -m benchmarks.gpu_check --minilm DIR --numbers models/numbers --out DIR

DIR for MiniLM may hold float16 weights (a smaller file to carry); both precisions then start from the
same rounded weights, so the comparison is of float16 arithmetic alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_model

from model.config import load_config
from model.decoder_cache import ConcatCache
from model.numbers import pair, sample_number
from model.random_model import BASE_SEQ2SEQ, random_model
from model.transformer import build_model
from modeldir.tokenizer import TextTokenizer, pad_batch

from .common import print_table, sentences

CUDA = torch.device("cuda")  # --device cpu runs the same code without a GPU, to try it out
BASE = BASE_SEQ2SEQ  # --small: a tiny stand-in, to try the script out quickly


def load_any_precision(model_dir: Path):
    _, config = load_config(model_dir)
    model = build_model(config)
    load_model(model, str(model_dir / "model.safetensors"))  # copies into float32 parameters
    return config, model.eval()


def empty_cache(model, batch: int, like: torch.Tensor) -> ConcatCache:
    cache = model.empty_cache(batch)
    cache.past = [(k.to(like.device, like.dtype), v.to(like.device, like.dtype)) for k, v in cache.past]
    cache.past_mask = cache.past_mask.to(like.device)
    return cache


@torch.inference_mode()
def greedy_with_cache(model, ids, mask, steps: int):
    """-> tokens (B, 1 + steps), logits (B, steps, vocab) in float32."""
    cross = model.project_cross(model.encode(ids, mask))
    cache = empty_cache(model, ids.shape[0], cross[0][0])
    tokens = torch.full((ids.shape[0], 1), model.config.bos_id, device=ids.device)
    all_logits = []
    for step in range(steps):
        logits = model.decode(tokens[:, -1:], cache, cross, mask)
        all_logits.append(logits.float())
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        past = [(torch.cat([pk, nk], 2), torch.cat([pv, nv], 2)) for (pk, pv), (nk, nv) in zip(cache.past, cache.new)]
        cache = ConcatCache(past, torch.ones(ids.shape[0], step + 1, dtype=torch.long, device=ids.device))
    return tokens, torch.stack(all_logits, 1)


def synchronize():
    if CUDA.type == "cuda":
        torch.cuda.synchronize()


def cuda_ms(fn, repeats: int = 30, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def check_base(figures: dict) -> None:
    cpu = random_model(BASE, seed=0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, BASE.vocab_size, (16, 48), generator=g)
    mask = torch.ones_like(ids)
    mask[8:, 30:] = 0
    ref_tokens, ref_logits = greedy_with_cache(cpu, ids, mask, 32)
    rows = []
    for dtype in (torch.float32, torch.float16):
        gpu = random_model(BASE, seed=0).to(CUDA, dtype)
        tokens, logits = greedy_with_cache(gpu, ids.to(CUDA), mask.to(CUDA), 32)
        # Logits along the reference's own tokens, so that one early divergence does not compound.
        _, forced = teacher_forced_logits(gpu, ids.to(CUDA), mask.to(CUDA), ref_tokens.to(CUDA))
        diff = float((forced.cpu() - ref_logits).abs().max())
        agree = float((tokens.cpu() == ref_tokens).all(dim=1).float().mean())
        figures[f"base_{dtype}"] = {"logits_max_abs_diff": diff, "greedy_sequences_equal": agree}
        rows.append([str(dtype), diff, f"{100 * agree:.0f}%"])
    print_table(
        "Transformer-base random, 16 sequences x 32 greedy steps: CUDA vs CPU float32",
        ["dtype", "logits max abs diff", "greedy sequences equal"],
        rows,
    )


@torch.inference_mode()
def teacher_forced_logits(model, ids, mask, tokens):
    cross = model.project_cross(model.encode(ids, mask))
    hidden = model.decoder(tokens[:, :-1], empty_cache(model, ids.shape[0], cross[0][0]), cross, mask)
    return tokens, model.logits(hidden).float()


def check_numbers(numbers_dir: Path, figures: dict) -> None:
    config, cpu = load_any_precision(numbers_dir)
    tokenizer = TextTokenizer(numbers_dir / "tokenizer.json", config.max_input_tokens)
    rng = random.Random(4242)
    rows = []
    for to_digits in (False, True):
        pairs = [pair(sample_number(rng), to_digits) for _ in range(1000)]
        ids, mask = pad_batch([e.ids for e in tokenizer.encode([s for s, _ in pairs])], config.pad_id)
        ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
        for label, model, device in [
            ("cpu float32", cpu, "cpu"),
            ("cuda float32", load_any_precision(numbers_dir)[1].to(CUDA), CUDA),
            ("cuda float16", load_any_precision(numbers_dir)[1].to(CUDA, torch.float16), CUDA),
        ]:
            tokens, _ = greedy_with_cache(model, ids.to(device), mask.to(device), 20)
            texts = []
            for row in tokens[:, 1:].tolist():
                row = row[: row.index(config.eos_id)] if config.eos_id in row else row
                texts.append(tokenizer.decode(row))
            accuracy = float(np.mean([t == e for t, (_, e) in zip(texts, pairs)]))
            direction = "words->digits" if to_digits else "digits->words"
            figures[f"numbers_{direction}_{label}"] = accuracy
            rows.append([direction, label, f"{100 * accuracy:.2f}%"])
    print_table("numbers model, 1000 numbers per direction, greedy with cache", ["direction", "where", "exact"], rows)


def check_minilm(minilm_dir: Path, figures: dict) -> None:
    config, model = load_any_precision(minilm_dir)
    tokenizer = TextTokenizer(minilm_dir / "tokenizer.json", config.max_input_tokens)
    texts = sentences(256, 27, 35, seed=2)
    ids, mask = pad_batch([e.ids for e in tokenizer.encode(texts)], config.pad_id)
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)

    def embed(m, device, n):
        with torch.inference_mode():
            _, pooled = m(ids[:n].to(device), mask[:n].to(device))
        return torch.nn.functional.normalize(pooled.float(), dim=-1).cpu()

    reference = embed(model, "cpu", 256)
    gpu32 = load_any_precision(minilm_dir)[1].to(CUDA)
    gpu16 = load_any_precision(minilm_dir)[1].to(CUDA, torch.float16)
    rows = []
    for label, m in (("float32", gpu32), ("float16", gpu16)):
        cosine = float((embed(m, CUDA, 256) * reference).sum(-1).min())
        speeds = {}
        for batch in (32, 256):
            ms = cuda_ms(lambda: m(ids[:batch].to(CUDA), mask[:batch].to(CUDA)))
            speeds[batch] = ms
        figures[f"minilm_{label}"] = {
            "min_cosine_vs_cpu_fp32": cosine,
            "ms_batch32": speeds[32],
            "ms_batch256": speeds[256],
        }
        rows.append([label, f"{cosine:.7f}", speeds[32], 32e3 / speeds[32], speeds[256], 256e3 / speeds[256]])
    print_table(
        f"MiniLM on CUDA ({float(mask.sum(1).float().mean()):.1f} tokens/sentence; times include host->device copies)",
        ["dtype", "min cosine vs CPU fp32", "ms b32", "sent/s b32", "ms b256", "sent/s b256"],
        rows,
    )


def bench_decode(figures: dict) -> None:
    c = BASE
    rows = []
    for dtype in (torch.float32, torch.float16):
        model = random_model(c, seed=0).to(CUDA, dtype)
        for batch in (1, 32):
            cross = [(torch.randn(batch, c.n_heads, 32, c.d_head, device=CUDA, dtype=dtype),) * 2] * c.n_decoder_layers
            source_mask = torch.ones(batch, 32, dtype=torch.long, device=CUDA)
            for prefix in (16, 256, 512):
                past = [
                    (torch.randn(batch, c.n_heads, prefix, c.d_head, device=CUDA, dtype=dtype),) * 2
                ] * c.n_decoder_layers
                past_mask = torch.ones(batch, prefix, dtype=torch.long, device=CUDA)
                step = torch.randint(4, c.vocab_size, (batch, 1), device=CUDA)

                @torch.inference_mode()
                def run():
                    model.decode(step, ConcatCache(past, past_mask), cross, source_mask)

                ms = cuda_ms(run)
                figures[f"decode_{dtype}_b{batch}_p{prefix}_ms"] = ms
                rows.append([str(dtype), batch, prefix, ms, batch / ms * 1e3])
    print_table(
        "Transformer-base decode step with the KV cache on CUDA, PyTorch eager (median ms)",
        ["dtype", "batch", "prefix", "ms/step", "tokens/s"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minilm", type=Path)
    parser.add_argument("--numbers", type=Path, default=Path("models/numbers"))
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    global CUDA, BASE
    CUDA = torch.device(args.device)
    if args.small:
        BASE = dataclasses.replace(BASE_SEQ2SEQ, d_model=64, n_heads=4, d_ff=128, vocab_size=500,
                                   n_encoder_layers=2, n_decoder_layers=2)  # fmt: skip
    name = torch.cuda.get_device_name(0) if CUDA.type == "cuda" else "cpu"
    figures = {"device": name, "torch": torch.__version__}
    print(figures)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 here
    check_base(figures)
    check_numbers(args.numbers, figures)
    if args.minilm:
        check_minilm(args.minilm, figures)
    bench_decode(figures)
    (args.out / "gpu_check.json").write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
