"""Concurrent Embed clients, in a process of their own so that they do not share the server's GIL.

    python -m benchmarks.load_clients --target HOST:PORT --clients 32 --per-call 1 [--vectors out.npy]
    python -m benchmarks.load_clients --http http://HOST:PORT --clients 32 --per-call 1
    python -m benchmarks.load_clients --openai http://HOST:PORT --clients 32 --per-call 1
    python -m benchmarks.load_clients --triton HOST:PORT --clients 32 --per-call 1
    python -m benchmarks.load_clients --tei(-aiohttp) URL | --cohere(-raw, -base64) URL | --triton-http HOST:PORT

--http calls an OpenAI-style `POST /embeddings` (a peer server such as infinity-emb) instead of our gRPC Embed,
with the first model that its `GET /models` lists. --openai calls our own HTTP API through the `openai` SDK
(base64 vectors, as the SDK asks by default). --triton calls our KServe v2 ModelInfer through tritonclient's
asyncio client (raw BYTES in, raw FP32 out, as it sends them); that process never imports our generated
protobuf code, whose `inference.*` names tritonclient's own would clash with. --tei, --cohere and
--triton-http call the HTTP port's TEI /embed (raw httpx; --tei-aiohttp: aiohttp), Cohere /v2/embed (Cohere's
SDK, float; --cohere-base64: base64; --cohere-raw: aiohttp) and KServe v2 REST infer (tritonclient.http,
binary tensor data).

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


async def run_tei(base_url: str, clients: int, per_call: int, texts: list[str] = SENTENCES):
    """Our TEI /embed by raw HTTP (httpx, a keep-alive connection per client), as TEI's integrations call it."""
    import httpx

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=600) as http:

        async def embed(batch: list[str]) -> list:
            return (await http.post("/embed", json={"inputs": batch})).raise_for_status().json()

        return await drive(embed, clients, per_call, texts)


async def run_tei_aiohttp(base_url: str, clients: int, per_call: int, texts: list[str] = SENTENCES):
    """Our TEI /embed by aiohttp (its C parser: a lighter raw client than httpx, a connection per client)."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(base_url=base_url, connector=connector) as http:

        async def embed(batch: list[str]) -> list:
            async with http.post("/embed", json={"inputs": batch}) as response:
                response.raise_for_status()
                return await response.json()

        return await drive(embed, clients, per_call, texts)


async def run_cohere_raw(base_url: str, clients: int, per_call: int, texts: list[str] = SENTENCES):
    """Our Cohere /v2/embed by aiohttp: the door's own cost, without the SDK's."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(base_url=base_url, connector=connector) as http:

        async def embed(batch: list[str]) -> list:
            body = {"texts": batch, "input_type": "search_document", "embedding_types": ["float"]}
            async with http.post("/v2/embed", json=body) as response:
                response.raise_for_status()
                return (await response.json())["embeddings"]["float"]

        return await drive(embed, clients, per_call, texts)


async def run_cohere(
    base_url: str, clients: int, per_call: int, texts: list[str] = SENTENCES, kind: str = "float"
) -> tuple:
    """Our Cohere /v2/embed through Cohere's SDK (AsyncClientV2): float vectors, or base64 (which the SDK
    hands over as strings, unparsed; decoded here)."""
    import base64

    import cohere

    async with cohere.AsyncClientV2(api_key="unused", base_url=base_url, max_retries=0) as co:

        async def embed(batch: list[str]) -> list:
            answer = await co.embed(model="", texts=batch, input_type="search_document", embedding_types=[kind])
            if kind == "base64":
                return [np.frombuffer(base64.b64decode(v), "<f4") for v in answer.embeddings.base64]
            return answer.embeddings.float_

        return await drive(embed, clients, per_call, texts)


async def run_triton_http(address: str, clients: int, per_call: int, texts: list[str] = SENTENCES):
    """Our KServe v2 REST infer through tritonclient.http's asyncio client (binary tensor data, its default)."""
    import tritonclient.http.aio as triton

    client = triton.InferenceServerClient(address, conn_limit=clients)
    try:

        async def embed(batch: list[str]) -> np.ndarray:
            text = triton.InferInput("text", [len(batch)], "BYTES")
            text.set_data_from_numpy(np.array([t.encode() for t in batch], dtype=object))
            return (await client.infer("minilm", [text])).as_numpy("embedding")

        return await drive(embed, clients, per_call, texts)
    finally:
        await client.close()


# Each door: its option, what it is given, and the callers that drive it.
DOORS = {
    "target": ("our gRPC server", run),
    "http": ("an OpenAI-style HTTP embeddings server's base URL", run_http),
    "openai": ("our HTTP API's base URL, called through the openai SDK", run_openai),
    "triton": ("our gRPC server, its KServe v2 ModelInfer called through tritonclient", run_triton),
    "tei": ("our HTTP API's base URL, TEI's /embed called by httpx", run_tei),
    "tei_aiohttp": ("our HTTP API's base URL, TEI's /embed called by aiohttp", run_tei_aiohttp),
    "cohere": ("our HTTP API's base URL, Cohere's /v2/embed through its SDK", run_cohere),
    "cohere_base64": (
        "our HTTP API's base URL, Cohere's /v2/embed through its SDK, base64",
        lambda *args: run_cohere(*args, kind="base64"),
    ),
    "cohere_raw": ("our HTTP API's base URL, Cohere's /v2/embed by aiohttp", run_cohere_raw),
    "triton_http": ("our HTTP port (HOST:PORT), KServe v2 REST through tritonclient.http", run_triton_http),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    doors = parser.add_mutually_exclusive_group(required=True)
    for name, (what, _) in DOORS.items():
        doors.add_argument("--" + name.replace("_", "-"), help=what)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--per-call", type=int, default=1)
    parser.add_argument("--vectors", help="write the vectors here (.npy)")
    parser.add_argument("--count", type=int, default=len(SENTENCES), help="sentences in all (the same 10-60 words)")
    args = parser.parse_args()
    texts = SENTENCES if args.count == len(SENTENCES) else sentences(args.count, 10, 60, seed=11)
    name = next(name for name in DOORS if getattr(args, name))
    calls = DOORS[name][1](getattr(args, name), args.clients, args.per_call, texts)
    wall, latencies, vectors = asyncio.run(calls)
    if args.vectors:
        np.save(args.vectors, vectors)
    print(json.dumps({"wall": wall, "latencies": latencies}))


if __name__ == "__main__":
    main()
