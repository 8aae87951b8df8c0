"""Many target languages in one batch, on an M2M100-418M-shaped random checkpoint (d_model 1024, 16 heads,
12+12 layers, d_ff 4096, vocabulary 128,112): attnserve (a real server, float32 and int8 graphs) with 32
callers each asking a different target language against 32 asking one, and against CTranslate2 (its
M2M100 converter; each example's target as its target_prefix, so that it too mixes languages in a batch)
at 1 and 32 callers (batches of 1 and 32), float32 and int8. Greedy, exactly --new-tokens new tokens a
sentence after the target's code (eos held off), the same thread count everywhere.

The server runs at `make run`'s defaults (no cache or length flag: its rows as long as the answers asked
for). Every engine runs in a fresh process of its own (benchmarks/engines.py; the server as `attnserve serve`),
--rounds times, the engines' order turned round each round; medians. The machine and its GEMM probe come
first.

    .venv/bin/pip install -e '.[bench]'    # ctranslate2
    .venv/bin/python -m benchmarks.multilingual_bench [--rounds 3] [--sentences 64] [--new-tokens 64]
        [--against ../before]   # another checkout's server beside this one's, in the same run
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from model.families.multilingual.random_checkpoint import MultilingualShape
from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine
from .marian_bench import count, engine, exported_once

M2M100_418M = MultilingualShape(
    "m2m100",
    d_model=1024,
    heads=16,
    encoder_layers=12,
    decoder_layers=12,
    d_ff=4096,
    vocab_size=128112,
    max_positions=1024,
)
WORK = Path("build/bench/m2m100-418m")
SOURCE = "en"
# 32 of M2M100's languages: one a caller in the mixed load; the first alone in the single-language one.
TARGETS = ("fr de es it pt nl sv da fi pl cs sk hu ro bg el ru uk tr ar he fa hi bn ta ja ko zh vi id th sw").split()


def build() -> tuple[Path, Path]:
    """Our model directory (float32 and int8) and the CTranslate2 model, made once, then reused."""
    from model.families.multilingual.importer import import_multilingual
    from model.families.multilingual.random_checkpoint import random_multilingual_checkpoint

    hf, ours, ct2 = WORK / "hf", WORK / "attnserve", WORK / "ct2"
    if not (hf / "model.safetensors").exists():
        random_multilingual_checkpoint(hf, M2M100_418M, seed=0)
    exported_once(ours, lambda: import_multilingual(hf, ours, "m2m100"))
    if not (ct2 / "model.bin").exists():
        convert_for_ctranslate2(hf, ours, ct2)
    return ours, ct2


def convert_for_ctranslate2(hf: Path, ours: Path, ct2: Path) -> None:
    """CTranslate2's M2M100 converter, given the checkpoint's vocabulary in id order: it reads the language
    tokens from the tokenizer's additional special tokens, which transformers 5 no longer lists, and would
    refuse the model (a vocabulary 100 tokens short). The ids are the ones our tokenizer gives."""
    import ctranslate2
    from ctranslate2.converters import transformers as converters

    from modeldir.config import load_config
    from modeldir.language_tokenizer import load_model_tokenizer

    config = load_config(ours)[1]
    ids = load_model_tokenizer(config, ours).base.vocab  # M2M100Tokenizer: vocab.json and the language tokens
    tokens = [token for token, _ in sorted(ids.items(), key=lambda item: item[1])]
    tokens += [f"madeupword{i}" for i in range(config.vocab_size - len(tokens))]
    converters.M2M100Loader.get_vocabulary = lambda self, model, tokenizer: tokens
    ctranslate2.converters.TransformersConverter(str(hf)).convert(str(ct2), force=True)


def languages(mixed: bool) -> str:
    return f"{SOURCE}:{','.join(TARGETS if mixed else TARGETS[:1])}"


def run_attnserve(ours: Path, precision: str, args, round_: int, checkout: Path | None = None) -> dict:
    """One server for every load (of this checkout, or of `checkout`): -> (load, batch) -> figures."""
    server = ServerProcess(
        "--precision",
        precision,
        "--intra-op-threads",
        str(args.threads),
        "--kv-cache-bytes",
        str(args.kv_cache_bytes),
        models=[str(ours.resolve())],
        cwd=checkout,
    )
    try:
        out = {}
        for batch in args.batches:
            loads = ("mixed", "single") if round_ % 2 == 0 else ("single", "mixed")  # a fresh server's first
            for load in loads if batch > 1 else ("mixed",):  # load is slower: each load goes first in turn
                out[load, batch] = engine(
                    "attnserve-generate",
                    "--target",
                    server.target,
                    "--served",
                    "m2m100",
                    "--count",
                    str(count(batch, args)),
                    "--concurrency",
                    str(batch),
                    "--new-tokens",
                    str(args.new_tokens),
                    "--languages",
                    languages(load == "mixed"),
                )
        return out
    finally:
        server.stop()


def run_ctranslate2(ct2: Path, ours: Path, compute_type: str, args, round_: int) -> dict:
    return {
        ("mixed", batch): engine(
            "ct2-generate",
            "--model",
            str(ct2),
            "--tokenizer",
            str(ours),
            "--compute-type",
            compute_type,
            "--batch",
            str(batch),
            "--count",
            str(count(batch, args)),
            "--threads",
            str(args.threads),
            "--new-tokens",
            str(args.new_tokens),
            "--languages",
            languages(True),
        )
        for batch in args.batches
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=64, help="at 32 callers; a quarter at 1")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--kv-cache-bytes", type=int, default=0, help="the server's; 0: its default (1 GiB on the CPU)")
    parser.add_argument("--build-only", action="store_true", help="make the models, measure nothing")
    parser.add_argument("--engines", nargs="+", help="only these (e.g. 'attnserve int8'); the goals need all four")
    parser.add_argument("--against", type=Path, help="another checkout's server too ('attnserve fp32 before', ...)")
    args = parser.parse_args()
    ours, ct2 = build()
    if args.build_only:
        return
    machine = describe(args.threads)
    print_machine(machine)
    engines = {
        **{f"attnserve {p}": (lambda r, p=p: run_attnserve(ours, p, args, r)) for p in ("fp32", "int8")},
        **{f"ctranslate2 {t}": (lambda r, t=t: run_ctranslate2(ct2, ours, t, args, r)) for t in ("float32", "int8")},
    }
    if args.against:
        for p in ("fp32", "int8"):
            engines[f"attnserve {p} before"] = lambda r, p=p: run_attnserve(ours, p, args, r, args.against.resolve())
    engines = {name: run for name, run in engines.items() if not args.engines or name in args.engines}
    runs: dict[tuple[str, str, int], list[dict]] = {}
    names = list(engines)
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:  # the order turned round each round
            for (load, batch), result in engines[name](round_).items():
                runs.setdefault((name, load, batch), []).append(result)
            print(f"round {round_ + 1}: {name} done", file=sys.stderr, flush=True)

    def rate(name: str, load: str, batch: int) -> float:
        if (name, load, batch) not in runs:
            return float("nan")
        return statistics.median(r["tokens_per_second"] for r in runs[name, load, batch])

    rows = []
    for (name, load, batch), results in sorted(runs.items(), key=lambda item: (item[0][2], item[0][0], item[0][1])):
        p50 = statistics.median(r["latency_p50"] for r in results)
        rows.append([name, load, batch, round(rate(name, load, batch), 1), round(p50, 3)])
    title = (
        f"M2M100-418M-shaped random checkpoint, greedy, {args.new_tokens} new tokens, {args.threads} threads, "
        f"median of {args.rounds} rounds, each engine in a fresh process"
    )
    print_table(title, ["engine", "targets", "callers / batch", "tokens/s", "p50 s"], rows)
    goals = []
    for p in ("fp32", "int8"):
        for batch in args.batches:
            if batch > 1:
                goals.append(
                    [
                        f"attnserve {p}, {batch} targets / one target, {batch} callers",
                        0.95,
                        rate(f"attnserve {p}", "mixed", batch) / rate(f"attnserve {p}", "single", batch),
                    ]
                )
    for p, t, goal in (("fp32", "float32", 1.1), ("int8", "int8", 1.3)):
        for batch in args.batches:
            goals.append(
                [
                    f"attnserve {p} / CT2 {t}, {batch} callers, mixed targets",
                    goal,
                    rate(f"attnserve {p}", "mixed", batch) / rate(f"ctranslate2 {t}", "mixed", batch),
                ]
            )
    goals = [g for g in goals if g[2] == g[2]]  # NaN where --engines left an engine out
    print_table("Goals", ["figure", "goal", "measured"], [[g, f"{t}", round(m, 2)] for g, t, m in goals])
    write_results(
        "multilingual_bench",
        {
            "machine": machine,
            "rounds": args.rounds,
            "rows": rows,
            "goals": goals,
            "runs": {f"{n} {load} b{b}": v for (n, load, b), v in runs.items()},
        },
    )


if __name__ == "__main__":
    main()
