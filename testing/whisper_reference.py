"""faster-whisper's answers, from its own environment (testing/faster_whisper_reference.py in .venv-whisper,
made by `make whisper-reference` if it is not there)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "testing" / "faster_whisper_reference.py"
WHISPER_PYTHON = ROOT / ".venv-whisper" / "bin" / "python"


def whisper_python() -> Path:
    if not WHISPER_PYTHON.exists():
        subprocess.run(["make", "-s", "whisper-reference"], cwd=ROOT, check=True, stdout=sys.stderr)
    return WHISPER_PYTHON


def decoded_by_faster_whisper(files: list[Path]) -> list[np.ndarray]:
    """Each file as faster_whisper.decode_audio gives it."""
    with tempfile.TemporaryDirectory() as out:
        command = [str(whisper_python()), str(SCRIPT), "decode", out, *map(str, files)]
        subprocess.run(command, check=True, capture_output=True)
        return [np.load(Path(out) / f"{i}.npy") for i in range(len(files))]
