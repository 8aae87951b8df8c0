"""Model directories as KServe's storage initializer leaves them (/mnt/models, filled from an
InferenceService's storageUri): the directory itself one model directory, or a directory of them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .files import MANIFEST_FILE


def model_directories(paths: Iterable[Path]) -> tuple[Path, ...]:
    """Each path that is a model directory (it has a manifest) as it is; a directory of model directories
    as each of them, by name; anything else as it is, for loading to refuse by name."""
    found = []
    for path in map(Path, paths):
        inside = sorted(p for p in path.iterdir() if (p / MANIFEST_FILE).is_file()) if path.is_dir() else []
        found.extend(inside if inside and not (path / MANIFEST_FILE).is_file() else [path])
    return tuple(found)
