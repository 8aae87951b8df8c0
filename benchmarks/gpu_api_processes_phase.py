"""The GPU check's api-processes phase: the doors in sizes.api_processes processes (8 on the device) against
one, on the same device in one run: small Embed calls (one sentence a call) and the Marian model's streams
at the moonshot's count, with the server's CPU summed over its processes, and the split server's vectors
against the CPU references. One process is the check's own server (it runs one), whose streams the
moonshot phase has just measured: only the split server is started."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

from service.grpc_api.client import Client

from .gpu_phases import Utilization, marian_streams


def api_processes(ctx) -> dict:
    sizes, one = ctx.sizes, ctx.server
    moonshot = ctx.results["phases"].get("moonshot", {})
    out = {
        "1": {
            "embed": small_embeds(one, sizes),
            # The moonshot's streams where it has run: the same load on a server of the same settings.
            "streams": moonshot["marian"] if moonshot.get("ok") else marian_streams(one, sizes),
        }
    }
    n = sizes.api_processes
    models = [ctx.kit / "models" / name for name in ("minilm", "marian")]
    server = ctx.start_server(models, ctx.out / f"server-api-processes-{n}.log", "--api-processes", str(n))
    try:
        if server.api_processes != n:
            raise RuntimeError(f"asked for {n} API processes, the server runs {server.api_processes}")
        out[str(n)] = {"embed": small_embeds(server, sizes), "streams": marian_streams(server, sizes)}
        out["min_cosine_split"] = min_cosine(server, ctx.references["minilm"])
    finally:
        server.stop()
    many = out[str(n)]
    out["embed_calls_vs_1"] = many["embed"]["calls_per_second"] / out["1"]["embed"]["calls_per_second"]
    out["stream_tokens_vs_1"] = many["streams"]["tokens_per_second"] / out["1"]["streams"]["tokens_per_second"]
    return out


def small_embeds(server, sizes) -> dict:
    """Calls of one sentence from embed_clients callers in 4 processes: calls/s, and the server's CPU a call."""
    count = sizes.embed_count
    command = [sys.executable, "-m", "benchmarks.load_clients", "--target", server.target]
    command += ["--clients", str(sizes.embed_clients), "--per-call", "1", "--count", str(count // 4)]
    cpu = server.cpu_seconds()
    with Utilization() as busy:
        started = time.perf_counter()
        callers = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(4)]
        if any(caller.wait() for caller in callers):
            raise RuntimeError("an Embed caller failed")
        wall = time.perf_counter() - started
    calls = count // 4 * 4
    return {
        "calls_per_second": calls / wall,
        "server_cpu_ms_per_call": (server.cpu_seconds() - cpu) / calls * 1e3,
        **busy.figures(),
    }


def min_cosine(server, refs: dict) -> float:
    """The split server's MiniLM vectors against the CPU references: the API processes hand the engine the
    same ids."""
    with Client(server.target, timeout=120) as client:
        served = np.array(client.embed(refs["texts"], model="minilm").vectors)
    return float((served * np.array(refs["embeddings"])).sum(axis=1).min())
