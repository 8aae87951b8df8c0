"""The GPU run rehearsed on the CPU, so that the first run on a GPU is the first run of nothing new. A small
device kit is built by its one command; the device's own script unpacks it from its parts into a Python
3.12 environment holding the image's distributions and the kit's wheels alone (benchmarks/gpu_rehearsal.py);
there the server starts with every door on and answers over gRPC and HTTP, and the preflight and the
check's phases that need no PyTorch dry-run, with an import audit: no module may come from a distribution
that is neither on the image (benchmarks/gpu_image_packages.txt) nor in the kit. The phases whose baselines
are PyTorch (the image's torch cannot live in a 3.12 environment here) dry-run in the project's .venv, and
their imports are audited from the source."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from benchmarks.gpu_image import CARRIED, audit, audited, normalized
from benchmarks.gpu_plan import PHASES, calls
from benchmarks.gpu_rehearsal import clean_env, image_environment, linked_copy, unpack_kit
from service.grpc_api.client import Client
from testing.server_process import ServerProcess

pytestmark = pytest.mark.slow  # builds the device kit and rehearses it

ROOT = Path(__file__).resolve().parent.parent
WORDS = "three hundred and twelve thousand, four hundred and five"


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> tuple[Path, str]:
    """A small kit, by the command the README gives: -> its folder and what it printed."""
    out = tmp_path_factory.mktemp("kit") / "device-kit"
    made = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_kit", "--small", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    yield out, made.stdout
    shutil.rmtree(out)  # hundreds of MiB: the suite's disk stays small on a small CI machine


@pytest.fixture(scope="module")
def device(kit, tmp_path_factory) -> tuple[Path, Path, Path]:
    """The device rehearsed: -> (its python, the unpacked kit, the wheels' folder)."""
    python = image_environment()
    root = tmp_path_factory.mktemp("device")
    unpacked, site = unpack_kit(kit[0], python, root)
    yield python, unpacked, site
    shutil.rmtree(root)


def test_one_command_makes_the_kit_its_parts_and_its_calls(kit):
    out, printed = kit
    manifest = json.loads((out / "kit.json").read_text())
    wheels = " ".join(manifest["wheels"])
    assert "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux" in wheels
    assert all(normalized(name).replace("-", "_") in wheels.replace("-", "_").lower() for name in CARRIED)
    for group in manifest["groups"]:
        assert sum(p["bytes"] for p in group["parts"]) == group["bytes"]
        for part in group["parts"]:
            assert (out / "parts" / part["name"]).stat().st_size == part["bytes"]
            assert part["bytes"] + manifest["tree_bytes"] < 60 << 20
    device_calls = calls(manifest, out)
    assert len(device_calls) == sum(len(g["parts"]) for g in manifest["groups"]) + 1  # and the moonshot's own
    assert "--phases preflight,parity " in device_calls[len(manifest["groups"][0]["parts"]) - 1]["command"]
    assert all(len(c["command"]) < 2000 and len(c["carry"]) <= 8 and c["timeout_s"] <= 600 for c in device_calls)
    assert f"{len(device_calls)}. carry=" in printed and "Timeline (estimated" in printed


def report_of(path: Path) -> dict[str, set[str]]:
    return {name: set(modules) for name, modules in json.loads(path.read_text()).items()}


def test_the_device_environment_serves_every_door(device, tmp_path):
    python, unpacked, site = device
    report = tmp_path / "serve-audit.json"
    models = [str(unpacked / "models" / name) for name in ("minilm", "numbers", "marian", "whisper-tiny.en")]
    server = ServerProcess(
        "--device",
        "cpu",
        "--precision",
        "fp16",
        models=models,
        env=clean_env(site),
        launcher=audited(python, "cli", report),
    )
    try:
        references = json.loads((unpacked / "references.json").read_text())["minilm"]
        with Client(server.target) as client:
            vectors = np.array(client.embed(references["texts"][:3], model="minilm").vectors)
            assert client.generate("312405", model="numbers").text == WORDS
        assert (vectors * np.array(references["embeddings"][:3])).sum(axis=1).min() > 0.999
        base = f"http://127.0.0.1:{server.http_port}/v1"
        http = httpx.post(f"{base}/embeddings", json={"model": "minilm", "input": references["texts"][:3]}).json()
        np.testing.assert_allclose([d["embedding"] for d in http["data"]], vectors, atol=1e-5)
        completion = httpx.post(f"{base}/completions", json={"model": "numbers", "prompt": "312405"}).json()
        assert completion["choices"][0]["text"] == WORDS
        # The translation doors: the Marian model is en -> de; sentences, names and detection load here.
        root = f"http://127.0.0.1:{server.http_port}"
        deepl = httpx.post(f"{root}/v2/translate", json={"text": "A test.\nAnother one.", "target_lang": "DE"}).json()
        with Client(server.target) as client:
            lines = [client.generate(line, model="marian").text for line in ("A test.", "Another one.")]
        assert deepl["translations"][0]["text"] == "\n".join(lines)
        assert {"code": "en", "name": "English", "targets": ["de"]} in httpx.get(f"{root}/languages").json()
        # Speech: the kit's recording, decoded by the kit's PyAV, heard by the float16 graphs as the float32
        # ones heard it here (a word may differ).
        speech = json.loads((unpacked / "references.json").read_text())["speech"]
        recording = unpacked / "speech" / speech["files"][0]
        upload = {"file": recording.open("rb")}
        heard = httpx.post(f"{base}/audio/transcriptions", files=upload, data={"model": "whisper-tiny.en"}, timeout=300)
        words, expected = heard.json()["text"].split(), speech["texts"][0].split()
        assert len(set(words) & set(expected)) >= 0.8 * len(set(expected)), (words, expected)
    finally:
        assert server.stop() == 0
    loaded = report_of(report)
    assert audit(loaded) == []
    assert {"onnxruntime-gpu", "fastapi", "uvicorn", "grpcio", "protobuf"} <= set(loaded)
    assert "torch" not in loaded
    assert "Python 3.12" in subprocess.run([str(python), "--version"], capture_output=True, text=True).stdout


def check_options(kit: Path, phases: str, out: Path, state: Path) -> list[str]:
    """gpu_check's options for a dry run on the CPU."""
    options = ["--kit", str(kit), "--device", "cpu", "--phases", phases]
    return options + ["--out", str(out), "--state", str(state)]


def test_the_preflight_and_the_torch_free_phases_dry_run_there(device, tmp_path):
    python, unpacked, site = device
    report, out = tmp_path / "check-audit.json", tmp_path / "out"
    phases = "preflight,parity,parity-marian,memory,api-processes,cuda-graphs"
    command = [
        *audited(python, "benchmarks.gpu_check", report),
        *check_options(unpacked, phases, out, tmp_path / "state.json"),
    ]
    ran = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=clean_env(site), timeout=900)
    assert ran.returncode == 0, ran.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert list(results["phases"]) == phases.split(",")
    failed = {name: r.get("error") for name, r in results["phases"].items() if not r["ok"]}
    assert failed == {}, failed
    checks = {c["check"]: c for c in results["phases"]["preflight"]["checks"]}
    assert list(checks) == [
        "imports",
        "cuda libraries",
        "provider",
        "placements",
        "numbers decode",
        "in place",
        "where the time goes",
        "sampling graph",
        "release memory",
    ]
    assert checks["imports"]["onnxruntime_file"].startswith(str(site))  # the kit's build, not another
    assert checks["numbers decode"]["same_rows"] == checks["numbers decode"]["rows"] == 8
    assert checks["in place"]["buffer_bytes"] >= 0.99 * (1 << 30) and checks["in place"]["judged"] is False
    assert checks["in place"]["step_1024_positions_ms"] > 0 and checks["in place"]["row_move_1gib_ms"] > 0
    profiles = checks["where the time goes"]["graphs"]
    for role in ("cache_moves", "decoder"):  # 20 runs after the warm-up, their kernels within each run's time
        assert profiles[role]["runs"] == 20, profiles
        assert 0 < profiles[role]["kernels_us"] <= profiles[role]["run_us"], profiles
    assert any(op.startswith("ScatterND") for op in profiles["cache_moves"]["by_operator_us"]), profiles
    assert any(op.startswith("GroupQueryAttention") for op in profiles["decoder"]["by_operator_us"]), profiles
    sampled = checks["sampling graph"]  # the device's graph against the host's form and the reference's tokens
    assert sampled["rows"] == 8 and sampled["vocab"] == 58101 and len(sampled["cases"]) == 3, sampled
    for case in sampled["cases"].values():
        assert case["compared"] >= 6 and case["equal"] == case["compared"], sampled
        assert case["graph_us_per_token"] > 0 and case["host_us_per_token"] > 0, sampled
    assert results["phases"]["parity"]["minilm"]["min_cosine"] > 0.999
    assert all(d["exact"] == d["total"] == 25 for d in results["phases"]["parity"]["numbers"].values())
    assert results["phases"]["parity-marian"]["same"] >= 8
    assert len(results["phases"]["parity-marian"]["tokens"]) == 10  # the cuda-graphs phase's eager tokens
    split = results["phases"]["api-processes"]  # the image's prometheus-client sums the API processes' metrics
    assert split["min_cosine_split"] > 0.999 and split["2"]["embed"]["calls_per_second"] > 0, split
    assert split["2"]["streams"]["tokens_per_second"] > 0 and split["2"]["embed"]["server_cpu_ms_per_call"] > 0, split
    graphs = results["phases"]["cuda-graphs"]  # on the CPU the steps are bucketed, and nothing is captured
    assert graphs["captured"] is False and graphs["same_tokens"] == 1.0 and graphs["same_as_cpu_reference"] >= 0.8
    assert graphs["1"]["graphs"]["tokens_per_second"] > 0 and graphs["8"]["graphs"]["rows_per_step"] > 1
    lines = [line for line in ran.stdout.splitlines() if line.startswith("[")]
    assert sum(": start" in line for line in lines) == len(phases.split(",")) and all(
        "+" in line and " s] " in line for line in lines
    )
    assert (out / "server.log").stat().st_size > 0 and (out / "results.md").read_text().startswith("# GPU check")
    assert audit(report_of(report)) == [] and "torch" not in report_of(report)


def test_the_staged_check_runs_every_phase_goes_on_after_a_failure_and_reruns_what_failed(device, tmp_path):
    """In the project's .venv (the PyTorch baselines): every phase; then a kit without the Marian model,
    whose phases fail with their errors while the others pass; then a rerun of one phase that keeps the rest."""
    _, unpacked, _ = device
    out, state = tmp_path / "out", tmp_path / "state.json"

    def check(kit: Path, phases: str) -> dict:
        command = [sys.executable, "-m", "benchmarks.gpu_check", *check_options(kit, phases, out, state)]
        ran = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1200)
        assert ran.returncode == 0, ran.stderr[-3000:]
        return json.loads((out / "results.json").read_text())["phases"]

    every = check(unpacked, ",".join(PHASES))
    assert {name: r["ok"] for name, r in every.items()} == dict.fromkeys(PHASES, True), every
    e, g = every["embeddings"], every["generation"]
    assert min(e["attnserve"], e["sentence-transformers"], e["onnxruntime"]) > 0
    # greedy rows each a group of their own: 32 bytes a row (docs/kv_cache.md)
    assert g["8"]["rows_per_step"] > 1 and g["8"]["bytes_sent_per_step"] == pytest.approx(32 * g["8"]["rows_per_step"])
    assert (
        every["moonshot"]["marian"]["tokens_per_second"] > 0 and every["moonshot"]["minilm"]["sentences_per_second"] > 0
    )
    # The split server against the check's own, whose streams the moonshot measured just before.
    assert every["api-processes"]["1"]["streams"] == every["moonshot"]["marian"], every["api-processes"]
    assert every["moonshot"]["marian"]["server_cpu_ms_per_token"] > 0 and every["moonshot"]["marian"]["itl_p99"] > 0
    t5 = every["t5"]  # float16 graphs on the CPU against the float32 ones; one with an overflowing stream
    assert t5["t5"]["prompts"] == t5["t5-overflowing"]["prompts"] == 10, t5
    assert t5["t5"]["share"] >= 0.7 and t5["t5-overflowing"]["share"] >= 0.7, t5
    assert t5["generation"]["8"]["attnserve_tokens_per_second"] > 0 and t5["generation"]["tokens_per_second_vs_hf"] > 0
    speech = every["speech"]
    assert (
        speech["calls"] == 2 and speech["audio_seconds_per_second"] > 0 and speech["one_file"]["real_time_factor"] > 0
    )
    assert speech["same_as_cpu"] >= 0.5 and set(speech["texts"]) == {"speech-0.wav", "speech-1.wav"}
    cut = speech["long_file_cut_at_silences"]
    assert (
        cut["segments"] >= 2
        and cut["real_time_factor"] > 0
        and cut["audio_seconds"] > speech["one_file"]["audio_seconds"]
    )
    state.unlink()
    broken = tmp_path / "broken-kit"
    linked_copy(unpacked, broken)
    shutil.rmtree(broken / "models" / "marian")
    phases = check(broken, "parity,parity-marian,memory")
    assert phases["parity"]["ok"] and phases["memory"]["ok"] and not phases["parity-marian"]["ok"]
    assert "marian" in phases["parity-marian"]["error"] and phases["parity-marian"]["server_log"]
    rerun = check(broken, "memory")
    assert set(rerun) == {"parity", "parity-marian", "memory"} and rerun["parity"] == phases["parity"]


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_what_the_check_runs_on_the_device_imports_only_the_image_and_the_kit():
    """From the source, the modules the device runs beside the serve path: the check, its callers and its
    PyTorch baselines (engines.py, the Marian checkpoint's remaking)."""
    from importlib.metadata import packages_distributions

    device_side = [
        "gpu_check",
        "gpu_phases",
        "gpu_api_processes_phase",
        "gpu_speech_phase",
        "gpu_t5_phase",
        "gpu_preflight",
        "gpu_references",
        "gpu_unpack",
        "gpu_image",
        "gpu_plan",
        "gpu_sizes",
        "runner_harness",
        "engines",
        "load_clients",
        "stream_clients",
        "translation_load",
        "common",
    ]
    files = [ROOT / f"benchmarks/{name}.py" for name in device_side]
    files += [ROOT / "model/families/marian/random_checkpoint.py", ROOT / "model/bundled/number_sentences.py"]
    files += [ROOT / "model/families/t5/random_checkpoint.py"]
    files += [ROOT / "testing/server_process.py"]
    owners = packages_distributions()
    tops = {top for path in files for top in imports_of(path)} - set(sys.stdlib_module_names)
    tops -= {"benchmarks", "cli", "model", "modeldir", "service", "testing"}
    # Imported inside the functions that only run here: engines.py's CTranslate2 baseline (marian_bench) and
    # load_clients.py's --openai, --triton and --cohere callers (the device's use --target).
    tops -= {"ctranslate2", "openai", "tritonclient", "cohere"}
    distributions = {normalized(d): {top} for top in tops for d in owners.get(top, [f"<none: {top}>"])}
    assert audit(distributions) == []
    assert {"torch", "transformers", "sentence-transformers", "onnxruntime-gpu"} <= set(distributions)
