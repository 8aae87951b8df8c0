"""Glossaries applied, on held-out term lists for the bundled multilingual numbers model (digits into
French words): term accuracy (the share of source terms found whose target term comes out) with the
glossary and without it, and what applying it costs in texts a second and generated tokens a second, 32
callers at once, medians of --rounds rounds, the loads' order turned round each round.

Three held-out lists of --terms numbers each: "as the model writes them" (each number to the French the
model writes anyway: a glossary must not spoil them), "do not translate" (each number to itself: the
model never copies digits into French) and "house style" (each number to "nombre" and its French words,
which the model never writes). Half the --cases texts are a listed number, half another number from 1 to
999,999.

The server runs as `attnserve serve` in a fresh process; the machine and its GEMM probe come first.

    .venv/bin/python -m benchmarks.glossary_bench [--rounds 3] [--cases 400] [--terms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

from model.bundled.multilingual_numbers import words
from service.core.translation.glossaries import Term
from service.core.translation.term_forcing import occurrences, present

from .common import print_table, write_results
from .machine import describe, print_machine

NUMBERS = Path("build/models/numbers-multilingual")
GENERATED = "attnserve_generated_tokens_total"
FIELDS = {"source_lang": "ZXX", "target_lang": "FR"}


def term_lists(count: int, seed: int = 3) -> dict[str, dict[str, str]]:
    numbers = random.Random(seed).sample(range(13, 1000), count)
    return {
        "as the model writes them": {str(n): words(n, "fra_Latn") for n in numbers},
        "do not translate": {str(n): str(n) for n in numbers},
        "house style": {str(n): f"nombre {words(n, 'fra_Latn')}" for n in numbers},
    }


def texts(count: int, listed: list[str], seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(listed) if i % 2 == 0 else str(rng.randrange(1, 1_000_000)) for i in range(count)]


def term_accuracy(sources: list[str], answers: list[str], terms: tuple[Term, ...]) -> tuple[int, float]:
    """(source terms found, the share of them whose target term is in the translation)."""
    found = right = 0
    for source, answer in zip(sources, answers):
        for term, _, _ in occurrences(source, terms):
            found += 1
            right += present(answer, term)
    return found, right / max(found, 1)


async def translate_all(base: str, all_texts: list[str], glossary_id: str | None) -> list[str]:
    gate = asyncio.Semaphore(32)
    extra = {"glossary_id": glossary_id} if glossary_id else {}
    async with httpx.AsyncClient(base_url=base, timeout=3600) as client:

        async def one(text: str) -> str:
            async with gate:
                answer = await client.post("/v2/translate", json={"text": [text], **FIELDS, **extra})
                answer.raise_for_status()
                return answer.json()["translations"][0]["text"]

        return list(await asyncio.gather(*(one(t) for t in all_texts)))


def timed(server, base: str, all_texts: list[str], glossary_id: str | None) -> tuple[dict, list[str]]:
    before = server.metric(GENERATED)
    started = time.perf_counter()
    out = asyncio.run(translate_all(base, all_texts, glossary_id))
    seconds = time.perf_counter() - started
    tokens = server.metric(GENERATED) - before
    return {"texts_per_second": len(all_texts) / seconds, "tokens_per_second": tokens / seconds}, out


def main() -> None:
    from testing.server_process import ServerProcess

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--terms", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    lists = term_lists(args.terms)
    all_texts = texts(args.cases, list(lists["do not translate"]))
    server = ServerProcess("--intra-op-threads", str(args.threads), models=[str(NUMBERS.resolve())])
    accuracy, speed = [], []
    try:
        base = f"http://127.0.0.1:{server.http_port}"
        timed(server, base, all_texts[:64], None)  # warm
        _, plain = timed(server, base, all_texts, None)
        for name, entries in lists.items():
            tsv = "\n".join(f"{s}\t{t}" for s, t in entries.items())
            made = httpx.post(
                f"{base}/v2/glossaries", json={"name": name, "entries": tsv, **FIELDS, "entries_format": "tsv"}
            )
            made.raise_for_status()
            glossary_id = made.json()["glossary_id"]
            terms = tuple(Term(s, t) for s, t in entries.items())
            runs = {"without": [], "with": []}
            for round_ in range(args.rounds):
                for how in ("with", "without") if round_ % 2 == 0 else ("without", "with"):
                    figures, answered = timed(server, base, all_texts, glossary_id if how == "with" else None)
                    runs[how].append(figures)
                    if how == "with":
                        termed = answered
                    print(
                        f"{name} round {round_ + 1}: {how} {figures['texts_per_second']:.1f} texts/s", file=sys.stderr
                    )
            found, without = term_accuracy(all_texts, plain, terms)
            _, with_glossary = term_accuracy(all_texts, termed, terms)
            accuracy.append([name, found, round(without, 3), round(with_glossary, 3)])
            medians = {
                how: {k: statistics.median(r[k] for r in runs[how]) for k in ("texts_per_second", "tokens_per_second")}
                for how in runs
            }
            speed.append(
                [
                    name,
                    round(medians["without"]["texts_per_second"], 1),
                    round(medians["with"]["texts_per_second"], 1),
                    round(medians["with"]["texts_per_second"] / medians["without"]["texts_per_second"], 3),
                    round(medians["with"]["tokens_per_second"] / medians["without"]["tokens_per_second"], 3),
                ]
            )
    finally:
        server.stop()
    print_table(
        f"term accuracy, {len(all_texts)} held-out texts", ["term list", "terms found", "without", "with"], accuracy
    )
    print_table(
        f"32 callers, median of {args.rounds} rounds",
        ["term list", "texts/s without", "texts/s with", "texts/s ratio", "tokens/s ratio"],
        speed,
    )
    write_results("glossary_bench", {"machine": machine, "rounds": args.rounds, "accuracy": accuracy, "speed": speed})


if __name__ == "__main__":
    main()
