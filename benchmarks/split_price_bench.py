"""What the encoder's cut by length buys at each price of a call: ONNX Runtime in-process on a model
directory's encoder graph, the same batches of mixed lengths cut into calls of similar lengths
(batcher.split_by_length) at the price the server measures at warm-up (engine/call_price.py), at the old
fixed price 64 (and --also others), and not cut at all; medians of --rounds, the prices in turns within each round.

The batches are as a server meets them: --batch sources in the order they come, of 10-60 words each
(embed_bench's sentences; their lengths in MiniLM's tokens, the same lengths for every model so that the
models are comparable). Only the cut differs between the rows, so the prices share one process and its
warm sessions. The machine and its GEMM probe come first.

    .venv/bin/python -m benchmarks.split_price_bench [--models build/models/minilm ...] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from modeldir.files import open_model_dir
from modeldir.tokenizer import TextTokenizer, pad_batch
from service.engine.batcher import split_by_length
from service.engine.call_price import PROBE_TOKENS, UNMEASURED_PRICE, measure_call_price
from service.runner.sessions import SessionSettings, create_session

from .common import print_table, write_results
from .engines import chunks, embed_texts
from .machine import describe, print_machine

UNCUT = 1 << 30  # a price no cut saves


def label(model_dir: Path) -> str:
    return model_dir.parent.name if model_dir.name == "attnserve" else model_dir.name  # the bench's layout


def source_lengths(count: int) -> list[int]:
    files = open_model_dir(Path("build/models/minilm"))
    tokenizer = TextTokenizer(files.tokenizer, files.config.max_input_tokens)
    return [len(e.ids) for e in tokenizer.encode(embed_texts(count))]


def encoder_call(model_dir: Path, precision: str, threads: int):
    """-> run(ids, mask) on the model's encoder graph (an embedding model's: its only graph)."""
    files = open_model_dir(model_dir, precision=precision)
    session = create_session(files.graphs["encoder"], SessionSettings(device="cpu", intra_op_threads=threads))
    names = {i.name for i in session.get_inputs()}

    def run(ids: np.ndarray, mask: np.ndarray) -> None:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        session.run(None, feeds)

    return run, files.config.max_input_tokens


def timed_pass(run, batches: list[list[int]], price: int) -> float:
    """Seconds to run every batch, each cut at `price` (ids of token 5: the cost is in the shapes)."""
    started = time.perf_counter()
    for batch in batches:
        for group in split_by_length(batch, price, length=lambda n: n):
            ids, mask = pad_batch([[5] * n for n in group], 0)
            run(ids, mask)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--models",
        type=Path,
        nargs="+",
        default=[Path("build/models/minilm"), Path("build/bench/m2m100-418m/attnserve")],
    )
    parser.add_argument("--precisions", nargs="+", default=["fp32", "int8"])
    parser.add_argument("--count", type=int, default=256, help="sources in all")
    parser.add_argument("--batch", type=int, default=16, help="sources a batch, in the order they come")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--also", type=int, nargs="*", default=[], help="more fixed prices to time beside them")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    lengths = source_lengths(args.count)
    rows, figures = [], {"machine": machine, "lengths": lengths, "models": {}}
    for model_dir in args.models:
        for precision in args.precisions:
            run, max_tokens = encoder_call(model_dir, precision, args.threads)
            batches = chunks([min(n, max_tokens) for n in lengths], args.batch)

            def one_source(tokens: int) -> None:
                run(np.full((1, tokens), 5, np.int64), np.ones((1, tokens), np.int64))

            measured = measure_call_price(one_source, min(PROBE_TOKENS, max_tokens))
            prices = {"measured": measured, "fixed 64": UNMEASURED_PRICE, "uncut": UNCUT}
            prices.update({f"fixed {price}": price for price in args.also})
            timed_pass(run, batches, measured)  # every shape planned once
            times = {name: [] for name in prices}
            for _ in range(args.rounds):
                for name, price in prices.items():
                    times[name].append(timed_pass(run, batches, price))
            medians = {name: statistics.median(t) for name, t in times.items()}
            calls = {
                name: sum(len(split_by_length(b, p, length=lambda n: n)) for b in batches) for name, p in prices.items()
            }
            for name in prices:
                rows.append(
                    [
                        f"{label(model_dir)} {precision}",
                        f"{name} ({prices[name] if prices[name] != UNCUT else '-'})",
                        calls[name],
                        args.count / medians[name],
                        medians["fixed 64"] / medians[name],
                    ]
                )
            figures["models"][f"{model_dir} {precision}"] = {"prices": prices, "seconds": times, "calls": calls}
            print(f"{label(model_dir)} {precision}: measured price {measured}", flush=True)
    print_table(
        f"Sources/s, {args.count} sources in batches of {args.batch} as they come, medians of {args.rounds} rounds",
        ["model", "price", "calls", "sources/s", "vs 64"],
        rows,
    )
    write_results("split_price_bench", figures)


if __name__ == "__main__":
    main()
