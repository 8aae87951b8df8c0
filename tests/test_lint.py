"""The code passes the project's lint and format (pyproject.toml [tool.ruff]): no unused imports, undefined
names, and one layout."""

from __future__ import annotations

import re
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


def test_the_formatter_lays_out_every_line():
    """No comment that turns the formatter off (fmt: skip, fmt: off): lines packed by hand to keep a file under
    its length are the formatter's to lay out; a file that grows too long is split by job instead."""
    packed = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("benchmarks", "cli", "model", "modeldir", "service", "testing", "tests", "protos")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "pb" not in path.relative_to(ROOT).parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"#\s*fmt:\s*(skip|off)\b", line)
    ]
    assert packed == []
