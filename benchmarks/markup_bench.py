"""Tags kept through translation, on a held-out set of tagged numbers for the bundled multilingual numbers
model: digits into English, French, German and Spanish words with one group of digits in <b>
("1<b>234</b>567"), and English words into digits with one group's words in <b>. For each way of
placing tags, the share of tags that come back around the right words, of texts translated right, and of
both: attnserve's /v2/translate with tag_handling=xml (tags placed through the alignment, the default; and
by their share of the text, --no-tag-alignment), against the node-by-node baseline (each text node
translated alone and the tags kept between them, as LibreTranslate does). Then generated tokens a second
of the tagged texts against the same texts without markup, 32 callers at once, medians of --rounds
rounds, the two loads' order turned round each round.

Each server runs as `attnserve serve` in a fresh process of its own; the machine and its GEMM probe first.

    .venv/bin/python -m benchmarks.markup_bench [--rounds 3] [--cases 400]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import sys
import time
from pathlib import Path

import httpx

from model.bundled.multilingual_numbers import words
from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine

NUMBERS = Path("build/models/numbers-multilingual")
GENERATED = "attnserve_generated_tokens_total"
DEEPL_TARGETS = {"eng_Latn": "EN-GB", "fra_Latn": "FR", "deu_Latn": "DE", "spa_Latn": "ES", "zxx_Zyyy": "ZXX"}
# The word that follows a group of thousands or of millions, as num2words writes it.
SCALES = {
    "eng_Latn": ("thousand", "million"),
    "fra_Latn": ("mille", "millions"),
    "deu_Latn": ("tausend", "millionen"),
    "spa_Latn": ("mil", "millones"),
}
_TAG = re.compile(r"<[^>]*>")
_B = re.compile(r"<b>(.*?)</b>", re.DOTALL)


def norm(text: str) -> str:
    """Letters and digits only, lower case, English's "and" dropped: spelling differences aside."""
    return re.sub(r"[^0-9a-zà-ÿß]+|\band\b", "", text.lower())


def groups(number: int) -> list[str]:
    """Its digits in groups of three from the right: 1234567 -> ["1", "234", "567"]."""
    digits = str(number)
    head = len(digits) % 3 or 3
    return [digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)]


def cases(count: int, seed: int = 7) -> list[dict]:
    """Tagged held-out numbers: source markup, DeepL fields, the full expected text and the contents the
    <b> tag may rightly hold."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        number = rng.randrange(1_000, 1_000_000_000)
        parts = groups(number)
        k = rng.randrange(len(parts))
        value = int(parts[k])
        if len(out) % 5 < 4:  # digits into words
            target = list(SCALES)[len(out) % 5]
            scale = len(parts) - 1 - k
            said = words(value, target)
            if value < 2 or norm(said) not in norm(words(number, target)):
                continue  # a form that changes in context (un, eins, quatre-vingt): no one right answer
            right = {norm(said)} | ({norm(f"{said} {SCALES[target][scale - 1]}")} if scale else set())
            source = "".join(f"<b>{p}</b>" if i == k else p for i, p in enumerate(parts))
            out.append(
                dict(
                    source=source,
                    fields={"source_lang": "ZXX", "target_lang": DEEPL_TARGETS[target]},
                    expected=words(number, target),
                    right=right,
                )
            )
        else:  # English words into digits: one comma-separated phrase per group that is not zero
            phrases = words(number, "eng_Latn").split(", ")
            nonzero = [i for i, p in enumerate(parts) if int(p)]
            if len(phrases) != len(nonzero):
                continue
            j = rng.randrange(len(phrases))
            group = parts[nonzero[j]]
            source = ", ".join(f"<b>{p}</b>" if i == j else p for i, p in enumerate(phrases))
            right = {group, str(int(group))} if nonzero[j] else {group}
            out.append(
                dict(
                    source=source, fields={"source_lang": "EN", "target_lang": "ZXX"}, expected=str(number), right=right
                )
            )
    return out


def score(case: dict, answer: str) -> tuple[bool, bool]:
    """(the tag holds the right words, the text without tags is the right translation)."""
    held = _B.findall(answer)
    tag_right = len(held) == 1 and norm(held[0]) in case["right"]
    return tag_right, norm(_TAG.sub(" ", answer)) == norm(case["expected"])


async def post(client: httpx.AsyncClient, text: str, fields: dict) -> str:
    response = await client.post("/v2/translate", json={"text": [text], **fields}, timeout=3600)
    response.raise_for_status()
    return response.json()["translations"][0]["text"]


async def node_by_node(client: httpx.AsyncClient, case: dict) -> str:
    """Each text node translated alone, the tags kept where they stood between them."""
    pieces = re.split(r"(<[^>]*>)", case["source"])
    out = []
    for piece in pieces:
        if not piece or piece.startswith("<") or not piece.strip(" ,"):
            out.append(piece)
        else:
            out.append(await post(client, piece.strip(" ,"), case["fields"]))
    return "".join(out)


async def answers(base: str, all_cases: list[dict], how: str) -> list[str]:
    """Every case's answer, 32 callers at once. how: tagged, plain (tags stripped) or nodes."""
    gate = asyncio.Semaphore(32)
    async with httpx.AsyncClient(base_url=base) as client:

        async def one(case: dict) -> str:
            async with gate:
                if how == "nodes":
                    return await node_by_node(client, case)
                if how == "plain":
                    return await post(client, _TAG.sub("", case["source"]), case["fields"])
                return await post(client, case["source"], {**case["fields"], "tag_handling": "xml"})

        return list(await asyncio.gather(*(one(case) for case in all_cases)))


def timed(server: ServerProcess, all_cases: list[dict], how: str) -> tuple[dict, list[str]]:
    before = server.metric(GENERATED)
    started = time.perf_counter()
    out = asyncio.run(answers(f"http://127.0.0.1:{server.http_port}", all_cases, how))
    seconds = time.perf_counter() - started
    tokens = server.metric(GENERATED) - before
    return {"seconds": seconds, "tokens": tokens, "tokens_per_second": tokens / seconds}, out


def run_server(name: str, flags: list[str], all_cases: list[dict], args) -> dict:
    """One server: its placement's accuracy, then tagged against plain --rounds times."""
    server = ServerProcess("--intra-op-threads", str(args.threads), *flags, models=[str(NUMBERS.resolve())])
    try:
        timed(server, all_cases[:32], "tagged")  # warm
        figures, tagged = timed(server, all_cases, "tagged")
        runs = {"tagged": [], "plain": []}
        for round_ in range(args.rounds):
            for how in ("tagged", "plain") if round_ % 2 == 0 else ("plain", "tagged"):
                runs[how].append(timed(server, all_cases, how)[0])
                print(f"{name} round {round_ + 1}: {how} {runs[how][-1]['seconds']:.2f} s", file=sys.stderr, flush=True)
        result = {"answers": {"tagged": tagged}, "runs": runs}
        if args.baseline and name == "by share":
            result["answers"]["nodes"] = timed(server, all_cases, "nodes")[1]
        return result
    finally:
        server.stop()


def accuracy_rows(all_cases: list[dict], label: str, answered: list[str]) -> list[list]:
    rows = []
    for direction, picked in (
        ("digits -> words", lambda c: c["fields"]["source_lang"] == "ZXX"),
        ("words -> digits", lambda c: c["fields"]["source_lang"] == "EN"),
    ):
        scored = [score(c, a) for c, a in zip(all_cases, answered) if picked(c)]
        n = len(scored)
        rows.append(
            [
                label,
                direction,
                n,
                round(sum(t for t, _ in scored) / n, 3),
                round(sum(x for _, x in scored) / n, 3),
                round(sum(t and x for t, x in scored) / n, 3),
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-baseline", dest="baseline", action="store_false")
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    all_cases = cases(args.cases)
    results = {
        "alignment": run_server("alignment", [], all_cases, args),
        "by share": run_server("by share", ["--no-tag-alignment"], all_cases, args),
    }
    rows = accuracy_rows(all_cases, "alignment (default)", results["alignment"]["answers"]["tagged"])
    rows += accuracy_rows(all_cases, "by share of the text", results["by share"]["answers"]["tagged"])
    if args.baseline:
        rows += accuracy_rows(all_cases, "node by node (LibreTranslate's way)", results["by share"]["answers"]["nodes"])
    print_table(
        f"{len(all_cases)} tagged held-out numbers",
        ["placement", "direction", "cases", "tag right", "text right", "both"],
        rows,
    )
    speed = []
    for name, result in results.items():
        tagged = statistics.median(r["tokens_per_second"] for r in result["runs"]["tagged"])
        plain = statistics.median(r["tokens_per_second"] for r in result["runs"]["plain"])
        speed.append([name, round(tagged, 1), round(plain, 1), round(tagged / plain, 3)])
    print_table(
        f"tokens/s, 32 callers, median of {args.rounds} rounds", ["server", "tagged", "plain", "tagged / plain"], speed
    )
    write_results("markup_bench", {"machine": machine, "rounds": args.rounds, "accuracy": rows, "speed": speed})


if __name__ == "__main__":
    main()
