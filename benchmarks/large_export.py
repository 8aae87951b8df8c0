"""A model over 2 GB through the build by hand: a random checkpoint of a published full shape (NLLB-200 1.3B,
NLLB-200 3.3B, MADLAD-400 3B, or a miniature to try the script; transformers builds it, no hub here), imported, exported in float32 and
float16 with its large graphs' weights in data files beside them, then served: one translation. Each stage
runs in a fresh process under /usr/bin/time; printed: its wall time, its peak resident memory, and the
disk of what it wrote.

    .venv/bin/python -m benchmarks.large_export --shape nllb-1.3b --out /a/roomy/folder
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from service.grpc_api.client import Client
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine

# transformers' config fields of each full shape, as the published checkpoints state them
NLLB = dict(family="nllb", heads=16, encoder_layers=24, decoder_layers=24, d_ff=8192, vocab_size=256206)
SHAPES = {
    "nllb-miniature": ("multilingual", dict(family="nllb", d_model=64, heads=4, encoder_layers=2, decoder_layers=2)),
    "nllb-1.3b": ("multilingual", {**NLLB, "d_model": 1024}),
    "nllb-3.3b": ("multilingual", {**NLLB, "d_model": 2048}),
    "madlad-3b": ("t5", dict(d_model=1024, d_kv=128, heads=16, encoder_layers=32, decoder_layers=32, d_ff=8192)),
}
SHAPES["madlad-3b"][1].update(vocab_size=256000, languages=["de", "fr", "es"])

BUILD = """
import json, sys
from pathlib import Path
kind, fields, out = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
if kind == "multilingual":
    from model.families.multilingual.random_checkpoint import MultilingualShape, random_multilingual_checkpoint
    random_multilingual_checkpoint(out, MultilingualShape(**fields, max_positions=1024))
else:
    from model.families.t5.random_checkpoint import T5Shape, random_t5_checkpoint
    random_t5_checkpoint(out, T5Shape(**{**fields, "languages": tuple(fields["languages"])}))
"""


def stage(name: str, argv: list[str]) -> dict:
    """argv in a fresh process under /usr/bin/time: -> its wall seconds and peak resident GiB."""
    print(f"{name} ...", flush=True)
    started = time.perf_counter()
    result = subprocess.run(["/usr/bin/time", "-f", "peak_kib %M", *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode:
        sys.exit(f"{name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    peak = next(int(line.split()[1]) for line in result.stderr.splitlines() if line.startswith("peak_kib"))
    return {"stage": name, "seconds": round(seconds, 1), "peak_gib": round(peak / 2**20, 2)}


def serve(model_dir: Path, kind: str) -> dict:
    """`attnserve serve` on the model (checksums, sessions, warm-up), then one translation: its time to
    serving, the call's, and its peak resident memory (VmHWM)."""
    print("serve: attnserve serve ...", flush=True)
    started = time.perf_counter()
    server = ServerProcess(models=(str(model_dir),))
    loaded = time.perf_counter() - started
    try:
        source = "eng_Latn" if kind == "multilingual" else ""
        params = pb.GenerationParams(max_new_tokens=16, num_beams=1)
        request = pb.GenerateRequest(input="one two three", source_language=source, params=params)
        request.target_language = "fra_Latn" if kind == "multilingual" else "fr"
        started = time.perf_counter()
        with Client(server.target, timeout=600) as client:
            answer = client.stub.Generate(request, timeout=600)
        call = time.perf_counter() - started
        status = Path(f"/proc/{server.pid}/status").read_text()
        peak = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))
    finally:
        server.stop()
    print(f"  {len(answer.token_ids)} tokens in {call:.2f} s after {loaded:.1f} s to serving")
    return {
        "stage": "serve: start, one 16-token translation",
        "seconds": round(loaded + call, 1),
        "peak_gib": round(peak / 2**20, 2),
    }


def disk(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**30, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="nllb-1.3b")
    parser.add_argument("--out", type=Path, required=True, help="a folder with room for the checkpoint twice")
    args = parser.parse_args()
    kind, fields = SHAPES[args.shape]
    checkpoint, model_dir = args.out / f"{args.shape}-hf", args.out / args.shape
    machine = describe(threads=2)
    print_machine(machine)
    python = sys.executable
    stages = [stage("random checkpoint", [python, "-c", BUILD, kind, json.dumps(fields), str(checkpoint)])]
    stages.append(stage("import", [python, "-m", "cli", "import", str(checkpoint), str(model_dir), "--name", "big"]))
    stages.append(stage("export fp32 + fp16", [python, "-m", "cli", "export", str(model_dir), "--precision", "fp16"]))
    manifest = json.loads((model_dir / "manifest.json").read_text())
    stages.append(serve(model_dir, kind))
    data = {f: round((model_dir / f).stat().st_size / 2**30, 2) for f in manifest["sha256"] if f.endswith(".data")}
    rows = [[s["stage"], s["seconds"], s["peak_gib"]] for s in stages]
    print_table(f"{args.shape}: stages, each in a fresh process", ["stage", "wall s", "peak resident GiB"], rows)
    print(f"\ndisk: checkpoint {disk(checkpoint)} GiB, model directory {disk(model_dir)} GiB; data files {data}")
    print(f"parity fp32 {manifest['parity']}; fp16 {manifest['fp16']['parity']}")
    figures = {"machine": machine, "shape": args.shape, "stages": stages, "data_files_gib": data}
    write_results(f"large_export_{args.shape}", figures | {"disk_gib": disk(model_dir), "parity": manifest["parity"]})


if __name__ == "__main__":
    main()
