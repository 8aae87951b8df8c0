"""The 8-bit options of ONNX Runtime's quantization tools, measured on this CPU, to choose one per graph
(model/export/eight_bit.py uses the choice):

- fp32: the exported graphs;
- dynamic: the weight MatMuls with int8 weights, one scale per output channel, activations quantized to
  uint8 as each call runs (u8s8 integer products; VNNI where the CPU has it) - what `--precision int8` is;
- dynamic, reduce_range: the same with 7-bit weights, ONNX Runtime's remedy for AVX2 CPUs without VNNI,
  where u8s8 products can saturate;
- weight-only: MatMulNBits, 8 bits, blocks of 32, symmetric: integer weights, float activations (smaller
  weights for steps bound by reading them); and the same with accuracy_level 4, which lets the kernel
  quantize the activations to int8 for its products.

Figures: MiniLM, a batch of 32 real sentences (standard-library docstrings, sorted by length as the batcher
groups them) and its embeddings' cosine to float32 on 1,000 such sentences; a Marian-base-sized decoder
(the checkpoint benchmarks/marian_bench.py builds), one decode step at 1 and at 32 rows through the serving
runner, and its greedy output (32 tokens) on 100 real sentences, equal to float32's or not. Each variant
runs in a fresh process of its own, --rounds times, the order turned round each round; medians. The embedding model keeps its feed-forward output projections float32 in every 8-bit variant (as
model/export/eight_bit.py does; its docstring says why).

    .venv/bin/python -m benchmarks.marian_bench --rounds 1   # once, for the checkpoint
    .venv/bin/python -m benchmarks.quantization_bench [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from .common import median_seconds, print_table, write_results
from .machine import describe, print_machine

MINILM = Path("build/models/minilm")
MARIAN = Path("build/bench/marian-base/attnserve")
WORK = Path("build/bench/quantization")
VARIANTS = ("fp32", "dynamic", "dynamic, reduce_range", "weight-only", "weight-only, int8 compute")
SENTENCES = 1000
PROMPTS, GREEDY_TOKENS = 100, 32  # the Marian checkpoint's greedy agreement with float32


def quantize(source: Path, target: Path, variant: str, embedding: bool) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from model.export.eight_bit import FEED_FORWARD_OUT, weight_matmuls

    target.parent.mkdir(parents=True, exist_ok=True)
    if variant == "fp32":
        shutil.copy(source, target)
        return
    model = onnx.load(str(source))
    nodes = weight_matmuls(model, (FEED_FORWARD_OUT,) if embedding else ())
    if variant.startswith("dynamic"):
        quantize_dynamic(
            model,
            target,
            nodes_to_quantize=nodes,
            per_channel=True,
            weight_type=QuantType.QInt8,
            reduce_range="reduce_range" in variant,
        )
        return
    keep = [n.name for n in model.graph.node if n.op_type == "MatMul" and n.name not in nodes]
    level = 4 if "int8 compute" in variant else None  # accuracy_level 4: activations to int8 for the products
    quantizer = MatMulNBitsQuantizer(
        model, bits=8, block_size=32, is_symmetric=True, nodes_to_exclude=keep, accuracy_level=level
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(target), use_external_data_format=False)


def folder(variant: str) -> Path:
    return WORK / variant.replace(", ", "-").replace(" ", "-")


def make_graphs() -> None:
    from modeldir.files import graph_files

    for variant in VARIANTS:
        out = folder(variant)
        if (out / "done").exists():
            continue
        quantize(MINILM / graph_files("embedding")["encoder"], out / "minilm-encoder.onnx", variant, True)
        for role, path in graph_files("seq2seq").items():
            if role in ("encoder", "decoder"):
                quantize(MARIAN / path, out / f"marian-{role}.onnx", variant, False)
        (out / "done").touch()


def measure(variant: str, threads: int) -> dict:
    """In a fresh process: the variant's timings, and its embeddings written for the quality figures."""
    from model.export.stdlib_sentences import stdlib_sentences
    from modeldir.files import open_model_dir
    from modeldir.tokenizer import TextTokenizer, load_tokenizer, pad_batch
    from service.runner.sessions import SessionSettings, create_session

    from .runner_harness import RunnerHarness

    settings = SessionSettings(device="cpu", intra_op_threads=threads)
    out: dict = {}
    files = open_model_dir(MINILM)
    tokenizer = TextTokenizer(files.tokenizer, files.config.max_input_tokens)
    encoder = create_session(folder(variant) / "minilm-encoder.onnx", settings)
    texts = stdlib_sentences(SENTENCES)
    encoded = [e.ids for e in tokenizer.encode(texts)]
    vectors = [
        encoder.run(["embedding"], dict(zip(("input_ids", "attention_mask"), pad_batch([ids], 0))))[0][0]
        for ids in encoded
    ]
    np.save(folder(variant) / "minilm-vectors.npy", np.stack(vectors))
    batch = pad_batch(sorted(encoded, key=len)[SENTENCES // 2 - 16 : SENTENCES // 2 + 16], 0)  # 32 mid-length
    inputs = dict(zip(("input_ids", "attention_mask"), batch))
    out["minilm_batch_32_ms"] = median_seconds(lambda: encoder.run(["embedding"], inputs), 20, warmup=3) * 1e3
    out["minilm_batch_tokens"] = int(batch[0].size)

    harness = RunnerHarness(MARIAN, threads)
    harness.runner.encoder = create_session(folder(variant) / "marian-encoder.onnx", settings)
    harness.runner.decoder = create_session(folder(variant) / "marian-decoder.onnx", settings)
    marian = open_model_dir(MARIAN)
    marian_tokens = load_tokenizer(marian.config.tokenizer, marian.tokenizer, marian.config.max_input_tokens)
    for rows in (1, 32):
        ids, mask = pad_batch([e.ids for e in marian_tokens.encode(texts[:rows])], marian.config.pad_id)
        cache = harness.cache(ids, mask, 64)
        step = np.full((rows, 1), 7, np.int64)

        def decode():
            cache.lengths[:rows] = 32  # a step at prefix 32, again and again
            harness.step(cache, step)

        out[f"marian_step_{rows}_ms"] = median_seconds(decode, 30, warmup=5) * 1e3
    prompts = [e.ids for e in marian_tokens.encode(stdlib_sentences(PROMPTS, 6, 30))]
    greedy = harness.greedy(*pad_batch(prompts, marian.config.pad_id), GREEDY_TOKENS)
    (folder(variant) / "marian-greedy.json").write_text(json.dumps(greedy))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variant", help="(internal) measure one variant in this process")
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(measure(args.variant, args.threads)))
        return
    if not (MARIAN / "manifest.json").exists():
        sys.exit(f"{MARIAN} is missing: run `python -m benchmarks.marian_bench --rounds 1` once first")
    machine = describe(args.threads)
    print_machine(machine)
    make_graphs()
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for round_ in range(args.rounds):
        for variant in VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]:
            command = [
                sys.executable,
                "-m",
                "benchmarks.quantization_bench",
                "--variant",
                variant,
                "--threads",
                str(args.threads),
            ]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"{variant}: {done.stderr[-2000:]}")
            runs[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {round_ + 1}: {variant} done", file=sys.stderr, flush=True)

    reference = np.load(folder("fp32") / "minilm-vectors.npy")
    reference_greedy = json.loads((folder("fp32") / "marian-greedy.json").read_text())
    rows = []
    for variant, results in runs.items():
        median = {key: statistics.median(r[key] for r in results) for key in results[0]}
        vectors = np.load(folder(variant) / "minilm-vectors.npy")
        cosine = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
        greedy = json.loads((folder(variant) / "marian-greedy.json").read_text())
        same = sum(a == b for a, b in zip(greedy, reference_greedy))
        rows.append(
            [
                variant,
                round(median["minilm_batch_32_ms"], 1),
                f"{cosine.mean():.5f}",
                f"{cosine.min():.5f}",
                round(median["marian_step_1_ms"], 2),
                round(median["marian_step_32_ms"], 2),
                f"{same}/{len(greedy)}",
            ]
        )
    print_table(
        f"8-bit options, {args.threads} threads, medians of {args.rounds} rounds, each variant in a fresh process",
        [
            "variant",
            "MiniLM batch 32 ms",
            "cosine to fp32, mean",
            "min",
            "Marian step 1 row ms",
            "Marian step 32 rows ms",
            "Marian greedy = fp32",
        ],
        rows,
    )
    write_results("quantization_bench", {"machine": machine, "rounds": args.rounds, "runs": runs, "rows": rows})


if __name__ == "__main__":
    main()
