"""Decoding an upload to Whisper's input (16 kHz mono float32): PyAV (FFmpeg's decoders and swresample, what
service/core/transcription/audio_decoding.py uses) against soundfile (libsndfile) with soxr's resampler, on 60 s of stereo
44.1 kHz audio (48 kHz for Opus) in each format both read, and which formats each reads at all. Each engine
decodes in a fresh process of its own; medians of --rounds. Needs the bench extra (soundfile, soxr).

    .venv/bin/python -m benchmarks.audio_decode_bench [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from testing.audio_files import FORMATS, codec_rate, encoded

from .common import print_table, write_results
from .machine import describe, print_machine

SECONDS = 60.0


def speech_like(seconds: float, rate: int) -> np.ndarray:
    """(2, samples): syllable-rate bursts of harmonics over noise, a different one on each channel."""
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * rate)) / rate
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t)
    voice = sum(np.sin(2 * np.pi * 140.0 * k * t) / k for k in range(1, 12)) * envelope
    channels = [0.2 * voice + 0.02 * rng.standard_normal(len(t)) for _ in range(2)]
    return np.stack(channels).astype(np.float32)


def decode_with_pyav(data: bytes) -> np.ndarray:
    from service.core.transcription.audio_decoding import AudioLimits, decode_audio

    return decode_audio(data, AudioLimits(max_upload_bytes=1 << 30, max_audio_seconds=3600))


def decode_with_soundfile(data: bytes) -> np.ndarray:
    import io

    import soundfile
    import soxr

    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return soxr.resample(samples.mean(axis=1), rate, 16_000).astype(np.float32)


ENGINES = {"pyav": decode_with_pyav, "soundfile+soxr": decode_with_soundfile}


def time_one(engine: str, path: str, rounds: int) -> dict:
    """In this (fresh) process: the median seconds of decoding the file, or why it cannot."""
    data = Path(path).read_bytes()
    decode = ENGINES[engine]
    try:
        decoded = decode(data)  # also the warm-up
    except Exception as error:  # a format the engine does not read
        return {"error": f"{type(error).__name__}: {str(error)[:80]}"}
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        decode(data)
        times.append(time.perf_counter() - started)
    return {"seconds": float(np.median(times)), "samples": len(decoded)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--engine")  # internal: time one engine on one file, in this process
    parser.add_argument("--file")
    args = parser.parse_args()
    if args.engine:
        print(json.dumps(time_one(args.engine, args.file, args.rounds)))
        return
    machine = describe(1)
    print_machine(machine)
    rows, figures = [], {}
    with tempfile.TemporaryDirectory() as directory:
        for kind in FORMATS:
            rate = codec_rate(kind, 44_100)
            path = Path(directory) / f"speech.{kind}"
            path.write_bytes(encoded(speech_like(SECONDS, rate), rate, kind))
            results = {}
            for engine in ENGINES:
                command = [sys.executable, "-m", "benchmarks.audio_decode_bench", "--engine", engine]
                out = subprocess.run(
                    [*command, "--file", str(path), "--rounds", str(args.rounds)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                results[engine] = json.loads(out.stdout.splitlines()[-1])
            figures[kind] = results
            cells = [f"{SECONDS / r['seconds']:.0f}x" if "seconds" in r else "cannot read" for r in results.values()]
            ratio = "-"
            if all("seconds" in r for r in results.values()):
                ratio = f"{results['soundfile+soxr']['seconds'] / results['pyav']['seconds']:.2f}"
            rows.append([kind, f"{path.stat().st_size // 1000} kB", *cells, ratio])
    header = ["format", "size", *(f"{e} (x real time)" for e in ENGINES), "soundfile time / pyav time"]
    print_table(f"decoding {SECONDS:.0f} s of stereo audio to 16 kHz mono, medians of {args.rounds}", header, rows)
    write_results("audio_decode_bench", {"machine": machine, "rounds": args.rounds, "formats": figures})


if __name__ == "__main__":
    main()
