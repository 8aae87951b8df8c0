"""faster-whisper itself, run in its own environment (.venv-whisper: it needs the CPU build of ONNX Runtime),
as the reference for Whisper serving: how it decodes and resamples audio files.

    python testing/faster_whisper_reference.py decode OUT_DIR FILE...

writes OUT_DIR/<i>.npy: the i-th file as faster_whisper.decode_audio gives it (float32, 16 kHz mono);

    python testing/faster_whisper_reference.py transcribe MODEL_DIR OPTIONS_JSON FILE...

prints, as JSON, each file's segments as faster_whisper.WhisperModel(MODEL_DIR, device="cpu",
compute_type="float32").transcribe(file, **options) gives them (every field). This file imports neither
attnserve nor its environment."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
from faster_whisper import WhisperModel, decode_audio


def decode(out_dir: str, files: list[str]) -> None:
    for i, name in enumerate(files):
        np.save(Path(out_dir) / f"{i}.npy", decode_audio(name))


def transcribe(model_dir: str, options: str, files: list[str]) -> None:
    model = WhisperModel(model_dir, device="cpu", compute_type="float32", cpu_threads=2)
    answers = []
    for name in files:
        segments, info = model.transcribe(name, **json.loads(options))
        answers.append({"language": info.language, "segments": [dataclasses.asdict(s) for s in segments]})
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "decode":
        decode(arguments[0], arguments[1:])
    elif command == "transcribe":
        transcribe(arguments[0], arguments[1], arguments[2:])
    else:
        raise SystemExit(f"unknown command {command!r}: decode or transcribe")
