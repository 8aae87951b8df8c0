"""Document jobs kept: each job's row in SQLite (the standard library's) and its uploaded and translated
files, named by the job's id alone, under the data directory's documents/ (so that a job outlives a
restart); in a temporary directory, removed at exit, where the server has no data directory. The API
processes of a split server share one directory: a job is claimed by the process that translates it, which
keeps its progress there for any of them to answer a status call with."""

from __future__ import annotations

import os
import secrets
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path

from ...errors import NotFound

QUEUED, TRANSLATING, DONE, DOWNLOADED, ERROR = "queued", "translating", "done", "downloaded", "error"
JOB_FILE = "documents.sqlite3"
FILES = "documents"
KEEP_SECONDS = 24 * 3600  # a job (its files, its result never downloaded) is kept this long after its upload
LOCK_WAIT_SECONDS = 30.0  # how long a write waits while another process of the server writes
_SCHEMA = """
create table if not exists jobs (
    document_id text primary key, document_key text not null, status text not null, filename text not null,
    format text not null, target_language text not null, source_language text, glossary_id text,
    characters integer not null, error text, created real not null, owner integer, started real,
    characters_done integer not null default 0
)
"""
# Columns later releases added, each with its type: a store of an earlier release gains them.
_ADDED = {"owner": "integer", "started": "real", "characters_done": "integer not null default 0"}


@dataclass(frozen=True)
class Job:
    document_id: str  # 32 hexadecimal digits, as DeepL's
    document_key: str  # 64 hexadecimal digits: the secret that reads the job and its result
    status: str
    filename: str
    format: str
    target_language: str
    source_language: str | None  # None: detected from the document
    glossary_id: str | None
    characters: int  # of its text, what DeepL bills
    error: str | None
    created: float  # seconds since the epoch
    owner: int | None = None  # while translating: the process (its id) that claimed it
    started: float | None = None  # while translating: when it was claimed (seconds since the epoch)
    characters_done: int = 0  # while translating: of its characters, those translated


class DocumentStore:
    def __init__(self, data_dir: Path | None):
        """data_dir: where jobs are kept (made if missing); None: a temporary directory, gone at exit."""
        self._temporary = None if data_dir is not None else tempfile.TemporaryDirectory(prefix="attnserve-docs-")
        self.durable = data_dir is not None
        self.files = Path(data_dir if data_dir is not None else self._temporary.name) / FILES
        self.files.mkdir(parents=True, exist_ok=True)
        where = str(Path(data_dir) / JOB_FILE) if data_dir is not None else ":memory:"
        self._db = sqlite3.connect(where, timeout=LOCK_WAIT_SECONDS, check_same_thread=False)
        self._lock = threading.Lock()  # one connection shared by the loop and the file threads
        with self._lock, self._db:
            self._db.execute(_SCHEMA)
            columns = [row[1] for row in self._db.execute("pragma table_info(jobs)")]
            for name, kind in _ADDED.items():
                if name not in columns:
                    self._db.execute(f"alter table jobs add column {name} {kind}")

    def add(self, job: Job, data: bytes) -> Job:
        self.upload(job.document_id).write_bytes(data)
        with self._lock, self._db:
            self._db.execute(f"insert into jobs values ({', '.join('?' * len(fields(Job)))})", _row(job))
        return job

    def upload(self, document_id: str) -> Path:
        return self.files / f"{document_id}.upload"

    def result(self, document_id: str) -> Path:
        return self.files / f"{document_id}.result"

    def get(self, document_id: str) -> Job:
        with self._lock:
            row = self._db.execute("select * from jobs where document_id = ?", (document_id,)).fetchone()
        if row is None:
            raise NotFound(f"document_id: no document {document_id!r} on this server", "document_id")
        return Job(*row)

    def check_key(self, document_id: str, document_key: str) -> Job:
        """The job, where the key is its own; an unknown id and a wrong key are refused alike (NotFound),
        so that a key cannot be told from a missing job."""
        job = self.get(document_id)
        if not secrets.compare_digest(job.document_key.encode(), (document_key or "").encode()):
            raise NotFound(f"document_id: no document {document_id!r} with this document_key", "document_key")
        return job

    def set_status(self, document_id: str, status: str, error: str | None = None) -> None:
        with self._lock, self._db:
            self._db.execute(
                "update jobs set status = ?, error = ? where document_id = ?", (status, error, document_id)
            )

    def claim(self, document_id: str) -> bool:
        """The job marked translating by this process, if it is still queued (no other process took it)."""
        with self._lock, self._db:
            taken = self._db.execute(
                "update jobs set status = ?, owner = ?, started = ?, characters_done = 0 "
                "where document_id = ? and status = ?",
                (TRANSLATING, os.getpid(), time.time(), document_id, QUEUED),
            )
        return taken.rowcount == 1

    def advance(self, document_id: str, characters: int) -> None:
        """`characters` more of a translating job's text translated."""
        with self._lock, self._db:
            self._db.execute(
                "update jobs set characters_done = characters_done + ? where document_id = ?", (characters, document_id)
            )

    def requeue_interrupted(self, owner: int | None = None) -> int:
        """Jobs left translating queued again: all of them (the server stopped), or those of a process
        that died (`owner`, its id). -> how many."""
        where, values = (
            ("status = ?", (TRANSLATING,)) if owner is None else ("status = ? and owner = ?", (TRANSLATING, owner))
        )
        with self._lock, self._db:
            moved = self._db.execute(
                f"update jobs set status = ?, owner = null, started = null, characters_done = 0 where {where}",
                (QUEUED, *values),
            )
        return moved.rowcount

    def queued(self) -> list[str]:
        """The jobs waiting for a process to translate them, oldest first."""
        with self._lock:
            rows = self._db.execute("select document_id from jobs where status = ? order by created", (QUEUED,))
            return [document_id for (document_id,) in rows.fetchall()]

    def take_done(self, document_id: str) -> bool:
        """The job marked downloaded, if it was done: of two downloads at once, one gets it."""
        with self._lock, self._db:
            taken = self._db.execute(
                "update jobs set status = ? where document_id = ? and status = ?", (DOWNLOADED, document_id, DONE)
            )
        return taken.rowcount == 1

    def remove_old(self) -> None:
        """Jobs uploaded more than KEEP_SECONDS ago and ended (done, downloaded or failed), with their files."""
        with self._lock, self._db:
            old = self._db.execute(
                "select document_id from jobs where created < ? and status not in (?, ?)",
                (time.time() - KEEP_SECONDS, QUEUED, TRANSLATING),
            )
            ids = [document_id for (document_id,) in old.fetchall()]
            self._db.executemany("delete from jobs where document_id = ?", [(i,) for i in ids])
        for document_id in ids:
            self.remove_files(document_id)

    def remove_files(self, document_id: str) -> None:
        for path in (self.upload(document_id), self.result(document_id)):
            path.unlink(missing_ok=True)

    def close(self) -> None:
        self._db.close()
        if self._temporary is not None:
            self._temporary.cleanup()


def new_job(**order) -> Job:
    return Job(
        document_id=secrets.token_hex(16).upper(),
        document_key=secrets.token_hex(32).upper(),
        status=QUEUED,
        error=None,
        created=time.time(),
        **order,
    )


def _row(job: Job) -> tuple:
    return tuple(getattr(job, f.name) for f in fields(Job))
