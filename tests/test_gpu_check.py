"""benchmarks/gpu_check.py, dry-run on the CPU (--device cpu --small): the whole script, from the export
of the three models to the results it writes, so that the run on a GPU is the first run of nothing
new. The figures here are the CPU's; the test checks that they are there, and the ones that do not
depend on the device."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_the_gpu_check_dry_runs_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--small",
               "--work", str(tmp_path / "work"), "--out", str(out)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    r = json.loads((out / "results.json").read_text())
    parity = r["parity"]
    assert parity["minilm"]["min_cosine"] >= 0.9995 and parity["minilm"]["texts"] == 11
    assert all(d["exact"] == d["total"] == 25 for d in parity["numbers"].values()), parity["numbers"]
    assert parity["marian"]["prompts"] == 10 and parity["marian"]["same"] >= 8, parity["marian"]
    embeddings = r["embeddings"]
    assert min(embeddings["attnserve"], embeddings["sentence-transformers"], embeddings["onnxruntime"]) > 0
    for concurrency in ("1", "8"):
        g = r["generation"][concurrency]
        assert g["attnserve_tokens_per_second"] > 0 and g["transformers_tokens_per_second"] > 0
        # Greedy rows: 16 bytes a row in (token id, two lengths), 8 out (its argmax), whatever else.
        assert g["bytes_sent_per_step"] == pytest.approx(16 * g["rows_per_step"])
        assert g["bytes_fetched_per_step"] == pytest.approx(8 * g["rows_per_step"])
    assert r["generation"]["8"]["rows_per_step"] > 1  # the callers shared decode steps
    assert r["memory"]["kv_cache_bytes"] > 0
    table = (out / "results.md").read_text()
    assert table.startswith("# GPU check (cpu, ") and "| x transformers at 8 (goal 2.0) |" in table
