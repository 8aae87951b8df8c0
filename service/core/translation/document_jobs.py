"""Document translation jobs: an upload read and checked, queued, translated in the background in chunks
of its pieces through the same translation service as every call (admitted and recorded like them), and
its result written in the document's own format to be downloaded once. A job queued or running when the
server stops runs again when it starts (with a data directory; without one, jobs end with the server).
The API processes of a split server share the jobs: each runs those it claims."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ...errors import (
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    Overloaded,
    RequestTooLarge,
    ServiceError,
    Unavailable,
    invalid,
)
from ..calls.lifecycle import StatusTable
from .document_store import DONE, DOWNLOADED, ERROR, QUEUED, TRANSLATING, DocumentStore, Job, new_job
from .files.formats import read_document
from .files.pieces import FILE, Piece, ReadDocument
from .glossaries import Term
from .markup import MarkupRules
from .translation import TranslateRequest, TranslationOptions

log = logging.getLogger("attnserve.documents")

# A job's translation calls, recorded as Documents.Translate: each refusal kept as its own kind of error.
KINDS = (InvalidArgument, RequestTooLarge, NotFound, Overloaded, Unavailable, FailedPrecondition, DeadlineExceeded)
JOB_STATUSES = StatusTable(
    ok="OK", cancelled="CANCELLED", statuses={k: k for k in KINDS}, internal=Internal, code=lambda k: k.__name__
)
CONCURRENT_CHUNKS = 4  # of one job's, in flight at once: enough to fill a batch, not to crowd out other calls
RETRY_SECONDS = (0.2, 5.0)  # the first and the longest wait before a chunk refused as busy is sent again
BUSY_SECONDS = 600.0  # a chunk refused as busy (Overloaded) this long ends its job as an error
READS_AT_ONCE = 2  # uploads read at once: a document's tree takes many times its bytes
SAMPLE_CHARACTERS = 2000  # of a document's text, what its language is detected from
# How often a job that another process of a split server runs is looked at by one that waits for it.
OTHERS_JOB_SECONDS = 0.5


@dataclass(frozen=True, kw_only=True)
class DocumentLimits:
    max_bytes: int  # of one upload (document_max_bytes)
    max_characters: int  # of one document's text (document_max_characters)
    chunk_texts: int  # pieces of one translation call (translation_max_texts)
    chunk_characters: int  # characters of one translation call (translation_max_characters)


# What a job calls: a translation (through the core, as one recorded call), the language a sample of text
# is in (None: unknown), and a glossary's terms for a pair (refused where it does not serve the pair).
Translate = Callable[[TranslateRequest, str], Awaitable[list]]
Detect = Callable[[str], str | None]
GlossaryTerms = Callable[[str, str | None, str], tuple[Term, ...]]


class DocumentJobs:
    def __init__(self, data_dir: Path | None, limits: DocumentLimits, resume: bool = True):
        """resume: jobs left translating when the server stopped are queued again here; False in an API
        process of a split server, whose engine process did that before it started them."""
        self.store, self.limits = DocumentStore(data_dir), limits
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._finished: dict[str, asyncio.Event] = {}  # jobs run here that someone waits for, until they end
        self._reading = asyncio.Semaphore(READS_AT_ONCE)
        if resume:
            self.store.requeue_interrupted()
        for document_id in self.store.queued():  # each process of a split server runs those it claims first
            self._queue.put_nowait(document_id)

    async def check(self, format: str, data: bytes) -> ReadDocument:
        """The upload read and checked against the limits, in a thread (READS_AT_ONCE at a time)."""
        async with self._reading:
            return await asyncio.to_thread(self._read, format, data)

    def _read(self, format: str, data: bytes) -> ReadDocument:
        if len(data) > self.limits.max_bytes:
            raise RequestTooLarge(
                f"{FILE}: {len(data)} bytes; at most {self.limits.max_bytes} (document_max_bytes)", FILE
            )
        if not data:
            raise invalid(FILE, "empty")
        document = read_document(format, data)
        if not document.pieces:
            raise invalid(FILE, "no text to translate")
        if document.characters > self.limits.max_characters:
            raise RequestTooLarge(
                f"{FILE}: {document.characters} characters of text; at most {self.limits.max_characters} "
                "(document_max_characters)",
                FILE,
            )
        return document

    async def submit(self, data: bytes, characters: int, **order) -> Job:
        job = new_job(characters=characters, **order)
        await asyncio.to_thread(self.store.add, job, data)
        self._queue.put_nowait(job.document_id)
        return job

    @staticmethod
    def seconds_remaining(job: Job) -> int | None:
        """While a job is translated: its characters left at the pace of those done so far (kept in the
        store by the process translating it, whichever process asks)."""
        if job.status != TRANSLATING or job.started is None or not job.characters_done:
            return None
        pace = job.characters_done / max(time.time() - job.started, 1e-3)
        return round((job.characters - job.characters_done) / pace)

    async def take_result(self, document_id: str, document_key: str) -> tuple[Job, bytes]:
        """A finished job's translated document, once: the job is marked downloaded before its file is
        read (a second download is refused), and the file removed once read."""
        job = self.store.check_key(document_id, document_key)
        if job.status in (QUEUED, TRANSLATING):
            raise Unavailable(f"document_id: {document_id!r} is {job.status}; download it once it is done")
        if job.status == ERROR:
            raise FailedPrecondition(f"document_id: {document_id!r} was not translated: {job.error}", "document_id")
        if not self.store.take_done(document_id):  # downloaded, maybe just now through another connection
            raise NotFound(
                f"document_id: {document_id!r} was downloaded already (a result is sent once)", "document_id"
            )
        data = await asyncio.to_thread(self.store.result(document_id).read_bytes)
        await asyncio.to_thread(self.store.remove_files, document_id)
        return replace(job, status=DOWNLOADED), data

    async def run(self, translate: Translate, detect: Detect, glossary_terms: GlossaryTerms) -> None:
        """Translate the jobs queued, one at a time, until cancelled (a job cut off stays translating in
        the store, and is queued again when the server starts). Jobs past their time are removed when it
        starts and after each job (a timed sweep would keep a task of its own waiting: none is needed)."""
        while True:
            await asyncio.to_thread(self.store.remove_old)
            document_id = await self._queue.get()
            if not self.store.claim(document_id):  # another process of a split server runs it
                continue
            try:
                await self._translate(self.store.get(document_id), translate, detect, glossary_terms)
            except ServiceError as error:
                self._end(document_id, ERROR, error.message)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("document %s: translation failed", document_id)
                self._end(document_id, ERROR, "internal error (see the server log)")
            else:
                self._end(document_id, DONE)

    def _end(self, document_id: str, status: str, error: str | None = None) -> None:
        """A job done or failed: its status kept, its upload removed, whoever waits told."""
        try:
            self.store.set_status(document_id, status, error)
            self.store.upload(document_id).unlink(missing_ok=True)
        except Exception:  # the worker goes on with the next job whatever the store says
            log.exception("document %s: could not record its end (%s)", document_id, status)
        if document_id in self._finished:
            self._finished.pop(document_id).set()

    async def wait(self, document_id: str) -> Job:
        """The job once it is done or failed: told by this process's worker, or, where another process of
        a split server claimed it, seen in the store."""
        while (job := self.store.get(document_id)).status in (QUEUED, TRANSLATING):
            ends = self._finished.setdefault(document_id, asyncio.Event())
            try:
                await asyncio.wait_for(ends.wait(), OTHERS_JOB_SECONDS)
            except asyncio.TimeoutError:
                pass
        self._finished.pop(document_id, None)
        return job

    async def _translate(self, job: Job, translate: Translate, detect: Detect, glossary_terms: GlossaryTerms):
        data = await asyncio.to_thread(self.store.upload(job.document_id).read_bytes)
        document = await asyncio.to_thread(read_document, job.format, data)
        source = job.source_language
        if source is None:
            sample = " ".join(piece.plain for piece in document.pieces[:200])[:SAMPLE_CHARACTERS]
            source = detect(sample)
        terms = glossary_terms(job.glossary_id, source, job.target_language) if job.glossary_id else ()
        markups = {piece.markup for piece in document.pieces}
        options = {markup: TranslationOptions(markup=markup, glossary=terms) for markup in markups}

        def request(pieces: list[Piece]) -> TranslateRequest:
            texts = [piece.text for piece in pieces]
            return TranslateRequest(
                texts=texts,
                target_language=job.target_language,
                source_language=source,
                options=options[pieces[0].markup],
            )

        translations: list[str | None] = [None] * len(document.pieces)
        chunks = self._chunks(document.pieces)
        gate = asyncio.Semaphore(CONCURRENT_CHUNKS)

        async def chunk(indices: list[int]) -> None:
            async with gate:
                texts = await self._translate_chunk(job, [document.pieces[i] for i in indices], request, translate)
            for i, text in zip(indices, texts):
                translations[i] = text
            characters = sum(document.pieces[i].characters for i in indices)
            await asyncio.to_thread(self.store.advance, job.document_id, characters)

        tasks = [asyncio.ensure_future(chunk(indices)) for indices in chunks]
        try:
            await asyncio.gather(*tasks)
        except BaseException:  # one chunk refused: the job has failed, the others are not worth finishing
            for task in tasks:
                task.cancel()
            raise
        written = await asyncio.to_thread(document.write, translations, job.target_language)
        await asyncio.to_thread(self.store.result(job.document_id).write_bytes, written)

    def _chunks(self, pieces: list[Piece]) -> list[list[int]]:
        """The pieces read alike (plain, or markup by the same rules) in chunks, in order, each within a
        translation call's texts and characters."""
        alike: dict[MarkupRules | None, list[int]] = {}
        for i, piece in enumerate(pieces):
            alike.setdefault(piece.markup, []).append(i)
        chunks = []
        for indices in alike.values():
            chunk, size = [], 0
            for i in indices:
                full = len(chunk) >= self.limits.chunk_texts
                if chunk and (full or size + len(pieces[i].text) > self.limits.chunk_characters):
                    chunks.append(chunk)
                    chunk, size = [], 0
                chunk.append(i)
                size += len(pieces[i].text)
            chunks.append(chunk)
        return chunks

    async def _translate_chunk(self, job: Job, pieces: list[Piece], request, translate: Translate) -> list[str]:
        """A chunk's translations; a chunk over a call's limits (its sentences) cut in half until it fits, a
        chunk refused while the server is busy sent again."""
        wait, busy = RETRY_SECONDS[0], 0.0
        while True:
            try:
                return [t.text for t in await translate(request(pieces), job.document_id)]
            except RequestTooLarge:
                if len(pieces) == 1:
                    raise
                half = len(pieces) // 2
                first = await self._translate_chunk(job, pieces[:half], request, translate)
                return first + await self._translate_chunk(job, pieces[half:], request, translate)
            except Overloaded:  # the server is busy: sent again, for BUSY_SECONDS at most
                if busy >= BUSY_SECONDS:
                    raise Overloaded(f"the server stayed busy for {BUSY_SECONDS:.0f} s; upload the document again")
                await asyncio.sleep(wait)
                busy += wait
                wait = min(wait * 2, RETRY_SECONDS[1])
            except Unavailable:  # the server is stopping: the job stays translating, and runs again after
                await asyncio.sleep(RETRY_SECONDS[1])

    def close(self) -> None:
        self.store.close()
