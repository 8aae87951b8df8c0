"""The reference implementations' own environments beside .venv (PyLate's, faster-whisper's): the python of
one, made by its Makefile target first where it is not there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def environment_python(venv: str, make_target: str) -> Path:
    python = ROOT / venv / "bin" / "python"
    if not python.exists():
        subprocess.run(["make", "-s", make_target], cwd=ROOT, check=True, stdout=sys.stderr)
    return python
