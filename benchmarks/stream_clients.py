"""Concurrent GenerateStream clients in a process of their own; prints one JSON line of timings.

    python -m benchmarks.stream_clients --target HOST:PORT --streams 32 --new-tokens 128

Every stream asks for --new-tokens tokens with ignore_eos, all at once, for --input (default: a random
sentence each, for the random benchmark models). Reports the wall time, the
tokens received, each stream's time to first token and every gap between two messages of a stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import grpc

from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc


def source(seed: int, words: int = 32, vocab: int = 32000) -> str:
    """A source sentence for the random benchmark models (their tokenizer knows words w4 .. w{vocab-1})."""
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(4, vocab)}" for _ in range(words))


async def run(target: str, streams: int, new_tokens: int, model: str = "", text: str = "") -> dict:
    """text: every stream's input (default: a random sentence each, for the random benchmark models)."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceStub(channel)
        params = pb.GenerationParams(max_new_tokens=new_tokens, ignore_eos=True, num_beams=1)
        warm = pb.GenerationParams(max_new_tokens=2, num_beams=1)
        await stub.Generate(pb.GenerateRequest(model=model, input=text or source(-1), params=warm))

        async def stream(i: int):
            started = time.perf_counter()
            arrivals, tokens = [], 0
            async for message in stub.GenerateStream(
                pb.GenerateRequest(model=model, input=text or source(i), params=params)
            ):
                if message.token_ids:
                    arrivals.append(time.perf_counter())
                    tokens += len(message.token_ids)
            return started, arrivals, tokens

        started = time.perf_counter()
        results = await asyncio.gather(*(stream(i) for i in range(streams)))
        wall = time.perf_counter() - started
    return {
        "wall": wall,
        "tokens": sum(tokens for _, _, tokens in results),
        "ttft": [arrivals[0] - start for start, arrivals, _ in results],
        "itl": [b - a for _, arrivals, _ in results for a, b in zip(arrivals, arrivals[1:])],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--model", default="", help="default: the server's default seq2seq model")
    parser.add_argument("--input", default="", help="every stream's input (default: a random sentence each)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.target, args.streams, args.new_tokens, args.model, args.input))))


if __name__ == "__main__":
    main()
