"""`attnserve prepare`: what an InferenceService's storageUri delivered (KServe's /mnt/models) made ready to
serve. Attnserve model directories are served as they are; a Hugging Face checkpoint of a served family is
imported and exported into a cache directory keyed by the checkpoint's checksum, so that the next pod (or a
restart) finds it there and starts at once. It runs where torch is (the import image, Dockerfile.import, before
the server in deploy/kserve/huggingface.yaml's runtime); the server that serves the result never imports torch."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path

from modeldir.files import MANIFEST_FILE

CHUNK = 1 << 20


def checkpoint_checksum(source: Path) -> str:
    """sha256 over a checkpoint's files: each one's path under it and its bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(source)).encode() + b"\0")
        with path.open("rb") as file:
            while block := file.read(CHUNK):
                digest.update(block)
    return digest.hexdigest()


def delivered(paths: list[Path]) -> list[Path]:
    """Each path that is a model directory or a checkpoint (it has manifest.json or config.json) as it is;
    a directory of them as each of them, by name."""
    found = []
    for path in paths:
        if (path / MANIFEST_FILE).is_file() or (path / "config.json").is_file():
            found.append(path)
        else:
            found.extend(
                sorted(p for p in path.iterdir() if (p / MANIFEST_FILE).is_file() or (p / "config.json").is_file())
            )
    return found


def exported_into_cache(source: Path, cache: Path, name: str, reduced: tuple[str, ...]) -> tuple[Path, bool]:
    """The checkpoint imported and exported under cache/<checksum>-<graphs>-<name> (-> it, and whether it
    was there already): the same checkpoint exported with other graphs is another entry. Written beside it
    first and renamed into place, so that a pod that stops half way or races another leaves no half-written
    model where the next one looks."""
    from model.export.model_dir import export_model_dir
    from model.families.choice import family_of

    graphs = "-".join(("fp32", *reduced))
    target = cache / f"{checkpoint_checksum(source)[:32]}-{graphs}-{name}"
    if (target / MANIFEST_FILE).is_file():
        return target, True
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
    try:
        family, _ = family_of(source)
        model_dir = family.importer(source, work / name, name)
        export_model_dir(model_dir, progress_stream=io.StringIO(), reduced=reduced)
        try:
            os.replace(model_dir, target)
        except OSError:  # another pod renamed the same export into place first: keep its
            if not (target / MANIFEST_FILE).is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target, False


def cmd_prepare(args) -> None:
    from .build import _needs_torch

    out, cache = Path(args.out), Path(args.cache)
    sources = delivered([Path(p) for p in args.sources])
    if not sources:
        sys.exit(f"attnserve prepare: no model directory or checkpoint in {', '.join(map(str, args.sources))}")
    out.mkdir(parents=True, exist_ok=True)
    reduced = tuple(p for p in args.precision if p != "fp32")
    for source in sources:
        # hf:// leaves the checkpoint itself at /mnt/models, whose name says nothing: --name names it.
        name = args.name if args.name and source in args.sources else source.name
        if (source / MANIFEST_FILE).is_file():
            ready, how = source, "a model directory, served as it is"
        else:
            _needs_torch()
            ready, cached = exported_into_cache(source, cache, name, reduced)
            how = "from the cache" if cached else "imported and exported into the cache"
        link = out / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(ready.resolve(), target_is_directory=True)
        print(f"{link}: {source} ({how})")
