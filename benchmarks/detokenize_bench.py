"""Text of a growing answer, token by token: decoding all the ids so far at every token (what the text
stream did before it decoded incrementally) against the stream decoders (modeldir/stream_decoding.py),
per token, at answers of 60 and 512 tokens, for a tokenizer.json (the Marian-base-sized model's) and a
sentencepiece Marian tokenizer (a random checkpoint's). Medians of --rounds.

    .venv/bin/python -m benchmarks.detokenize_bench [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from modeldir.files import open_model_dir
from modeldir.tokenizer import MarianTokenizer, TextTokenizer

from .common import print_table, sentences, write_results
from .generate_bench import build
from .machine import describe, print_machine

LENGTHS = (60, 512)


def answer_ids(tokenizer, length: int) -> list[int]:
    """A real text's target ids, `length` of them."""
    ids: list[int] = []
    for text in sentences(400, 8, 20, seed=1):
        ids += tokenizer.encode_target(text).ids
        if len(ids) >= length:
            return ids[:length]
    raise ValueError("not enough text")


def per_token_us(step, ids: list[int], rounds: int) -> float:
    """Median over rounds of the time per token to follow the whole answer."""
    times = []
    for _ in range(rounds):
        follow = step()
        started = time.perf_counter()
        for i in range(len(ids)):
            follow(ids, i)
        times.append((time.perf_counter() - started) / len(ids) * 1e6)
    return statistics.median(times)


def whole(tokenizer):
    def make():
        return lambda ids, i: tokenizer.decode(ids[: i + 1])

    return make


def incremental(tokenizer):
    def make():
        decoder = tokenizer.stream_decoder()
        return lambda ids, i: decoder.step(ids[i])

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    machine = describe(1)
    print_machine(machine)
    from model.families.marian.random_checkpoint import random_marian_checkpoint

    base = open_model_dir(build())
    with tempfile.TemporaryDirectory() as directory:
        marian_dir = random_marian_checkpoint(Path(directory) / "marian", seed=0)
        tokenizers = {
            "tokenizer.json (Marian-base-sized)": TextTokenizer(base.tokenizer, 1024),
            "sentencepiece (random Marian)": MarianTokenizer(marian_dir, 1024),
        }
        rows, figures = [], {}
        for name, tokenizer in tokenizers.items():
            for length in LENGTHS:
                ids = answer_ids(tokenizer, length)
                before = per_token_us(whole(tokenizer), ids, args.rounds)
                after = per_token_us(incremental(tokenizer), ids, args.rounds)
                figures[f"{name} {length}"] = {"whole_us": before, "incremental_us": after}
                rows.append([name, length, f"{before:.1f} us", f"{after:.1f} us", f"{before / after:.1f}x"])
    header = ["tokenizer", "answer tokens", "whole decode a token", "stream decoder a token", "ratio"]
    print_table(f"decoding per token; medians of {args.rounds}", header, rows)
    write_results("detokenize_bench", {"machine": machine, "figures": figures})


if __name__ == "__main__":
    main()
