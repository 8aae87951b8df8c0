"""T5 and BART with beam search against CTranslate2 and transformers: a flan-t5-base-shaped random checkpoint
(d_model 768, 12 heads of 64, 12+12 layers, gated-GELU d_ff 2048, vocabulary 32,128) and a
distilbart-cnn-12-6-shaped one (d_model 1024, 16 heads, 12+6 layers, d_ff 4096, vocabulary 50,265), 4
beams, 1 and 32 callers: attnserve (a real server; float32 and int8 graphs), CTranslate2 (its converter;
float32 and int8; batches of 1 and 32) and transformers' generate (float32; batches of 1 and 32). Up to
--new-tokens tokens a source, ending at eos, the same thread count everywhere. Then MADLAD-400 3B's widths
(4+4 of its 32+32 layers) served to 32 callers greedy, each asking its own target language, against all
asking one.

Every engine runs in a fresh process of its own (benchmarks/engines.py; the server as `attnserve serve`),
--rounds times, the engines' order turned round each round; medians. The machine and its GEMM probe come
first.

    .venv/bin/pip install -e '.[bench]'    # ctranslate2
    .venv/bin/python -m benchmarks.text_to_text_bench [--rounds 3] [--sentences 32] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from model.families.bart.random_checkpoint import BartShape
from model.families.t5.random_checkpoint import T5Shape
from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine
from .marian_bench import count, engine, exported_once

SHAPES = {
    "flan-t5-base": T5Shape(
        d_model=768, d_kv=64, heads=12, encoder_layers=12, decoder_layers=12, d_ff=2048, vocab_size=32128
    ),
    "distilbart-cnn": BartShape(
        d_model=1024, heads=16, encoder_layers=12, decoder_layers=6, d_ff=4096, vocab_size=50265, max_positions=1024
    ),
}
WORK = Path("build/bench")
BEAMS = 4
# MADLAD-400 3B's widths (d_model 1024, 16 heads of 128: twice d_model, gated d_ff 8192, vocabulary 256,000)
# at 4+4 layers of its 32+32, with 32 target tokens: 32 callers, each its own target, against all one.
MADLAD_TARGETS = tuple(
    "de fr es it pt nl sv da fi pl cs sk hu ro bg el ru uk tr ar he fa hi bn ta ja ko zh vi id th sw".split()
)
MADLAD = T5Shape(
    d_model=1024,
    d_kv=128,
    heads=16,
    encoder_layers=4,
    decoder_layers=4,
    d_ff=8192,
    vocab_size=256000,
    languages=MADLAD_TARGETS,
)


def build(name: str) -> tuple[Path, Path, Path]:
    """The checkpoint, our model directory (float32 and int8) and the CTranslate2 model: made once, reused."""
    import ctranslate2

    from model.families.bart.importer import import_bart
    from model.families.bart.random_checkpoint import random_bart_checkpoint
    from model.families.t5.importer import import_t5
    from model.families.t5.random_checkpoint import random_t5_checkpoint

    hf, ours, ct2 = WORK / name / "hf", WORK / name / "attnserve", WORK / name / "ct2"
    t5 = isinstance(SHAPES[name], T5Shape)
    if not (hf / "model.safetensors").exists():
        (random_t5_checkpoint if t5 else random_bart_checkpoint)(hf, SHAPES[name], seed=0)
    exported_once(ours, lambda: (import_t5 if t5 else import_bart)(hf, ours, name))
    if not (ct2 / "model.bin").exists():
        if not t5:
            _bart_loader_for_transformers_5(ours)
        ctranslate2.converters.TransformersConverter(str(hf)).convert(str(ct2), force=True)
    return hf, ours, ct2


def _bart_loader_for_transformers_5(ours: Path) -> None:
    """CTranslate2's BART converter reads config.normalize_before, which transformers 5's BartConfig no
    longer has (BART is post-norm: False), and takes the vocabulary from the tokenizer, shorter than the
    token table of a checkpoint whose table has rows past it: given the tokenizer's tokens in id order,
    filled up to the table's size."""
    import transformers
    from ctranslate2.converters import transformers as converters
    from tokenizers import Tokenizer

    from modeldir.config import load_config

    transformers.BartConfig.normalize_before = False
    ids = Tokenizer.from_file(str(ours / "tokenizer.json")).get_vocab()
    tokens = [token for token, _ in sorted(ids.items(), key=lambda item: item[1])]
    tokens += [f"madeupword{i}" for i in range(load_config(ours)[1].vocab_size - len(tokens))]
    converters.BartLoader.get_vocabulary = lambda self, model, tokenizer: tokens


def common(batch: int, args) -> list[str]:
    return ["--count", str(count(batch, args)), "--new-tokens", str(args.new_tokens), "--beams", str(BEAMS)]


def run_attnserve(name: str, ours: Path, precision: str, args) -> dict:
    """One server for both loads: -> batch -> figures."""
    threads = str(args.threads)
    tokens = str(args.row_tokens or args.new_tokens + 1)  # room for BART's forced first token
    flags = ("--precision", precision, "--intra-op-threads", threads, "--max-new-tokens", tokens)
    flags += ("--kv-cache-bytes", str(args.kv_cache_bytes)) if args.kv_cache_bytes else ()
    server = ServerProcess(*flags, models=[str(ours.resolve())])
    try:
        return {
            batch: engine(
                "attnserve-generate",
                "--target",
                server.target,
                "--served",
                name,
                "--concurrency",
                str(batch),
                *common(batch, args),
            )
            for batch in args.batches
        }
    finally:
        server.stop()


def run_ctranslate2(ct2: Path, ours: Path, compute_type: str, args) -> dict:
    return {
        batch: engine(
            "ct2-generate",
            "--model",
            str(ct2),
            "--tokenizer",
            str(ours),
            "--compute-type",
            compute_type,
            "--batch",
            str(batch),
            "--threads",
            str(args.threads),
            *common(batch, args),
        )
        for batch in args.batches
    }


def run_transformers(hf: Path, args) -> dict:
    return {
        batch: engine(
            "hf-generate",
            "--model",
            str(hf),
            "--batch",
            str(batch),
            "--threads",
            str(args.threads),
            *common(batch, args),
        )
        for batch in args.batches
    }


def madlad_targets(args, figures: dict) -> None:
    """32 callers of the MADLAD-shaped model, greedy, each asking its own target against all asking one;
    one server, the loads in turned order each round."""
    from model.families.t5.importer import import_t5
    from model.families.t5.random_checkpoint import random_t5_checkpoint

    hf, ours = WORK / "madlad-3b-4x4" / "hf", WORK / "madlad-3b-4x4" / "attnserve"
    if not (hf / "model.safetensors").exists():
        random_t5_checkpoint(hf, MADLAD, seed=0)
    exported_once(ours, lambda: import_t5(hf, ours, "madlad"))
    loads = {"mixed": ":" + ",".join(MADLAD_TARGETS), "one language": ":" + MADLAD_TARGETS[0]}
    rates: dict[str, list[float]] = {load: [] for load in loads}
    for round_ in range(args.rounds):
        threads, tokens = str(args.threads), str(args.new_tokens)
        server = ServerProcess("--intra-op-threads", threads, "--max-new-tokens", tokens, models=[str(ours.resolve())])
        try:
            for load in list(loads)[round_ % 2 :] + list(loads)[: round_ % 2]:
                figures_ = engine(
                    "attnserve-generate",
                    "--target",
                    server.target,
                    "--served",
                    "madlad",
                    "--concurrency",
                    "32",
                    "--count",
                    str(args.sentences),
                    "--new-tokens",
                    tokens,
                    "--languages",
                    loads[load],
                )
                rates[load].append(figures_["tokens_per_second"])
        finally:
            server.stop()
    medians = {load: statistics.median(r) for load, r in rates.items()}
    rows = [[load, medians[load], medians[load] / medians["one language"]] for load in loads]
    title = (
        f"MADLAD-400 3B's widths, 4+4 layers: 32 callers, greedy, {args.new_tokens} tokens, medians of {args.rounds}"
    )
    print_table(title, ["targets", "tokens/s", "vs one language"], rows)
    figures["madlad"] = {"tokens_per_second": medians, "rounds": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=32, help="sources at 32 callers (a quarter at 1)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-madlad", action="store_true", help="leave out the MADLAD-shaped mixed-target load")
    parser.add_argument("--kv-cache-bytes", type=int, default=0, help="attnserve's cache; default: the server's")
    parser.add_argument(
        "--row-tokens", type=int, default=0, help="attnserve's --max-new-tokens (a cache row's); 0: --new-tokens + 1"
    )
    parser.add_argument("--engines", nargs="+", help="only these (names as in the table); default: all")
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    figures = {"machine": machine, "args": vars(args), "models": {}}
    for name in args.models:
        hf, ours, ct2 = build(name)
        engines = {
            "attnserve float32": lambda: run_attnserve(name, ours, "fp32", args),
            "attnserve int8": lambda: run_attnserve(name, ours, "int8", args),
            "ctranslate2 float32": lambda: run_ctranslate2(ct2, ours, "float32", args),
            "ctranslate2 int8": lambda: run_ctranslate2(ct2, ours, "int8", args),
            "transformers float32": lambda: run_transformers(hf, args),
        }
        engines = {e: run for e, run in engines.items() if not args.engines or e in args.engines}
        runs: dict[str, list[dict]] = {engine_name: [] for engine_name in engines}
        for round_ in range(args.rounds):
            order = list(engines)[round_ % len(engines) :] + list(engines)[: round_ % len(engines)]
            for engine_name in order:
                runs[engine_name].append(engines[engine_name]())
                print(f"{name} round {round_ + 1}: {engine_name} done", flush=True)
        medians = {
            (engine_name, batch): {
                key: statistics.median(r[batch][key] for r in rounds)
                for key in ("tokens_per_second", "latency_p50", "tokens", "seconds")
            }
            for engine_name, rounds in runs.items()
            for batch in args.batches
        }
        # Sources a second: every engine translates the same sources (the token counts differ by BART's
        # forced first token, which CTranslate2 counts and the others do not)
        rows = []
        for (engine_name, batch), m in medians.items():
            baseline = medians.get((f"ctranslate2 {engine_name.split()[-1]}", batch))  # (not among --engines)
            ratio = baseline["seconds"] / m["seconds"] if baseline else "-"
            rate = count(batch, args) / m["seconds"]
            tokens = int(m["tokens"])
            rows.append([engine_name, batch, rate, ratio, m["tokens_per_second"], tokens, m["latency_p50"]])
        title = f"{name}: {BEAMS} beams, up to {args.new_tokens} tokens, medians of {args.rounds} rounds"
        header = ["engine", "callers", "sources/s", "vs CTranslate2 same precision", "tokens/s", "tokens", "p50 s"]
        print_table(title, header, rows)
        figures["models"][name] = {f"{e} @ {b}": m for (e, b), m in medians.items()}
    if not args.no_madlad:
        madlad_targets(args, figures)
    write_results("text_to_text_bench", figures)


if __name__ == "__main__":
    main()
