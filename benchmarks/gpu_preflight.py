"""The GPU check's first minute: is everything there, and does the device path do what it claims? One printed
line and one JSON record per check, each on its own: a failed check is recorded and the next runs.

- imports: the serve path and what the check needs, and where onnxruntime comes from;
- cuda libraries: NVIDIA's pip packages found on sys.path and loaded (service/runner/cuda_libraries.py);
- provider: a session whose first provider is the one asked for;
- placements: every served graph in the kit, on the device, each node's provider counted (a node left on
  the CPU for want of a kernel fails create_session);
- numbers decode: the numbers model in float16, 32 lockstep greedy steps through the serving runner,
  against the float32 CPU tokens computed when the kit was built, up to each row's end (what a row
  decodes after its end token is in no answer, and near-ties there go either way in float16);
- in place: a row move in a 1 GiB cache buffer against the same move in a 2-row one, and a decode step
  over the same 64 rows with self-attention buffers of 64 and of 1,024 positions a row (a copy of the
  cache per call would show here, where the byte counters, which count host transfers, see nothing;
  judged on the device only, as a shared CPU's timings vary too much);
- where the time goes: ONNX Runtime's profile of row moves and decode steps of the numbers model (each
  run's time, its kernels' by operator type, and the rest), so that a run slower than its kernels shows
  what it waits on;
- sampling graph: sampled rows' tokens drawn on the device, against the host's on the same machine and
  the plain reference's tokens (benchmarks/gpu_sampling_check.py);
- release memory: the runner gives its arena's free memory back once.
"""

from __future__ import annotations

import json
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from .common import median_seconds
from .gpu_sampling_check import check_sampling_graph

IMPORTS = (
    "onnxruntime",
    "grpc",
    "google.protobuf",
    "grpc_health.v1",
    "grpc_reflection.v1alpha",
    "fastapi",
    "starlette",
    "uvicorn",
    "pydantic",
    "tokenizers",
    "sentencepiece",
    "prometheus_client",
    "safetensors",
    "numpy",
    "service.server",
    "service.grpc_api.client",
)
GIB = 1 << 30
SAME_TIME = 1.5  # "the same time": a ratio below this; a copy of the cache would be 16x (or 680x) slower


def check_imports() -> dict:
    import importlib

    versions = {}
    for name in IMPORTS:
        module = importlib.import_module(name)
        versions[name] = getattr(module, "__version__", "")
    import onnxruntime as ort

    return {"versions": versions, "onnxruntime_file": ort.__file__, "providers": ort.get_available_providers()}


def check_cuda_libraries(device: str) -> dict:
    from service.runner.sessions import cuda_libraries

    if device == "cpu":
        return {"skipped": "device cpu"}
    loaded = cuda_libraries()
    if loaded.missing:
        raise RuntimeError(loaded.describe())
    return {"loaded": loaded.paths, "absent": loaded.absent}


def settings(device: str):
    from service.runner.sessions import SessionSettings

    return SessionSettings(device=device, intra_op_threads=0 if device == "cuda" else 2)


def check_provider(kit: Path, device: str) -> dict:
    from modeldir.files import open_model_dir
    from service.runner.sessions import create_session

    files = open_model_dir(kit / "models" / "numbers", precision="fp16")
    session = create_session(files.encoder, settings(device))
    got = session.get_providers()[0]
    wanted = "CUDAExecutionProvider" if device == "cuda" else "CPUExecutionProvider"
    if got != wanted:
        raise RuntimeError(f"the session got {got}, not {wanted}")
    return {"provider": got}


def check_placements(kit: Path, device: str) -> dict:
    from modeldir.files import open_model_dir
    from service.runner.sessions import create_session, placements

    table = {}
    for model_dir in sorted(p for p in (kit / "models").iterdir() if (p / "manifest.json").is_file()):
        files = open_model_dir(model_dir, precision="fp16")
        for role, path in files.graphs.items():
            placed = placements(create_session(path, settings(device))) if device == "cuda" else []
            counts: dict[str, int] = {}
            for provider, _, _ in placed:
                counts[provider] = counts.get(provider, 0) + 1
            table[f"{model_dir.name}/{role}"] = counts or {"not recorded on the CPU": 0}
    return {"graphs": table}


def check_numbers_decode(kit: Path, device: str, reference: dict) -> dict:
    from modeldir.files import open_model_dir

    from .gpu_references import encoded
    from .runner_harness import RunnerHarness

    model_dir = kit / "models" / "numbers"
    harness = RunnerHarness(model_dir, threads=0 if device == "cuda" else 2, precision="fp16", device=device)
    ids, mask = encoded(open_model_dir(model_dir, precision="fp16"), reference["sources"])
    got = harness.greedy(ids, mask, reference["steps"])
    eos = harness.config.eos_id
    expected = [e[: e.index(eos) + 1] if eos in e else e for e in reference["tokens"]]
    diverged = [next((i for i, (a, b) in enumerate(zip(g, e)) if a != b), None) for g, e in zip(got, expected)]
    same = sum(d is None for d in diverged)
    if same < len(got):
        raise RuntimeError(f"{same} of {len(got)} rows equal to the CPU float32 tokens; first divergences {diverged}")
    return {"rows": len(got), "steps": reference["steps"], "same_rows": same}


def check_in_place(kit: Path, device: str) -> dict:
    from service.engine.generation_cache import MIN_SOURCE_CAPACITY
    from service.runner.cache_memory import CacheGeometry

    from .runner_harness import RunnerHarness

    harness = RunnerHarness(
        kit / "models" / "numbers", threads=0 if device == "cuda" else 2, precision="fp16", device=device
    )
    runner, c = harness.runner, harness.config
    heads, d_head, layers = harness.heads, harness.d_head, c.n_decoder_layers
    positions = 1024
    row_bytes = 2 * layers * heads * positions * d_head * 2  # K and V, every layer, float16
    big_rows = GIB // row_bytes

    def row_move(rows: int) -> float:  # one row's every position moved, every row of the buffer bound
        geometry = CacheGeometry(layers, heads, d_head, positions, MIN_SOURCE_CAPACITY, runner.precision)
        memory = runner.cache_memory(geometry, rows, MIN_SOURCE_CAPACITY)
        return median_seconds(lambda: memory.move_rows(rows, [(0, 1, positions)], rows, []), repeats=7, warmup=1)

    move_big, move_small = row_move(big_rows), row_move(2)
    ids = np.full((64, 8), 5, np.int64)
    mask = np.ones_like(ids)
    steps = {}
    for target in (64, 1024):
        cache = harness.cache(ids, mask, target)
        tokens = np.full((64, 1), c.bos_id, np.int64)
        steps[target] = median_seconds(lambda: harness.step(cache, tokens), repeats=15, warmup=1)
    move_ratio, step_ratio = move_big / move_small, steps[1024] / steps[64]
    record = {
        "buffer_bytes": big_rows * row_bytes,
        "row_move_1gib_ms": 1e3 * move_big,
        "row_move_2_rows_ms": 1e3 * move_small,
        "row_move_ratio": move_ratio,
        "step_64_positions_ms": 1e3 * steps[64],
        "step_1024_positions_ms": 1e3 * steps[1024],
        "step_ratio": step_ratio,
    }
    if device == "cpu":  # a shared CPU's timings: recorded, judged only on the device
        return {**record, "judged": False}
    if move_ratio > SAME_TIME or step_ratio > SAME_TIME:
        raise RuntimeError(f"not in place: {json.dumps(record)}")
    return {**record, "judged": True}


def check_profile(kit: Path, device: str) -> dict:
    """ONNX Runtime's profile of 20 row moves (a 2-row buffer) and 20 decode steps over 64 rows."""
    from service.engine.generation_cache import MIN_SOURCE_CAPACITY
    from service.runner.cache_memory import CacheGeometry

    from .ort_profile import ended
    from .runner_harness import RunnerHarness

    with tempfile.TemporaryDirectory() as folder:
        harness = RunnerHarness(
            kit / "models" / "numbers",
            threads=0 if device == "cuda" else 2,
            precision="fp16",
            device=device,
            profile_prefix=f"{folder}/ort",
        )
        runner, c = harness.runner, harness.config
        geometry = CacheGeometry(
            c.n_decoder_layers, harness.heads, harness.d_head, 64, MIN_SOURCE_CAPACITY, runner.precision
        )
        memory = runner.cache_memory(geometry, 2, MIN_SOURCE_CAPACITY)
        for _ in range(21):
            memory.move_rows(2, [(0, 1, 64)], 2, [])
        ids = np.full((64, 8), 5, np.int64)
        cache = harness.cache(ids, np.ones_like(ids), 64)
        tokens = np.full((64, 1), c.bos_id, np.int64)
        for _ in range(21):
            harness.step(cache, tokens)
        return {"graphs": ended({role: harness.sessions[role] for role in ("cache_moves", "decoder")})}


def check_release_memory(kit: Path, device: str) -> dict:
    from .runner_harness import RunnerHarness

    harness = RunnerHarness(kit / "models" / "numbers", threads=2, precision="fp16", device=device)
    harness.runner.release_memory()
    return {"released": True}


def run(kit: Path, device: str, say=print) -> list[dict]:
    """Every check, in order: -> their records."""
    reference = json.loads((kit / "references.json").read_text())["numbers"]["preflight"]
    checks = [
        ("imports", check_imports),
        ("cuda libraries", lambda: check_cuda_libraries(device)),
        ("provider", lambda: check_provider(kit, device)),
        ("placements", lambda: check_placements(kit, device)),
        ("numbers decode", lambda: check_numbers_decode(kit, device, reference)),
        ("in place", lambda: check_in_place(kit, device)),
        ("where the time goes", lambda: check_profile(kit, device)),
        ("sampling graph", lambda: check_sampling_graph(device)),
        ("release memory", lambda: check_release_memory(kit, device)),
    ]
    records = []
    for name, check in checks:
        started = time.perf_counter()
        try:
            record = {"check": name, "ok": True, **check()}
        except Exception as error:
            record = {
                "check": name,
                "ok": False,
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(limit=8),
            }
        record["seconds"] = round(time.perf_counter() - started, 3)
        records.append(record)
        shown = {k: v for k, v in record.items() if k not in ("check", "traceback")}
        say(f"preflight {name}: {'ok' if record['ok'] else 'FAILED'} {json.dumps(shown, default=str)[:600]}")
        if name == "imports" and not record["ok"]:
            break  # nothing else can run
    return records
