"""Translation throughput and latency on a Marian-base-sized random MarianMT checkpoint (d_model 512, 8 heads,
6+6 layers, d_ff 2048, vocab 32000): attnserve (a real server, float32 and int8 graphs, callers in another
process) against transformers' generate and CTranslate2 (converted from the same checkpoint; float32, int8,
int8_float32). Greedy, exactly --new-tokens tokens per sentence in every engine (eos held off), the same
thread count everywhere; 1 and 32 concurrent callers (batches of 1 and 32 for the libraries).

Every engine runs in a fresh process of its own (benchmarks/engines.py; the server as `attnserve serve`),
--rounds times, the engines' order turned round each round; medians. The machine and its GEMM probe come
first, and each engine's useful rate (the model's multiply-adds per generated token x tokens/s) against it.

    .venv/bin/pip install -e '.[bench]'    # ctranslate2
    .venv/bin/python -m benchmarks.marian_bench [--rounds 3] [--sentences 64] [--new-tokens 64] [--threads 2]

--against DIR: attnserve only, this checkout's server against that checkout's (e.g. `git worktree add
../before <commit>`), in turn each round; the table gives their ratio. Each side serves the checkpoint
as its own code imported and exported it (DIR/build/bench/marian-base/attnserve, made there first, e.g.
with `python -c` of import_marian and export_model_dir run in DIR): a newer export may carry config
fields an older server does not know.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
from pathlib import Path

from model.families.marian.random_checkpoint import MarianShape
from modeldir.files import GRAPH_SETS, MANIFEST_FORMAT
from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine, share_of_probe

MARIAN_BASE = MarianShape(
    d_model=512,
    heads=8,
    encoder_layers=6,
    decoder_layers=6,
    d_ff=2048,
    activation="swish",
    vocab_size=32000,
    max_positions=512,
)
WORK = Path("build/bench/marian-base")
SOURCE_TOKENS = 30  # about, per sentence of benchmarks/translation_load.py


def exported_once(ours: Path, import_checkpoint) -> None:
    """Our model directory, imported and exported in float32 and int8 unless an earlier run left it (of
    this manifest format)."""
    from model.export.model_dir import export_model_dir

    manifest = ours / "manifest.json"
    written = json.loads(manifest.read_text()) if manifest.exists() else {}
    if written.get("format") != MANIFEST_FORMAT or not set(GRAPH_SETS["int8"]) <= set(written):
        import_checkpoint()
        export_model_dir(ours, progress_stream=io.StringIO(), reduced=("int8",))


def build(ctranslate2_model: bool = True) -> tuple[Path, Path, Path]:
    """The Hugging Face checkpoint, our model directory (float32 and int8) and the CTranslate2 model (made
    once, then reused; not made unless asked)."""
    from model.families.marian.importer import import_marian
    from model.families.marian.random_checkpoint import random_marian_checkpoint

    hf, ours, ct2 = WORK / "hf", WORK / "attnserve", WORK / "ct2"
    if not (hf / "model.safetensors").exists():
        random_marian_checkpoint(hf, MARIAN_BASE, seed=0)
    exported_once(ours, lambda: import_marian(hf, ours, "marian-base"))
    if ctranslate2_model and not (ct2 / "model.bin").exists():
        import ctranslate2

        ctranslate2.converters.TransformersConverter(str(hf)).convert(str(ct2), force=True)
    return hf, ours, ct2


def multiply_adds_per_token(shape: MarianShape, new_tokens: int) -> float:
    """Per generated token: the decoder step (self-attention, cross-attention's query and output, the
    feed-forward, the output layer) and its share of the encoder (SOURCE_TOKENS tokens a sentence)."""
    d, f = shape.d_model, shape.d_ff
    decoder = shape.decoder_layers * (6 * d * d + 2 * d * f) + d * shape.vocab_size
    encoder = shape.encoder_layers * (4 * d * d + 2 * d * f) + shape.decoder_layers * 2 * d * d  # cross K/V too
    return decoder + encoder * SOURCE_TOKENS / new_tokens


def engine(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.engines", *args], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"engines {' '.join(args)}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def decode_step_seconds(server: ServerProcess) -> tuple[float, float]:
    labels = {"model": "marian-base", "stage": "decode"}
    return (
        server.metric("attnserve_inference_duration_seconds_sum", **labels),
        server.metric("attnserve_inference_duration_seconds_count", **labels),
    )


def run_attnserve(ours: Path, precision: str, batches: list[int], args, cwd: Path | None = None) -> dict:
    """One server (in its own process; `cwd`'s code) for both batch sizes: -> batch -> figures, with the
    mean decode step."""
    server = ServerProcess(
        "--precision",
        precision,
        "--intra-op-threads",
        str(args.threads),
        "--max-new-tokens",
        str(args.new_tokens),
        models=[str(ours.resolve())],
        cwd=cwd,
    )
    try:
        out = {}
        for batch in batches:
            before = decode_step_seconds(server)
            out[batch] = engine(
                "attnserve-generate",
                "--target",
                server.target,
                "--served",
                "marian-base",
                "--count",
                str(count(batch, args)),
                "--concurrency",
                str(batch),
                "--new-tokens",
                str(args.new_tokens),
            )
            after = decode_step_seconds(server)
            out[batch]["decode_step_ms"] = 1e3 * (after[0] - before[0]) / (after[1] - before[1])
        return out
    finally:
        server.stop()


def count(batch: int, args) -> int:
    return args.sentences if batch > 1 else max(8, args.sentences // 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=64, help="at 32 callers; a quarter at 1")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--against", type=Path, help="attnserve only: this checkout against that one (before)")
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    hf_dir, ours, ct2_dir = build(ctranslate2_model=not args.against)
    if args.against:
        return against(ours, args, machine)
    common = ["--threads", str(args.threads), "--new-tokens", str(args.new_tokens)]
    libraries = {
        "transformers": lambda b: engine(
            "hf-generate", "--model", str(hf_dir), "--batch", str(b), "--count", str(count(b, args)), *common
        ),
        **{
            f"ctranslate2 {t}": (
                lambda b, t=t: engine(
                    "ct2-generate",
                    "--model",
                    str(ct2_dir),
                    "--tokenizer",
                    str(ours),
                    "--compute-type",
                    t,
                    "--batch",
                    str(b),
                    "--count",
                    str(count(b, args)),
                    *common,
                )
            )
            for t in ("float32", "int8", "int8_float32")
        },
    }
    servers = {f"attnserve {p}": p for p in ("fp32", "int8")}
    runs: dict[tuple[str, int], list[dict]] = {}
    names = list(libraries) + list(servers)
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:  # the order turned round each round
            if name in servers:
                for batch, r in run_attnserve(ours, servers[name], args.batches, args).items():
                    runs.setdefault((name, batch), []).append(r)
            else:
                for batch in args.batches:
                    runs.setdefault((name, batch), []).append(libraries[name](batch))
            print(f"round {round_ + 1}: {name} done", file=sys.stderr, flush=True)

    def median(name: str, batch: int, key: str) -> float:
        return statistics.median(r[key] for r in runs[name, batch])

    macs = multiply_adds_per_token(MARIAN_BASE, args.new_tokens)
    rows, figures = (
        [],
        {"machine": machine, "rounds": args.rounds, "runs": {f"{n} b{b}": v for (n, b), v in runs.items()}},
    )
    for batch in args.batches:
        for name in names:
            rate = median(name, batch, "tokens_per_second")
            gflops, share = share_of_probe(macs, rate, machine)
            rows.append(
                [
                    name,
                    batch,
                    round(rate, 1),
                    round(median(name, batch, "latency_p50"), 3),
                    round(rate / median("transformers", batch, "tokens_per_second"), 2),
                    round(rate / median("ctranslate2 float32", batch, "tokens_per_second"), 2),
                    round(rate / median("ctranslate2 int8", batch, "tokens_per_second"), 2),
                    round(gflops, 1),
                    f"{share:.0%}",
                ]
            )
    print_table(
        f"Marian-base random checkpoint, greedy, {args.new_tokens} new tokens, {args.threads} threads, "
        f"median of {args.rounds} rounds, each engine in a fresh process",
        [
            "engine",
            "batch",
            "tokens/s",
            "p50 s",
            "x transformers",
            "x CT2 float32",
            "x CT2 int8",
            "GFLOP/s",
            "of GEMM probe",
        ],
        rows,
    )
    ct2 = {
        b: max(("float32", "int8", "int8_float32"), key=lambda t: median(f"ctranslate2 {t}", b, "tokens_per_second"))
        for b in args.batches
    }
    goals = []
    for b in args.batches:
        ours_fp32, ours_int8 = (median(f"attnserve {p}", b, "tokens_per_second") for p in ("fp32", "int8"))
        goals += [
            [f"fp32 / CT2 float32, batch {b}", 1.1, ours_fp32 / median("ctranslate2 float32", b, "tokens_per_second")],
            [
                f"int8 / CT2 int8, batch {b}",
                1.5 if b == 1 else 1.3,
                ours_int8 / median("ctranslate2 int8", b, "tokens_per_second"),
            ],
            [
                f"int8 / CT2's fastest ({ct2[b]}), batch {b}",
                1.0,
                ours_int8 / median(f"ctranslate2 {ct2[b]}", b, "tokens_per_second"),
            ],
        ]
    step = {p: median(f"attnserve {p}", 1, "decode_step_ms") for p in ("fp32", "int8")} if 1 in args.batches else {}
    if step:
        goals.append(["decode step at batch 1, int8 / fp32 (at most)", 0.6, step["int8"] / step["fp32"]])
    print_table("Goals", ["figure", "goal", "measured"], [[g, f"{t}", round(m, 2)] for g, t, m in goals])
    figures.update(rows=rows, goals=goals, decode_step_ms=step, multiply_adds_per_token=macs)
    write_results("marian_bench", figures)


def against(ours: Path, args, machine: dict) -> None:
    """attnserve fp32 and int8 of this checkout and of args.against, each a fresh server, in turn each round."""
    sides = {"after": None, "before": args.against.resolve()}
    models = {"after": ours, "before": args.against.resolve() / WORK / "attnserve"}
    runs: dict[tuple[str, str, int], list[dict]] = {}
    for round_ in range(args.rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for precision in ("fp32", "int8"):
            for side in order:
                for batch, r in run_attnserve(models[side], precision, args.batches, args, sides[side]).items():
                    runs.setdefault((side, precision, batch), []).append(r)
        print(f"round {round_ + 1} done", file=sys.stderr, flush=True)
    rows = []
    for precision in ("fp32", "int8"):
        for batch in args.batches:
            after, before = (
                statistics.median(r["tokens_per_second"] for r in runs[s, precision, batch]) for s in sides
            )
            spread = max(r["tokens_per_second"] for r in runs["after", precision, batch]) - min(
                r["tokens_per_second"] for r in runs["after", precision, batch]
            )
            ratio, half = f"{after / before:.2f}x", f"±{spread / 2 / after:.0%}"
            rows.append([f"attnserve {precision}", batch, round(after, 1), round(before, 1), ratio, half])
    print_table(
        f"Marian-base, greedy, {args.new_tokens} new tokens, {args.threads} threads, medians of {args.rounds} "
        f"rounds, against {args.against}",
        ["engine", "batch", "tokens/s", "before", "ratio", "half spread"],
        rows,
    )
    write_results("marian_bench_against", {"machine": machine, "rows": rows})


if __name__ == "__main__":
    main()
