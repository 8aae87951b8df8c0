"""faster-whisper's answers, from its own environment (testing/faster_whisper_reference.py in .venv-whisper,
made by `make whisper-reference` if it is not there)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from testing.environments import environment_python

SCRIPT = Path(__file__).resolve().parent / "faster_whisper_reference.py"


def decoded_by_faster_whisper(files: list[Path]) -> list[np.ndarray]:
    """Each file as faster_whisper.decode_audio gives it."""
    with tempfile.TemporaryDirectory() as out:
        python = environment_python(".venv-whisper", "whisper-reference")
        command = [str(python), str(SCRIPT), "decode", out, *map(str, files)]
        subprocess.run(command, check=True, capture_output=True)
        return [np.load(Path(out) / f"{i}.npy") for i in range(len(files))]


def transcribed_by_faster_whisper(model_dir: Path, files: list[Path], **options) -> list[dict]:
    """Each file's {"language", "segments": [every Segment field]} as faster-whisper transcribes it (float32)."""
    python = environment_python(".venv-whisper", "whisper-reference")
    command = [str(python), str(SCRIPT), "transcribe", str(model_dir), json.dumps(options), *map(str, files)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
