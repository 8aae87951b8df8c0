"""A 20-page docx through DeepL's /v2/document against its paragraphs through /v2/translate, on the
bundled multilingual numbers model (digits into French words): the document of --pages pages of 25
paragraphs (every fifth with its last group of digits in bold, a run of its own) and a table, uploaded,
asked for its status every 20 ms until done, and downloaded; against the same paragraphs' texts sent to
/v2/translate in calls of 50 texts, four callers at once (what a job does). Wall time, medians of --rounds
rounds, the two loads' order turned round each round; the downloaded document's paragraphs are checked
equal to /v2/translate's texts, and the bold runs to hold words.

The server runs as `attnserve serve` in a fresh process; the machine and its GEMM probe come first.

    .venv/bin/python -m benchmarks.docx_bench [--rounds 3] [--pages 20]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import random
import statistics
import sys
import time
from pathlib import Path

import docx
import httpx

from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine

NUMBERS = Path("build/models/numbers-multilingual")
PARAGRAPHS_PER_PAGE = 25
FIELDS = {"source_lang": "ZXX", "target_lang": "FR"}
CALLERS, TEXTS_PER_CALL = 4, 50


def document(pages: int, seed: int = 11) -> tuple[bytes, list[str]]:
    """The docx and its paragraphs' texts (the table's cells after the paragraphs)."""
    rng = random.Random(seed)
    made = docx.Document()
    texts = []
    for i in range(pages * PARAGRAPHS_PER_PAGE):
        number = str(rng.randrange(1_000, 1_000_000))
        paragraph = made.add_paragraph()
        if i % 5 == 4:
            paragraph.add_run(number[:-3])
            paragraph.add_run(number[-3:]).bold = True
        else:
            paragraph.add_run(number)
        texts.append(number)
    table = made.add_table(rows=10, cols=4)
    for cell in (c for row in table.rows for c in row.cells):
        cell.text = str(rng.randrange(1, 1000))
        texts.append(cell.text)
    out = io.BytesIO()
    made.save(out)
    return out.getvalue(), texts


def through_documents(base: str, data: bytes) -> tuple[float, bytes]:
    with httpx.Client(base_url=base, timeout=3600) as client:
        started = time.perf_counter()
        handle = client.post("/v2/document", files={"file": ("bench.docx", data)}, data=FIELDS).json()
        key = {"document_key": handle["document_key"]}
        while client.post(f"/v2/document/{handle['document_id']}", json=key).json()["status"] != "done":
            time.sleep(0.02)
        result = client.post(f"/v2/document/{handle['document_id']}/result", json=key).content
        return time.perf_counter() - started, result


async def through_translate(base: str, texts: list[str]) -> tuple[float, list[str]]:
    gate = asyncio.Semaphore(CALLERS)
    async with httpx.AsyncClient(base_url=base, timeout=3600) as client:

        async def call(chunk: list[str]) -> list[str]:
            async with gate:
                answer = await client.post("/v2/translate", json={"text": chunk, **FIELDS})
                answer.raise_for_status()
                return [t["text"] for t in answer.json()["translations"]]

        started = time.perf_counter()
        chunks = [texts[i : i + TEXTS_PER_CALL] for i in range(0, len(texts), TEXTS_PER_CALL)]
        out = [text for chunk in await asyncio.gather(*(call(c) for c in chunks)) for text in chunk]
        return time.perf_counter() - started, out


def check(result: bytes, expected: list[str]) -> int:
    """The downloaded document's texts equal to /v2/translate's; -> its bold runs that hold words."""
    translated = docx.Document(io.BytesIO(result))
    paragraphs = [p.text for p in translated.paragraphs]
    cells = [c.text for t in translated.tables for row in t.rows for c in row.cells]
    got = paragraphs + cells
    wrong = [(i, a, b) for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert len(got) == len(expected) and not wrong, f"{len(wrong)} texts differ, the first: {wrong[:3]}"
    return sum(1 for p in translated.paragraphs for r in p.runs if r.bold and r.text.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    machine = describe(args.threads)
    print_machine(machine)
    data, texts = document(args.pages)
    server = ServerProcess("--intra-op-threads", str(args.threads), models=[str(NUMBERS.resolve())])
    try:
        base = f"http://127.0.0.1:{server.http_port}"
        _, expected = asyncio.run(through_translate(base, texts))  # warm, and the texts to compare with
        runs = {"document": [], "translate": []}
        for round_ in range(args.rounds):
            for how in ("document", "translate") if round_ % 2 == 0 else ("translate", "document"):
                if how == "document":
                    seconds, result = through_documents(base, data)
                    bold = check(result, expected)
                else:
                    seconds, answered = asyncio.run(through_translate(base, texts))
                    assert answered == expected
                runs[how].append(seconds)
                print(f"round {round_ + 1}: {how} {seconds:.2f} s", file=sys.stderr, flush=True)
    finally:
        server.stop()
    document_s, translate_s = (statistics.median(runs[how]) for how in ("document", "translate"))
    rows = [
        [
            "/v2/document (upload, status, download)",
            len(texts),
            round(document_s, 2),
            round(document_s / translate_s, 3),
        ],
        [f"/v2/translate, {TEXTS_PER_CALL} texts a call, {CALLERS} callers", len(texts), round(translate_s, 2), 1.0],
    ]
    print_table(
        f"a {args.pages}-page docx ({len(data)} bytes, {sum(map(len, texts))} characters), median of {args.rounds}",
        ["how", "texts", "seconds", "ratio"],
        rows,
    )
    print(f"\nthe document's texts equal /v2/translate's; {bold} bold runs hold words")
    write_results("docx_bench", {"machine": machine, "rounds": args.rounds, "rows": rows, "bold_runs": bold})


if __name__ == "__main__":
    main()
