"""The test models, built once and kept under build/test-models, keyed by a hash of everything they are made
from (the build side's code, the model-directory contract, the committed checkpoints, the test shapes, and
the versions of the libraries that build them): a second run of the suite reuses them; any change rebuilds."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "test-models"
# What a test model is made from: the build side, the contract, the checkpoints, the references and shapes.
SOURCES = ("model", "modeldir", "checkpoints", "testing", "tests/conftest.py", "tests/parity_configs.py")
LIBRARIES = ("torch", "transformers", "sentence-transformers", "onnx", "onnxscript", "onnxruntime-gpu", "tokenizers")
STAMP = ".built.json"  # written last: the files' hashes when the build finished


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.name != STAMP)


def _digest(paths: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(str(path.relative_to(root)).encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _version(name: str) -> str:
    try:
        return version(name)
    except Exception:
        return "-"


@functools.cache
def sources_hash(extra: tuple[str, ...] = ()) -> str:
    paths = [p for s in (*SOURCES, *extra) for p in ([ROOT / s] if (ROOT / s).is_file() else _files(ROOT / s))]
    libraries = ",".join(f"{name}={_version(name)}" for name in LIBRARIES)
    return hashlib.sha256((_digest(paths, ROOT) + libraries).encode()).hexdigest()[:16]


def _intact(target: Path) -> bool:
    """Built to the end, and no file changed since (a test that wrote into a model would show here)."""
    stamp = target / STAMP
    return stamp.is_file() and json.loads(stamp.read_text())["files"] == _digest(_files(target), target)


def built(name: str, build: Callable[[Path], object], extra_sources: tuple[str, ...] = ()) -> Path:
    """A folder that build(folder) filled, for this state of the sources: reused when intact, else built
    anew (older builds of `name` removed). extra_sources: files the build also reads (a test module's
    shapes)."""
    target = CACHE / f"{name}-{sources_hash(tuple(extra_sources))}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(CACHE / f"{name}.lock"):  # the suite runs in several processes: one builds, the others wait
        if _intact(target):
            return target
        for old in CACHE.glob(f"{name}-*"):
            if re.fullmatch(f"{re.escape(name)}-[0-9a-f]{{16}}", old.name):  # not another model's: numbers-t5-...
                shutil.rmtree(old, ignore_errors=True)
        # Built in place (a model directory may name its own path), the stamp last: a build that stopped
        # half-way has none, and is built again.
        target.mkdir(parents=True)
        build(target)
        (target / STAMP).write_text(json.dumps({"files": _digest(_files(target), target)}))
        return target
