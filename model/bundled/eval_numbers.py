"""Exact-match accuracy of an exported "numbers" model, decoded greedily through the ONNX graphs with
the KV cache (ONNX Runtime, not PyTorch), per direction and per number length."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import onnxruntime as ort

from model.bundled.numbers import EVAL_SEED, MAX_DIGITS, TASK_PREFIXES, pair, sample_number
from modeldir.files import open_model_dir
from modeldir.reference_decoder import greedy_decode_onnx
from modeldir.tokenizer import TextTokenizer, pad_batch

MAX_NEW_TOKENS = 20  # the longest output is 17 tokens with </s>


class NumbersModel:
    """An exported numbers model on ONNX Runtime: texts in, greedy texts out."""

    def __init__(self, model_dir: Path, threads: int = 2, precision: str = "fp32"):
        files = open_model_dir(model_dir, precision=precision)
        self.config = files.config
        self.tokenizer = TextTokenizer(files.tokenizer, self.config.max_input_tokens)
        # The T5 model takes its task before the number ("words: 312"); the other finds it from the input.
        self.task_prefix = self.tokenizer.token_to_id("▁" + TASK_PREFIXES[False].strip()) is not None
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.encoder = ort.InferenceSession(str(files.encoder), options, providers=["CPUExecutionProvider"])
        self.decoder = ort.InferenceSession(str(files.decoder), options, providers=["CPUExecutionProvider"])

    def translate(self, texts: list[str], batch_size: int = 256) -> list[str]:
        c = self.config
        out = []
        for start in range(0, len(texts), batch_size):
            encoded = self.tokenizer.encode(texts[start : start + batch_size])
            ids, mask = pad_batch([e.ids for e in encoded], c.pad_id)
            tokens, _ = greedy_decode_onnx(
                self.encoder,
                self.decoder,
                ids,
                mask,
                start_id=c.bos_id,
                max_steps=MAX_NEW_TOKENS,
                n_layers=c.n_decoder_layers,
                eos_id=c.eos_id,
            )
            for row in tokens[:, 1:].tolist():
                ended = row.index(c.eos_id) if c.eos_id in row else len(row)
                out.append(self.tokenizer.decode(row[:ended]))
        return out


def sample_numbers(count: int, seed: int = EVAL_SEED) -> list[int]:
    rng = random.Random(seed)
    return [sample_number(rng) for _ in range(count)]


def evaluate(
    model_dir: Path, count: int = 2000, seed: int = EVAL_SEED, threads: int = 2, precision: str = "fp32"
) -> dict:
    """-> {direction: {"accuracy", "correct", "total", "by_length": {digits: [correct, total]}, "errors": [...]}},
    through the graphs of `precision`."""
    model = NumbersModel(model_dir, threads, precision)
    numbers = sample_numbers(count, seed)
    report = {}
    for direction, to_digits in (("digits->words", False), ("words->digits", True)):
        pairs = [pair(n, to_digits, model.task_prefix) for n in numbers]
        outputs = model.translate([source for source, _ in pairs])
        by_length = defaultdict(lambda: [0, 0])
        errors = []
        for number, (source, expected), got in zip(numbers, pairs, outputs):
            cell = by_length[len(str(number))]
            cell[1] += 1
            if got == expected:
                cell[0] += 1
            else:
                errors.append({"input": source, "expected": expected, "got": got})
        correct = sum(c for c, _ in by_length.values())
        report[direction] = {
            "accuracy": correct / count,
            "correct": correct,
            "total": count,
            "by_length": {n: by_length[n] for n in range(1, MAX_DIGITS + 1) if n in by_length},
            "errors": errors,
        }
    return report


def format_report(report: dict) -> str:
    lines = []
    for direction, r in report.items():
        lines.append(f"{direction}: {100 * r['accuracy']:.2f}% exact ({r['correct']}/{r['total']})")
        lines.append("  by digits: " + "  ".join(f"{n}:{c}/{t}" for n, (c, t) in r["by_length"].items()))
        for e in r["errors"][:5]:
            lines.append(f"  {e['input']!r} -> {e['got']!r}, expected {e['expected']!r}")
    return "\n".join(lines)
