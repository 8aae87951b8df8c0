"""Soak: a mixed load at about 70% of the server's measured capacity for a long time, watching its memory.

First the capacity: closed-loop clients as fast as the server answers, for --probe-seconds. Then an
open-loop load (Poisson arrivals) at --load of that rate for --minutes: half embeddings (1-4 sentences),
half generations (the numbers model, greedy). The server's RSS is sampled every 10 s.

    .venv/bin/python -m benchmarks.soak [--minutes 30] [--load 0.7]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections import Counter

import grpc
import numpy as np

from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc
from testing.server_process import ServerProcess

from .common import print_table, sentences, write_results

SENTENCES = sentences(256, 5, 30, seed=3)


async def one_call(stub, rng: random.Random) -> tuple[str, float]:
    started = time.perf_counter()
    try:
        if rng.random() < 0.5:
            await stub.Embed(pb.EmbedRequest(inputs=rng.sample(SENTENCES, rng.randint(1, 4))), timeout=30)
        else:
            await stub.Generate(pb.GenerateRequest(input=str(rng.randrange(10**9))), timeout=30)
        code = "OK"
    except grpc.aio.AioRpcError as error:
        code = error.code().name
    return code, time.perf_counter() - started


async def capacity(target: str, seconds: float, clients: int = 16) -> float:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        done = 0
        deadline = time.perf_counter() + seconds

        async def client(seed):
            nonlocal done
            rng = random.Random(seed)
            while time.perf_counter() < deadline:
                await one_call(stub, rng)
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        return done / (time.perf_counter() - started)


async def soak(server: ServerProcess, rate: float, seconds: float, samples: list) -> list[tuple[float, str, float]]:
    """-> (start offset, code, latency) of every call; samples gets (offset, RSS MB, open fds) every 10 s."""
    results: list[tuple[float, str, float]] = []
    rng = random.Random(7)
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        started = time.perf_counter()
        pending = set()

        async def timed(offset):
            code, latency = await one_call(stub, rng)
            results.append((offset, code, latency))

        async def sampler():
            while True:
                samples.append((time.perf_counter() - started, server.rss_mb(), server.open_fds()))
                await asyncio.sleep(10)

        watcher = asyncio.create_task(sampler())
        next_at = 0.0
        while next_at < seconds:
            delay = started + next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(timed(next_at))
            pending.add(task)
            task.add_done_callback(pending.discard)
            next_at += rng.expovariate(rate)
        await asyncio.gather(*pending)
        watcher.cancel()
        samples.append((time.perf_counter() - started, server.rss_mb(), server.open_fds()))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--load", type=float, default=0.7, help="share of the measured capacity")
    parser.add_argument("--probe-seconds", type=float, default=30)
    args = parser.parse_args()
    server = ServerProcess()
    samples: list[tuple[float, float, int]] = []
    try:
        peak = asyncio.run(capacity(server.target, args.probe_seconds))
        rate = args.load * peak
        print(f"capacity {peak:.1f} calls/s; soaking at {rate:.1f} calls/s for {args.minutes:g} min", flush=True)
        results = asyncio.run(soak(server, rate, args.minutes * 60, samples))
        at_rest = (server.metric("attnserve_requests_running"), server.metric("attnserve_queue_depth"))
    finally:
        exit_code = server.stop()

    codes = Counter(code for _, code, _ in results)
    seconds = args.minutes * 60
    windows = []
    for start in np.arange(0, seconds, seconds / 6):
        latencies = [lat * 1e3 for t, code, lat in results if start <= t < start + seconds / 6 and code == "OK"]
        windows.append(
            [
                f"{start / 60:.0f}-{(start + seconds / 6) / 60:.0f} min",
                len(latencies),
                np.percentile(latencies, 50),
                np.percentile(latencies, 99),
            ]
        )
    times = np.array([t for t, _, _ in samples]) / 60
    rss = np.array([r for _, r, _ in samples])
    half = times >= times[-1] / 2
    slope = float(np.polyfit(times[half], rss[half], 1)[0]) if half.sum() > 2 else float("nan")
    print_table(
        f"Soak: {len(results)} calls at {rate:.1f}/s ({args.load:.0%} of {peak:.1f}/s), {dict(codes)}",
        ["window", "calls OK", "p50 ms", "p99 ms"],
        windows,
    )
    print_table(
        "Server memory",
        ["RSS start MB", "RSS peak MB", "RSS end MB", "growth MB", "second-half slope MB/min", "fds start", "fds end"],
        [[rss[0], rss.max(), rss[-1], rss[-1] - rss[0], slope, samples[0][2], samples[-1][2]]],
    )
    print(f"at rest after the load: calls running {at_rest[0]:g}, queue depth {at_rest[1]:g}; exit code {exit_code}")
    write_results(
        "soak",
        {
            "minutes": args.minutes,
            "capacity_per_s": peak,
            "rate_per_s": rate,
            "calls": len(results),
            "codes": dict(codes),
            "windows": [{"window": w[0], "ok": w[1], "p50_ms": w[2], "p99_ms": w[3]} for w in windows],
            "rss_mb": {
                "start": float(rss[0]),
                "peak": float(rss.max()),
                "end": float(rss[-1]),
                "second_half_slope_mb_per_min": slope,
            },
            "fds": {"start": samples[0][2], "end": samples[-1][2]},
            "rss_samples": [(float(t), float(r)) for t, r in zip(times, rss)],
            "median_latency_ms": statistics.median(lat for _, _, lat in results) * 1e3,
            "exit_code": exit_code,
        },
    )


if __name__ == "__main__":
    main()
