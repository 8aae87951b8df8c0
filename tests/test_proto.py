"""service/grpc_api/pb is generated from protos/: it must be what the generator writes today."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_is_current(tmp_path):
    spec = importlib.util.spec_from_file_location("generate", ROOT / "protos" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    written = generate.generate(tmp_path)
    assert written
    for fresh in written:
        committed = ROOT / "service" / "grpc_api" / "pb" / fresh.name
        assert committed.read_text() == fresh.read_text(), f"{committed.name} is stale: run make proto"
