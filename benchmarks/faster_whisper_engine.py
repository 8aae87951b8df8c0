"""faster-whisper transcribing a set of files, for benchmarks/whisper_bench.py, run in its own environment
(.venv-whisper: `make whisper-reference`); it imports neither attnserve nor its environment.

    .venv-whisper/bin/python benchmarks/faster_whisper_engine.py MODEL_DIR COMPUTE_TYPE MODE THREADS FILE...

MODE sequential: WhisperModel.transcribe, the files one after another (faster-whisper's own way, its
defaults: beams of 5, the temperature fallback, the previous text as prompt); batched: its
BatchedInferencePipeline (Silero VAD cuts each file into chunks of up to 30 s, decoded batch_size at a
time; its defaults otherwise), the files one after another. Prints JSON: each file's text and the seconds
from the start to its end, and the load's wall time (the model loaded and warmed up before)."""

from __future__ import annotations

import json
import sys
import time

from faster_whisper import BatchedInferencePipeline, WhisperModel, decode_audio

BATCH_SIZE = 16


def main() -> None:
    model_dir, compute_type, mode, threads, *files = sys.argv[1:]
    model = WhisperModel(model_dir, device="cpu", compute_type=compute_type, cpu_threads=int(threads))
    engine = BatchedInferencePipeline(model) if mode == "batched" else model
    options = {"batch_size": BATCH_SIZE} if mode == "batched" else {}
    list(engine.transcribe(decode_audio(files[0])[: 16000 * 5], **options)[0])  # warm up
    started = time.perf_counter()
    texts, done = [], []
    for name in files:  # decoded inside the load, as the server decodes its uploads
        segments, _ = engine.transcribe(name, **options)
        texts.append("".join(s.text for s in segments))
        done.append(time.perf_counter() - started)
    print(json.dumps({"texts": texts, "done": done, "wall": time.perf_counter() - started}))


if __name__ == "__main__":
    main()
