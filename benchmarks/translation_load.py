"""The translation benchmarks' sources and their gRPC callers (no torch: it runs in client processes)."""

from __future__ import annotations

import statistics
import time

import grpc

from model.bundled.number_sentences import sentences
from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc


def texts(count: int) -> list[str]:
    """Three written-out numbers a sentence: sources of 20-40 tokens."""
    parts = sentences(3 * count, seed=7)
    return [" ".join(parts[i : i + 3]) for i in range(0, 3 * count, 3)]


def summary(tokens: int, wall: float, latencies: list[float], new_tokens: int) -> dict:
    latencies = sorted(latencies)
    return {
        "tokens": tokens,
        "seconds": wall,
        "tokens_per_second": tokens / wall,
        "latency_p50": statistics.median(latencies),
        "latency_p90": latencies[int(0.9 * (len(latencies) - 1))],
        "seconds_per_token": statistics.median(latencies) / new_tokens,
    }


def parse_languages(spec: str | None) -> tuple[str, list[str]] | None:
    """'en:fr,de,es' -> ("en", ["fr", "de", "es"]): a source language and the targets, caller by caller."""
    if not spec:
        return None
    source, _, targets = spec.partition(":")
    return source, targets.split(",")


async def clients(
    target: str,
    sources: list[str],
    concurrency: int,
    new_tokens: int,
    model: str = "",
    beams: int = 1,
    languages: tuple[str, list[str]] | None = None,
) -> dict:
    """`concurrency` callers, each sending its next sentence when the last one is answered, to `model` (empty:
    the server's default seq2seq model): greedy with exactly new_tokens tokens, or beam search. languages:
    (source, targets) of a multilingual model, caller i asking for targets[i % len(targets)]."""
    import asyncio

    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        params = pb.GenerationParams(max_new_tokens=new_tokens, ignore_eos=beams == 1, num_beams=beams)

        def request(text: str, caller: int) -> pb.GenerateRequest:
            if languages is None:
                return pb.GenerateRequest(model=model, input=text, params=params)
            source, targets = languages
            return pb.GenerateRequest(
                model=model,
                input=text,
                params=params,
                source_language=source,
                target_language=targets[caller % len(targets)],
            )

        await stub.Generate(request(sources[0], 0))  # warm-up
        queue = list(reversed(sources))
        latencies, tokens = [], 0

        async def caller(index: int):
            nonlocal tokens
            while queue:
                text = queue.pop()
                begun = time.perf_counter()
                response = await stub.Generate(request(text, index))
                latencies.append(time.perf_counter() - begun)
                tokens += len(response.token_ids)

        started = time.perf_counter()
        await asyncio.gather(*(caller(i) for i in range(concurrency)))
        return summary(tokens, time.perf_counter() - started, latencies, new_tokens)
