"""The GPU check's inputs and their float32 outputs on the CPU, computed here when the device kit is built, so
that the device compares its float16 answers with them and needs neither the float32 graphs nor num2words'
spellings: MiniLM on the oracle texts, the numbers model on sampled numbers and 32 lockstep decode steps
(the preflight's), the Marian-shaped and T5 models' greedy tokens, and Whisper tiny.en's transcripts of espeak-ng
recordings (written into the kit beside them)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import onnxruntime as ort

from modeldir.files import open_model_dir
from modeldir.reference_decoder import greedy_decode_onnx
from modeldir.tokenizer import load_tokenizer, pad_batch

from .gpu_sizes import Sizes
from .runner_harness import RunnerHarness

ORACLE_TEXTS = [  # tests/test_minilm.py's: accents, scripts, emoji, code, one token, past 256 tokens
    "The delivery truck, which was late, blocked the narrow street.",
    "She saw the man with the telescope.",
    "A woman used a telescope to look at a man.",
    "Zürich's café served crème brûlée; naïve façade, Ærøskøbing.",
    "Привет, как дела? Γειά σου κόσμε. مرحبا بالعالم",
    "今日は天気がいいですね。我喜欢学习机器学习。한국어 문장입니다.",
    "Launch day 🚀🔥 — we did it!! 👩‍💻👨‍👩‍👧 ✔️",
    "def mean(xs):\n    return sum(xs) / len(xs)",
    "a",
    "?",
    " ".join(f"word{i} and more text" for i in range(150)),
]
PREFLIGHT_STEPS = 32


def cpu(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def encoded(files, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    c = files.config
    tokenizer = load_tokenizer(c.tokenizer, files.tokenizer, c.max_input_tokens)
    return pad_batch([e.ids for e in tokenizer.encode(texts)], c.pad_id)


def minilm(model_dir: Path) -> dict:
    files = open_model_dir(model_dir)
    ids, mask = encoded(files, ORACLE_TEXTS)
    (vectors,) = cpu(files.encoder).run(["embedding"], {"input_ids": ids, "attention_mask": mask})
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return {"texts": ORACLE_TEXTS, "embeddings": vectors.tolist()}


def numbers(model_dir: Path, sizes: Sizes) -> dict:
    """Parity pairs each way (the expected answers are num2words' spellings), and the preflight's lockstep
    greedy decode through the serving runner in float32."""
    from model.bundled.numbers import pair, sample_number

    rng = random.Random(777)  # a seed not used in training
    sampled = [sample_number(rng) for _ in range(sizes.numbers)]
    pairs = {
        direction: [pair(n, to_digits) for n in sampled]
        for direction, to_digits in (("digits->words", False), ("words->digits", True))
    }
    sources = [source for source, _ in pairs["digits->words"][: sizes.preflight_rows]]
    harness = RunnerHarness(model_dir, threads=2)
    ids, mask = encoded(open_model_dir(model_dir), sources)
    tokens = harness.greedy(ids, mask, PREFLIGHT_STEPS)
    return {"pairs": pairs, "preflight": {"sources": sources, "steps": PREFLIGHT_STEPS, "tokens": tokens}}


def greedy(model_dir: Path, sizes: Sizes) -> dict:
    """Greedy token ids of a text-to-text model's float32 graphs on the CPU, each prompt's up to its eos."""
    from .translation_load import texts

    files = open_model_dir(model_dir)
    c = files.config
    prompts = texts(sizes.prompts)
    ids, mask = encoded(files, prompts)
    # A checkpoint that forces eos at the last position a request allows (Marian's do) generates one fewer.
    steps = sizes.new_tokens - 1 if c.forced_eos else sizes.new_tokens
    tokens, _ = greedy_decode_onnx(
        cpu(files.encoder),
        cpu(files.decoder),
        ids,
        mask,
        start_id=c.bos_id,
        max_steps=steps,
        n_layers=c.n_decoder_layers,
        eos_id=c.eos_id,
    )
    expected = [row[: row.index(c.eos_id)] if c.eos_id in row else row for row in tokens[:, 1:].tolist()]
    return {"prompts": prompts, "new_tokens": sizes.new_tokens, "tokens": expected}


def speech(model_dir: Path, sizes: Sizes, folder: Path) -> dict:
    """sizes.speech_recordings recordings of Harvard sentences (30-60 s; a few seconds in a small kit) as WAV
    files in `folder`, and the float32 graphs' transcripts of them, served here on the CPU."""
    from service.core.transcription.transcription import TranscribeRequest
    from testing.server_thread import ServerThread
    from testing.speech import recording, shuffled_sentences, write_wav

    folder.mkdir(parents=True, exist_ok=True)
    files, spoken, requests = [], [], []
    small = sizes.speech_recordings < 8
    for i in range(sizes.speech_recordings):
        chosen = shuffled_sentences(i, 2 if small else None)
        path = write_wav(folder / f"speech-{i}.wav", recording(chosen, seed=i)[: 60 * 16_000])
        files.append(path.name)
        spoken.append(" ".join(chosen))
        requests.append(TranscribeRequest(audio=path.read_bytes()))
    server = ServerThread([model_dir], precision="fp32", device="cpu")
    try:
        core = server.server.core
        texts = [server.run(core.transcription.transcribe(r), timeout=600).text for r in requests]
    finally:
        server.close()
    return {"files": files, "spoken": spoken, "texts": texts}


def references(dirs: dict[str, Path], sizes: Sizes, speech_folder: Path) -> dict:
    return {
        "minilm": minilm(dirs["minilm"]),
        "numbers": numbers(dirs["numbers"], sizes),
        **{name: greedy(dirs[name], sizes) for name in ("marian", "t5", "t5-overflowing")},
        "speech": speech(dirs["whisper-tiny.en"], sizes, speech_folder),
    }
