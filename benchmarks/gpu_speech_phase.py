"""The GPU check's Whisper phase: tiny.en's float16 graphs transcribe the kit's espeak-ng recordings, first
one alone (its real-time factor), then speech_calls of them at once over gRPC Transcribe (audio seconds per
second, latency p50/p99, the GPU's utilisation); each transcript is set beside the float32 CPU one the kit
was built with."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from service.grpc_api.client import Client

from .gpu_phases import Utilization

MODEL = "whisper-tiny.en"
SAMPLE_RATE = 16_000


def seconds_of(audio: bytes) -> float:
    return (len(audio) - 44) / 2 / SAMPLE_RATE  # 16-bit mono WAV


def speech(ctx) -> dict:
    refs, server = ctx.references["speech"], ctx.server
    recordings = [(ctx.kit / "speech" / name).read_bytes() for name in refs["files"]]
    with Client(server.target, timeout=3600) as client:
        client.transcribe(recordings[0][:16_044], model=MODEL)  # warm up: a second of the first
        started = time.perf_counter()
        alone = client.transcribe(recordings[0], model=MODEL)
        alone_seconds = time.perf_counter() - started

    calls = [i % len(recordings) for i in range(ctx.sizes.speech_calls)]
    started = time.perf_counter()

    def call(index: int) -> tuple[str, float]:
        with Client(server.target, timeout=3600) as client:
            text = client.transcribe(recordings[index], model=MODEL).text
        return text, time.perf_counter() - started

    with Utilization() as busy, ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(call, calls))
    wall = time.perf_counter() - started
    audio = sum(seconds_of(recordings[i]) for i in calls)
    done = [seconds for _, seconds in answers]
    same = [text == refs["texts"][i] for (text, _), i in zip(answers, calls)]
    return {
        "one_file": {
            "audio_seconds": seconds_of(recordings[0]),
            "real_time_factor": alone_seconds / seconds_of(recordings[0]),
        },
        "one_file_same_as_cpu": alone.text == refs["texts"][0],
        "calls": len(calls),
        "audio_seconds_per_second": audio / wall,
        "real_time_factor": wall / audio,
        "p50": float(np.percentile(done, 50)),
        "p99": float(np.percentile(done, 99)),
        "same_as_cpu": sum(same) / len(same),
        "texts": {refs["files"][i]: text for (text, _), i in zip(answers, calls)},
        **busy.figures(),
    }
