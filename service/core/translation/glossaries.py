"""Glossaries: named lists of source terms and their target terms for one language pair, kept in SQLite
(the standard library's) under the data directory, so that they outlive a restart; in memory where the
server has no data directory. Entries are read from DeepL's TSV or CSV; the store checks them."""

from __future__ import annotations

import csv
import io
import sqlite3
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from modeldir.languages import language_tag

from ...errors import NotFound, invalid
from .languages import AUTO, SOURCE

GLOSSARY_FILE = "glossaries.sqlite3"
ENTRIES_FORMATS = ("tsv", "csv")
MAX_TERM = 1024  # characters of one term, as DeepL's
_SCHEMA = """
create table if not exists glossaries (
    id text primary key, name text not null, source_lang text not null, target_lang text not null,
    creation_time text not null, entries text not null
)
"""


@dataclass(frozen=True)
class Term:
    source: str
    target: str


@dataclass(frozen=True)
class Glossary:
    glossary_id: str
    name: str
    source_lang: str  # as DeepL names it: lower case, no variant ("en")
    target_lang: str
    creation_time: str  # ISO 8601, UTC
    entries: tuple[Term, ...]


def read_entries(text: str, entries_format: str) -> tuple[Term, ...]:
    """DeepL's entries: one "source<TAB>target" a line (tsv), or "source,target" with CSV's quoting (csv;
    DeepL's two optional language columns after them are read past). Refused naming `entries`: a line
    without both terms, a term with a tab or line break or over MAX_TERM characters, a source twice."""
    if entries_format not in ENTRIES_FORMATS:
        raise invalid("entries_format", f"{entries_format!r}; one of {', '.join(ENTRIES_FORMATS)}")
    if entries_format == "tsv":
        rows = [line.split("\t") for line in text.splitlines() if line.strip()]
    else:
        rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    terms, seen = [], set()
    for number, row in enumerate(rows, 1):
        if len(row) < 2 or (entries_format == "tsv" and len(row) != 2) or len(row) > 4:
            raise invalid("entries", f"line {number}: a source and a target term, {entries_format}-separated")
        source, target = row[0].strip(), row[1].strip()
        if not source or not target:
            raise invalid("entries", f"line {number}: an empty term")
        if any(len(term) > MAX_TERM or "\t" in term or "\n" in term for term in (source, target)):
            raise invalid("entries", f"line {number}: a term over {MAX_TERM} characters or with a tab or line break")
        if source in seen:
            raise invalid("entries", f"line {number}: {source!r} is listed twice")
        seen.add(source)
        terms.append(Term(source, target))
    if not terms:
        raise invalid("entries", "no entries")
    return tuple(terms)


def as_tsv(entries: tuple[Term, ...]) -> str:
    return "\n".join(f"{t.source}\t{t.target}" for t in entries)


class GlossaryStore:
    def __init__(self, data_dir: Path | None):
        """data_dir: where the store's file goes (made if missing); None: in memory only."""
        if data_dir is not None:
            Path(data_dir).mkdir(parents=True, exist_ok=True)
        where = str(Path(data_dir) / GLOSSARY_FILE) if data_dir is not None else ":memory:"
        self.durable = data_dir is not None
        self._db = sqlite3.connect(where, check_same_thread=False)
        self._lock = threading.Lock()  # one connection shared by the loop and the tokenizing threads
        with self._lock, self._db:
            self._db.execute(_SCHEMA)

    def create(self, name: str, source_lang: str, target_lang: str, entries: tuple[Term, ...]) -> Glossary:
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        glossary = Glossary(str(uuid.uuid4()), name, source_lang, target_lang, now, entries)
        with self._lock, self._db:
            self._db.execute(
                "insert into glossaries values (?, ?, ?, ?, ?, ?)",
                (glossary.glossary_id, name, source_lang, target_lang, now, as_tsv(entries)),
            )
        return glossary

    def all(self) -> list[Glossary]:
        with self._lock:
            rows = self._db.execute("select * from glossaries order by creation_time, id").fetchall()
        return [self._glossary(row) for row in rows]

    def get(self, glossary_id: str, field: str = "glossary_id") -> Glossary:
        with self._lock:
            row = self._db.execute("select * from glossaries where id = ?", (glossary_id,)).fetchone()
        if row is None:
            raise NotFound(f"{field}: no glossary {glossary_id!r} on this server", field)
        return self._glossary(row)

    def terms_for(self, glossary_id: str, source: str | None, target: str) -> tuple[Term, ...]:
        """A glossary's terms for a call from `source` into `target` (any codes BCP-47 reads), refused where
        the source is left to detection or the pair is not the glossary's."""
        glossary = self.get(glossary_id)
        if not source or source.lower() == AUTO:
            raise invalid(SOURCE, "required with a glossary")
        tags = [language_tag(code) for code in (source, target)]
        pair = tuple((tag.language or "").lower() if tag else code.lower() for tag, code in zip(tags, (source, target)))
        if pair != (glossary.source_lang, glossary.target_lang):
            raise invalid(
                "glossary_id",
                f"glossary {glossary_id!r} is for {glossary.source_lang} to {glossary.target_lang}, not {pair[0]} "
                f"to {pair[1]}",
            )
        return glossary.entries

    def delete(self, glossary_id: str) -> None:
        with self._lock, self._db:
            deleted = self._db.execute("delete from glossaries where id = ?", (glossary_id,)).rowcount
        if not deleted:
            raise NotFound(f"glossary_id: no glossary {glossary_id!r} on this server", "glossary_id")

    @staticmethod
    def _glossary(row) -> Glossary:
        glossary_id, name, source, target, created, entries = row
        terms = tuple(Term(*line.split("\t")) for line in entries.splitlines())
        return Glossary(glossary_id, name, source, target, created, terms)
