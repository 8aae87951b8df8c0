"""The GPU check's Whisper phase: tiny.en's float16 graphs transcribe the kit's espeak-ng recordings, first
one alone (its real-time factor), then speech_long_file of them joined into one long file cut at its
silences (its pieces decoded at once: the long file's real-time factor), then speech_calls of them at once
over gRPC Transcribe (audio seconds per second, latency p50/p99, the GPU's utilisation), within
speech_budget_s: the calls not answered by then are cancelled and counted, so that the phase's time is
known when the lease is planned (gpu_plan.py; 26 of 64 were answered in 161 s on the first lease). Each
transcript is set beside the float32 CPU one the kit was built with."""

from __future__ import annotations

import io
import time
import wave
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np

from service.grpc_api.client import Client
from service.grpc_api.pb import inference_pb2 as pb

from .gpu_phases import Utilization

MODEL = "whisper-tiny.en"
SAMPLE_RATE = 16_000


def seconds_of(audio: bytes) -> float:
    return (len(audio) - 44) / 2 / SAMPLE_RATE  # 16-bit mono WAV


def joined(recordings: list[bytes]) -> bytes:
    """The recordings one after another, as one 16-bit mono WAV."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(b"".join(r[44:] for r in recordings))
    return out.getvalue()


def speech(ctx) -> dict:
    refs, server = ctx.references["speech"], ctx.server
    recordings = [(ctx.kit / "speech" / name).read_bytes() for name in refs["files"]]
    with Client(server.target, timeout=3600) as client:
        client.transcribe(recordings[0][:16_044], model=MODEL)  # warm up: a second of the first
        started = time.perf_counter()
        alone = client.transcribe(recordings[0], model=MODEL)
        alone_seconds = time.perf_counter() - started
        long_file = joined(recordings[: ctx.sizes.speech_long_file])
        started = time.perf_counter()
        # Streamed in pieces: the long file is larger than one message may be (max_message_bytes).
        stream = list(client.transcribe_stream(long_file, model=MODEL, chunking_strategy=pb.SilenceCuts()))
        cut_seconds = time.perf_counter() - started

    calls = [i % len(recordings) for i in range(ctx.sizes.speech_calls)]
    budget = ctx.sizes.speech_budget_s
    started = time.perf_counter()

    def call(index: int) -> tuple[str, float] | None:
        """The call's text and when it came, or None past the budget (the server cancels it)."""
        try:
            with Client(server.target, timeout=budget) as client:
                text = client.transcribe(recordings[index], model=MODEL).text
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
            return None
        return text, time.perf_counter() - started

    with Utilization() as busy, ThreadPoolExecutor(len(calls)) as pool:
        results = list(pool.map(call, calls))
    answered = [(answer, i) for answer, i in zip(results, calls) if answer is not None]
    wall = max([seconds for (_, seconds), _ in answered], default=time.perf_counter() - started)
    audio = sum(seconds_of(recordings[i]) for _, i in answered)
    done = [seconds for (_, seconds), _ in answered] or [float("nan")]
    same = [text == refs["texts"][i] for (text, _), i in answered]
    return {
        "one_file": {
            "audio_seconds": seconds_of(recordings[0]),
            "real_time_factor": alone_seconds / seconds_of(recordings[0]),
        },
        "one_file_same_as_cpu": alone.text == refs["texts"][0],
        "long_file_cut_at_silences": {
            "audio_seconds": seconds_of(long_file),
            "real_time_factor": cut_seconds / seconds_of(long_file),
            "segments": sum(len(message.segments) for message in stream),
            "done": stream[-1].done,
        },
        "calls": len(calls),
        "answered_within_budget": len(answered),
        "budget_seconds": budget,
        "audio_seconds_per_second": audio / wall,
        "real_time_factor": wall / audio if audio else float("inf"),
        "p50": float(np.percentile(done, 50)),
        "p99": float(np.percentile(done, 99)),
        "same_as_cpu": sum(same) / len(same) if same else 0.0,
        "texts": {refs["files"][i]: text for (text, _), i in answered},
        **busy.figures(),
    }
