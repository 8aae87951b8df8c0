"""ONNX Runtime's profile of a session's runs (SessionOptions.enable_profiling), summed up: how long a run
took, how much of it its operators' kernels took (by operator type, the host's time to run or launch them),
and what is left (copies between devices, synchronisation, the run's own overhead)."""

from __future__ import annotations

import json
from pathlib import Path

import onnxruntime as ort


def summary(profile: Path, skip_runs: int = 1, top: int = 8) -> dict:
    """One profile file -> runs, mean run, kernel and remainder microseconds a run, the busiest operator
    types (microseconds a run, and on which provider). The first skip_runs runs (warm-up) are left out."""
    events = json.loads(Path(profile).read_text())
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    counted = runs[skip_runs:] or runs
    if not counted:
        return {"runs": 0}
    start = counted[0]["ts"]
    kernels: dict[str, float] = {}
    providers: dict[str, str] = {}
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time") or event["ts"] < start:
            continue
        op = event.get("args", {}).get("op_name", "?")
        kernels[op] = kernels.get(op, 0.0) + event["dur"]
        providers[op] = event.get("args", {}).get("provider", "?")
    n = len(counted)
    run_us = sum(e["dur"] for e in counted) / n
    kernel_us = sum(kernels.values()) / n
    busiest = sorted(kernels.items(), key=lambda kv: -kv[1])[:top]
    return {
        "runs": n,
        "run_us": round(run_us, 1),
        "kernels_us": round(kernel_us, 1),
        "rest_us": round(run_us - kernel_us, 1),
        "by_operator_us": {f"{op} ({providers[op]})": round(us / n, 1) for op, us in busiest},
    }


def ended(sessions: dict[str, ort.InferenceSession], skip_runs: int = 1) -> dict[str, dict]:
    """End every session's profile -> each one's summary, by role."""
    return {role: summary(Path(session.end_profiling()), skip_runs) for role, session in sessions.items()}
