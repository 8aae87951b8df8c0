"""The code passes the project's lint and format (pyproject.toml [tool.ruff]): no unused imports, undefined
names, and one layout."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    result = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True)  # every package
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    result = subprocess.run([ruff, "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, "run `ruff format .`\n" + result.stdout + result.stderr
