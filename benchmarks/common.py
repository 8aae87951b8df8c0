"""Helpers shared by the benchmarks: deterministic English-like sentences, timing, tables, result files."""

from __future__ import annotations

import json
import platform
import random
import statistics
import time
from datetime import date
from pathlib import Path

RESULTS_DIR = Path(__file__).parent / "results"

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no will can more other out time what about "
    "up some into them its then two could these may first like only people new over also now after any most made "
    "years many before must through back where much your way well down should because each just those how too "
    "little state good very make world still own see men work long get here between both life being under never "
    "day same another know while last might us great old year off come since against go came right used take "
    "three delivery truck street narrow window morning river city market teacher student garden winter summer "
    "engine program server request network station village mountain coffee letter history science language"
).split()


def sentences(count: int, min_words: int, max_words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))]
        out.append(" ".join(words).capitalize() + ".")
    return out


def median_seconds(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [header] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for i, row in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def write_results(name: str, figures: dict) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    machine = {"machine": platform.machine(), "processor": platform.processor(), "cpus": _cpu_count()}
    path.write_text(json.dumps({"date": date.today().isoformat(), **machine, **figures}, indent=2) + "\n")
    print(f"\nfigures written to {path}")
    return path


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
