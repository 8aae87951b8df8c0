"""Concurrent Embed clients, in a process of their own so that they do not share the server's GIL.

    python -m benchmarks.load_clients --target HOST:PORT --clients 32 --per-call 1 [--vectors out.npy]
    python -m benchmarks.load_clients --http http://HOST:PORT --clients 32 --per-call 1
    python -m benchmarks.load_clients --openai http://HOST:PORT --clients 32 --per-call 1
    python -m benchmarks.load_clients --triton HOST:PORT --clients 32 --per-call 1

--http calls an OpenAI-style `POST /embeddings` (a peer server such as infinity-emb) instead of our gRPC Embed,
with the first model that its `GET /models` lists. --openai calls our own HTTP API through the `openai` SDK
(base64 vectors, as the SDK asks by default). --triton calls our KServe v2 ModelInfer through tritonclient's
asyncio client (raw BYTES in, raw FP32 out, as it sends them); that process never imports our generated
protobuf code, whose `inference.*` names tritonclient's own would clash with.

Splits the benchmark sentences round-robin over the clients; each client sends its share in calls of
--per-call sentences, one call after another. Prints one JSON line: wall seconds and per-call latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np

from .common import sentences

SENTENCES = sentences(512, 10, 60, seed=11)  # 512 sentences of 10-60 words


def split(texts: list[str], clients: int, per_call: int) -> list[list[list[str]]]:
    shares = [texts[i::clients] for i in range(clients)]
    return [[share[j : j + per_call] for j in range(0, len(share), per_call)] for share in shares]


def in_order(results: list[list], count: int) -> np.ndarray:
    """Each client's vectors back into the order of the texts (split dealt them round-robin)."""
    vectors = np.empty((count, len(results[0][0])), np.float32)
    for c, result in enumerate(results):
        vectors[c :: len(results)] = result
    return vectors


async def drive(embed, clients: int, per_call: int, texts: list[str]):
    """Each client sends its share through embed(texts) -> vectors, one call after another, after one warm-up
    call. -> wall seconds, latencies, vectors (in the order of texts)."""
    await embed(["warm up"])
    latencies: list[float] = []

    async def client(calls):
        vectors = []
        for batch in calls:
            started = time.perf_counter()
            vectors.extend(await embed(batch))
            latencies.append(time.perf_counter() - started)
        return vectors

    started = time.perf_counter()
    results = await asyncio.gather(*(client(calls) for calls in split(texts, clients, per_call)))
    return time.perf_counter() - started, latencies, in_order(results, len(texts))


async def run(target: str, clients: int, per_call: int, texts: list[str] = SENTENCES):
    """Our gRPC Embed."""
    import grpc

    from service.grpc_api.pb import inference_pb2 as pb
    from service.grpc_api.pb import inference_pb2_grpc as pb_grpc

    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)

        async def embed(batch: list[str]) -> list:
            return [e.values for e in (await stub.Embed(pb.EmbedRequest(inputs=batch))).embeddings]

        return await drive(embed, clients, per_call, texts)


async def run_http(base_url: str, clients: int, per_call: int, texts: list[str] = SENTENCES):
    """A peer's OpenAI-style POST /embeddings, over HTTP/1.1 with keep-alive connections (one per client)."""
    import httpx

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=600) as http:
        model = (await http.get("/models")).raise_for_status().json()["data"][0]["id"]

        async def embed(batch: list[str]) -> list:
            response = await http.post("/embeddings", json={"model": model, "input": batch})
            return [e["embedding"] for e in response.raise_for_status().json()["data"]]

        return await drive(embed, clients, per_call, texts)


async def run_openai(base_url: str, clients: int, per_call: int, texts: list[str] = SENTENCES):
    """Our /v1/embeddings through the openai SDK (the default embedding model)."""
    import openai

    async with openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0) as sdk:

        async def embed(batch: list[str]) -> list:
            return [e.embedding for e in (await sdk.embeddings.create(model="", input=batch)).data]

        return await drive(embed, clients, per_call, texts)


async def run_triton(target: str, clients: int, per_call: int, texts: list[str] = SENTENCES, model: str = "minilm"):
    """Our KServe v2 ModelInfer through tritonclient (grpc.aio underneath, one channel as for gRPC Embed)."""
    import tritonclient.grpc.aio as triton

    async with triton.InferenceServerClient(target) as client:

        async def embed(batch: list[str]) -> np.ndarray:
            text = triton.InferInput("text", [len(batch)], "BYTES")
            text.set_data_from_numpy(np.array([t.encode() for t in batch], dtype=object))
            return (await client.infer(model, [text])).as_numpy("embedding")

        return await drive(embed, clients, per_call, texts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", help="our gRPC server")
    parser.add_argument("--http", help="an OpenAI-style HTTP embeddings server's base URL")
    parser.add_argument("--openai", help="our HTTP API's base URL, called through the openai SDK")
    parser.add_argument("--triton", help="our gRPC server, its KServe v2 ModelInfer called through tritonclient")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--per-call", type=int, default=1)
    parser.add_argument("--vectors", help="write the vectors here (.npy)")
    parser.add_argument("--count", type=int, default=len(SENTENCES), help="sentences in all (the same 10-60 words)")
    args = parser.parse_args()
    texts = SENTENCES if args.count == len(SENTENCES) else sentences(args.count, 10, 60, seed=11)
    if sum(map(bool, (args.target, args.http, args.openai, args.triton))) != 1:
        parser.error("give one of --target, --http, --openai and --triton")
    if args.target:
        calls = run(args.target, args.clients, args.per_call, texts)
    elif args.http:
        calls = run_http(args.http, args.clients, args.per_call, texts)
    elif args.openai:
        calls = run_openai(args.openai, args.clients, args.per_call, texts)
    else:
        calls = run_triton(args.triton, args.clients, args.per_call, texts)
    wall, latencies, vectors = asyncio.run(calls)
    if args.vectors:
        np.save(args.vectors, vectors)
    print(json.dumps({"wall": wall, "latencies": latencies}))


if __name__ == "__main__":
    main()
