"""A sampling profile of a running server (py-spy, from outside the process) while some work runs,
summed up by where each sample's innermost frame is: ONNX Runtime's runs, native callbacks on the event
loop (grpc's Cython and asyncio's C tasks show as no Python frame of their own), the access log,
tokenizers, or attnserve's own modules. Samples of threads that wait (the loop's select, an idle worker)
are left out of the shares."""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

RATE = 200  # samples a second

# Innermost frames of a thread that waits rather than works.
WAITING = ("select (selectors.py", "_worker (concurrent/futures/thread.py:81", "wait (threading.py")

# The first pattern found in a sample's innermost frame (function and file) names its place.
PLACES = (
    ("native callbacks on the loop (grpc, asyncio's C tasks)", ("Handle._run (asyncio/events.py:80)",)),
    ("native thread (grpc's poller)", ("Thread.run (threading.py",)),
    ("ONNX Runtime run", ("run_with_iobinding", "onnxruntime_inference_collection.py")),
    ("grpc", ("grpc/", "cygrpc")),
    ("HTTP (uvicorn, starlette, h11)", ("uvicorn/", "starlette/", "h11/", "fastapi/", "httptools")),
    ("logging", ("logging/", "service/ops/logs.py", "json/")),
    ("prometheus_client", ("prometheus_client/",)),
    ("tokenizers and sentencepiece", ("tokenizer", "sentencepiece")),
    ("numpy", ("numpy/",)),
    ("protobuf", ("protobuf/", "_pb2", "message.py")),
    ("asyncio loop", ("asyncio/", "selectors.py")),
    ("threads and futures", ("threading.py", "concurrent/")),
)


def place_of(frame: str) -> str:
    for place, patterns in PLACES:
        if any(p in frame for p in patterns):
            return place
    if "service/" in frame or "modeldir/" in frame:
        # attnserve's own code: by module
        path = frame[frame.rfind("(") + 1 :].split(":")[0]
        return "attnserve " + path[path.find("service/") if "service/" in path else path.find("modeldir/") :]
    return "other: " + frame[:80]


def summary(raw: str, top: int = 12) -> list[tuple[str, float]]:
    """py-spy's raw output (stack;stack;... count a line) -> the places with the most samples, by share."""
    counts: collections.Counter = collections.Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        leaf = stack.split(";")[-1]
        if stack and count.isdigit() and not any(w in leaf for w in WAITING):
            counts[place_of(leaf)] += int(count)
    total = sum(counts.values()) or 1
    return [(place, n / total) for place, n in counts.most_common(top)]


def profiled(pid: int, work: Callable[[], object]) -> list[tuple[str, float]]:
    """work() run while py-spy samples process `pid`; -> summary of the samples."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "profile.txt"
        command = [
            py_spy,
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(RATE),
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
        ]
        recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            work()
        finally:
            recorder.send_signal(signal.SIGINT)
            _, errors = recorder.communicate(timeout=60)
        if not out.exists():
            raise RuntimeError(f"py-spy wrote no profile: {errors.decode()[-500:]}")
        return summary(out.read_text())
