"""faster-whisper itself, run in its own environment (.venv-whisper: it needs the CPU build of ONNX Runtime),
as the reference for Whisper serving: how it decodes and resamples audio files.

    python testing/faster_whisper_reference.py decode OUT_DIR FILE...

writes OUT_DIR/<i>.npy: the i-th file as faster_whisper.decode_audio gives it (float32, 16 kHz mono). This file
imports neither attnserve nor its environment."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from faster_whisper import decode_audio


def decode(out_dir: str, files: list[str]) -> None:
    for i, name in enumerate(files):
        np.save(Path(out_dir) / f"{i}.npy", decode_audio(name))


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "decode":
        decode(arguments[0], arguments[1:])
    else:
        raise SystemExit(f"unknown command {command!r}: decode")
