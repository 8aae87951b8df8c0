"""Exact-match accuracy of the exported multilingual numbers model, per language and direction, as a served
model answers: through a server started here, every direction's requests interleaved and in flight
together, so that each decode step mixes target languages (the way the model is used).

    .venv/bin/python -m testing.multilingual_numbers_eval build/models/numbers-multilingual [--count 2000]
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

from model.bundled.eval_numbers import format_report
from model.bundled.multilingual_numbers import EVAL_SEED, directions, example
from model.bundled.numbers import MAX_DIGITS, sample_number
from service.grpc_api.pb import inference_pb2 as pb

from .server_thread import ServerThread

MAX_NEW_TOKENS = 24  # the longest output is 16 tokens with </s>


def evaluate(model_dir: Path, count: int = 2000, seed: int = EVAL_SEED, in_flight: int = 256) -> dict:
    """-> {"fra_Latn->zxx_Zyyy": {"accuracy", "correct", "total", "by_length", "errors"}, ...}: the same
    `count` numbers in every direction, `in_flight` requests at a time, the directions interleaved."""
    rng = random.Random(seed)
    numbers = [sample_number(rng) for _ in range(count)]
    calls = [(number, source, target) for number in numbers for source, target in directions()]
    server = ServerThread([Path(model_dir)], max_new_tokens=MAX_NEW_TOKENS + 1)
    try:
        stub, answers = server.stub(), []
        for start in range(0, len(calls), in_flight):
            futures = []
            for number, source, target in calls[start : start + in_flight]:
                text, _ = example(number, source, target)
                request = pb.GenerateRequest(
                    input=text,
                    source_language=source,
                    target_language=target,
                    params=pb.GenerationParams(max_new_tokens=MAX_NEW_TOKENS),
                )
                futures.append(stub.Generate.future(request, timeout=600))
            answers += [f.result().text for f in futures]
    finally:
        server.close()
    cells: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    errors: dict[str, list] = defaultdict(list)
    for (number, source, target), got in zip(calls, answers):
        text, expected = example(number, source, target)
        direction, cell = f"{source}->{target}", cells[f"{source}->{target}"][len(str(number))]
        cell[1] += 1
        if got == expected:
            cell[0] += 1
        else:
            errors[direction].append({"input": text, "expected": expected, "got": got})
    report = {}
    for source, target in directions():
        direction = f"{source}->{target}"
        correct = sum(c for c, _ in cells[direction].values())
        by_length = {n: cells[direction][n] for n in range(1, MAX_DIGITS + 1) if n in cells[direction]}
        report[direction] = {
            "accuracy": correct / count,
            "correct": correct,
            "total": count,
            "by_length": by_length,
            "errors": errors[direction],
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--count", type=int, default=2000, help="numbers per direction; default: %(default)s")
    parser.add_argument(
        "--seed", type=int, default=EVAL_SEED, help="default: the evaluation seed, never a training one"
    )
    parser.add_argument("--json", type=Path, help="also write the full report here")
    args = parser.parse_args()
    report = evaluate(args.model_dir, count=args.count, seed=args.seed)
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
