"""Concurrent Embed clients, in a process of their own so that they do not share the server's GIL.

    python -m benchmarks.load_clients --target HOST:PORT --clients 32 --per-call 1 [--vectors out.npy]

Splits the benchmark sentences round-robin over the clients; each client sends its share in calls of
--per-call sentences, one call after another. Prints one JSON line: wall seconds and per-call latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import grpc
import numpy as np

from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

from .common import sentences

SENTENCES = sentences(512, 10, 60, seed=11)  # 512 sentences of 10-60 words


def split(texts: list[str], clients: int, per_call: int) -> list[list[list[str]]]:
    shares = [texts[i::clients] for i in range(clients)]
    return [[share[j : j + per_call] for j in range(0, len(share), per_call)] for share in shares]


async def run(target: str, clients: int, per_call: int, texts: list[str] = SENTENCES):
    """-> wall seconds, latencies, vectors (in the order of texts)."""
    plan = split(texts, clients, per_call)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        await stub.Embed(pb.EmbedRequest(inputs=["warm up"]))
        latencies: list[float] = []

        async def client(calls):
            vectors = []
            for texts in calls:
                started = time.perf_counter()
                response = await stub.Embed(pb.EmbedRequest(inputs=texts))
                latencies.append(time.perf_counter() - started)
                vectors.extend(e.values for e in response.embeddings)
            return vectors

        started = time.perf_counter()
        results = await asyncio.gather(*(client(calls) for calls in plan))
        wall = time.perf_counter() - started
    vectors = np.empty((len(texts), len(results[0][0])), np.float32)
    for c, result in enumerate(results):
        vectors[c::clients] = result
    return wall, latencies, vectors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--per-call", type=int, default=1)
    parser.add_argument("--vectors", help="write the vectors here (.npy)")
    parser.add_argument("--count", type=int, default=len(SENTENCES), help="sentences in all (the same 10-60 words)")
    args = parser.parse_args()
    texts = SENTENCES if args.count == len(SENTENCES) else sentences(args.count, 10, 60, seed=11)
    wall, latencies, vectors = asyncio.run(run(args.target, args.clients, args.per_call, texts))
    if args.vectors:
        np.save(args.vectors, vectors)
    print(json.dumps({"wall": wall, "latencies": latencies}))


if __name__ == "__main__":
    main()
