"""Glossaries: named sets of dictionaries, each a language pair's source terms and their target terms
(DeepL's v3 multilingual glossaries; a v2 glossary is one of a single dictionary), kept in SQLite (the
standard library's) under the data directory, so that they outlive a restart; in memory where the server
has no data directory (a split server's API processes share a temporary one). Entries are read from
DeepL's TSV or CSV; the store checks them."""

from __future__ import annotations

import csv
import io
import sqlite3
import threading
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from modeldir.languages import language_tag

from ...errors import NotFound, invalid
from .document_store import LOCK_WAIT_SECONDS
from .languages import AUTO, SOURCE

GLOSSARY_FILE = "glossaries.sqlite3"
ENTRIES_FORMATS = ("tsv", "csv")
MAX_TERM = 1024  # characters of one term, as DeepL's
_SCHEMA = """
create table if not exists glossary (id text primary key, name text not null, creation_time text not null);
create table if not exists dictionary (
    glossary_id text not null references glossary(id) on delete cascade, source_lang text not null,
    target_lang text not null, entries text not null, primary key (glossary_id, source_lang, target_lang)
);
"""
# The first release's table: one pair a glossary. Its rows move into the two tables above when a store opens.
_FIRST_TABLE = "glossaries"


@dataclass(frozen=True)
class Term:
    source: str
    target: str


@dataclass(frozen=True)
class Dictionary:
    source_lang: str  # as DeepL names it: lower case, no variant ("en")
    target_lang: str
    entries: tuple[Term, ...]


@dataclass(frozen=True)
class Glossary:
    glossary_id: str
    name: str
    creation_time: str  # ISO 8601, UTC
    dictionaries: tuple[Dictionary, ...]  # in the order of their pairs

    @property
    def only(self) -> Dictionary:
        """Its one dictionary, as DeepL's v2 routes see a glossary."""
        if len(self.dictionaries) != 1:
            raise invalid(
                "glossary_id",
                f"glossary {self.glossary_id!r} has {len(self.dictionaries)} dictionaries; read it on /v3/glossaries",
            )
        return self.dictionaries[0]


def read_entries(text: str, entries_format: str) -> tuple[Term, ...]:
    """DeepL's entries: one "source<TAB>target" a line (tsv), or "source,target" with CSV's quoting (csv;
    DeepL's two optional language columns after them are read past). Refused naming `entries`: a line
    without both terms, a term with a tab or line break or over MAX_TERM characters, a source twice."""
    if entries_format not in ENTRIES_FORMATS:
        raise invalid("entries_format", f"{entries_format!r}; one of {', '.join(ENTRIES_FORMATS)}")
    if entries_format == "tsv":
        rows = [line.split("\t") for line in text.splitlines() if line.strip()]
    else:
        try:
            rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
        except csv.Error as error:
            raise invalid("entries", f"not CSV: {error}") from None
    terms, seen = [], set()
    for number, row in enumerate(rows, 1):
        if len(row) < 2 or (entries_format == "tsv" and len(row) != 2) or len(row) > 4:
            raise invalid("entries", f"line {number}: a source and a target term, {entries_format}-separated")
        source, target = row[0].strip(), row[1].strip()
        if not source or not target:
            raise invalid("entries", f"line {number}: an empty term")
        if any(len(term) > MAX_TERM or not one_line(term) for term in (source, target)):
            raise invalid(
                "entries",
                f"line {number}: a term over {MAX_TERM} characters or with a tab, a line break or a control character",
            )
        if source in seen:
            raise invalid("entries", f"line {number}: {source!r} is listed twice")
        seen.add(source)
        terms.append(Term(source, target))
    if not terms:
        raise invalid("entries", "no entries")
    return tuple(terms)


def one_line(term: str) -> bool:
    """A term without a tab, a control character or any line break str.splitlines() knows (the store
    keeps entries as TSV)."""
    return len(term.splitlines()) == 1 and not any(c == "\t" or unicodedata.category(c) == "Cc" for c in term)


def as_tsv(entries: tuple[Term, ...]) -> str:
    return "\n".join(f"{t.source}\t{t.target}" for t in entries)


def merged(old: tuple[Term, ...], new: tuple[Term, ...]) -> tuple[Term, ...]:
    """A dictionary's entries with `new` added: a source already there takes its new target."""
    targets = {term.source: term.target for term in old}
    targets.update((term.source, term.target) for term in new)
    return tuple(Term(source, target) for source, target in targets.items())


def language_pair(source: str, target: str) -> tuple[str, str]:
    """Two languages as a glossary's pair names them: lower case, no region or script ("EN-GB" -> "en")."""
    tags = [language_tag(code) for code in (source, target)]
    return tuple((tag.language or "").lower() if tag else code.lower() for tag, code in zip(tags, (source, target)))


class GlossaryStore:
    def __init__(self, data_dir: Path | None):
        """data_dir: where the store's file goes (made if missing); None: in memory only."""
        if data_dir is not None:
            Path(data_dir).mkdir(parents=True, exist_ok=True)
        where = str(Path(data_dir) / GLOSSARY_FILE) if data_dir is not None else ":memory:"
        self.durable = data_dir is not None
        self._db = sqlite3.connect(where, timeout=LOCK_WAIT_SECONDS, check_same_thread=False)
        self._lock = threading.Lock()  # one connection shared by the loop and the tokenizing threads
        with self._lock, self._db:
            self._db.execute("pragma foreign_keys = on")
            self._db.executescript(_SCHEMA)
            self._move_first_table()

    def _move_first_table(self) -> None:
        found = self._db.execute("select name from sqlite_master where type = 'table' and name = ?", (_FIRST_TABLE,))
        if found.fetchone() is None:
            return
        for glossary_id, name, source, target, created, entries in self._db.execute(f"select * from {_FIRST_TABLE}"):
            self._db.execute("insert into glossary values (?, ?, ?)", (glossary_id, name, created))
            self._db.execute("insert into dictionary values (?, ?, ?, ?)", (glossary_id, source, target, entries))
        self._db.execute(f"drop table {_FIRST_TABLE}")

    def create(self, name: str, dictionaries: tuple[Dictionary, ...]) -> Glossary:
        pairs = [(d.source_lang, d.target_lang) for d in dictionaries]
        if len(set(pairs)) != len(pairs):
            raise invalid("dictionaries", "a language pair listed twice")
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        glossary_id = str(uuid.uuid4())
        with self._lock, self._db:
            self._db.execute("insert into glossary values (?, ?, ?)", (glossary_id, name, now))
            for d in dictionaries:
                self._put(glossary_id, d)
        return self.get(glossary_id)

    def _put(self, glossary_id: str, d: Dictionary) -> None:
        self._db.execute(
            "insert or replace into dictionary values (?, ?, ?, ?)",
            (glossary_id, d.source_lang, d.target_lang, as_tsv(d.entries)),
        )

    def all(self) -> list[Glossary]:
        with self._lock:
            ids = self._db.execute("select id from glossary order by creation_time, id").fetchall()
        return [self.get(glossary_id) for (glossary_id,) in ids]

    def get(self, glossary_id: str, field: str = "glossary_id") -> Glossary:
        with self._lock:
            return self._read(glossary_id, field)

    def _read(self, glossary_id: str, field: str = "glossary_id") -> Glossary:
        row = self._db.execute("select * from glossary where id = ?", (glossary_id,)).fetchone()
        rows = self._db.execute(
            "select source_lang, target_lang, entries from dictionary where glossary_id = ? "
            "order by source_lang, target_lang",
            (glossary_id,),
        ).fetchall()
        if row is None:
            raise NotFound(f"{field}: no glossary {glossary_id!r} on this server", field)
        dictionaries = tuple(
            Dictionary(source, target, tuple(Term(*line.split("\t")) for line in entries.splitlines()))
            for source, target, entries in rows
        )
        return Glossary(row[0], row[1], row[2], dictionaries)

    def dictionary(self, glossary_id: str, source: str, target: str) -> Dictionary:
        """The glossary's dictionary for a pair (any codes BCP-47 reads); NotFound naming the pairs it has."""
        glossary, pair = self.get(glossary_id), language_pair(source, target)
        for d in glossary.dictionaries:
            if (d.source_lang, d.target_lang) == pair:
                return d
        pairs = ", ".join(f"{d.source_lang} to {d.target_lang}" for d in glossary.dictionaries) or "none"
        raise NotFound(
            f"glossary_id: glossary {glossary_id!r} has no dictionary for {pair[0]} to {pair[1]} (it has: {pairs})",
            "glossary_id",
        )

    def terms_for(self, glossary_id: str, source: str | None, target: str) -> tuple[Term, ...]:
        """A glossary's terms for a call from `source` into `target`, refused where the source is left to
        detection or the glossary has no dictionary for the pair."""
        if not source or source.lower() == AUTO:
            raise invalid(SOURCE, "required with a glossary")
        glossary, pair = self.get(glossary_id), language_pair(source, target)
        if len(glossary.dictionaries) == 1 and pair != (glossary.only.source_lang, glossary.only.target_lang):
            only = glossary.only
            raise invalid(
                "glossary_id",
                f"glossary {glossary_id!r} is for {only.source_lang} to {only.target_lang}, not {pair[0]} to {pair[1]}",
            )
        return self.dictionary(glossary_id, source, target).entries

    def update(self, glossary_id: str, name: str | None, dictionaries: tuple[Dictionary, ...]) -> Glossary:
        """DeepL's PATCH: a new name, and each dictionary's entries merged into its pair's (a pair not
        there added)."""
        pairs = [(d.source_lang, d.target_lang) for d in dictionaries]
        if len(set(pairs)) != len(pairs):
            raise invalid("dictionaries", "a language pair listed twice")
        with self._lock, self._db:
            self._db.execute("begin immediate")  # read and write as one: another process's merge waits
            have = {(d.source_lang, d.target_lang): d for d in self._read(glossary_id).dictionaries}
            if name is not None:
                self._db.execute("update glossary set name = ? where id = ?", (name, glossary_id))
            for d in dictionaries:
                old = have.get((d.source_lang, d.target_lang))
                self._put(
                    glossary_id, Dictionary(d.source_lang, d.target_lang, merged(old.entries if old else (), d.entries))
                )
        return self.get(glossary_id)

    def replace(self, glossary_id: str, dictionary: Dictionary) -> Dictionary:
        """DeepL's PUT of a dictionary: its pair's entries replaced (the pair added where not there)."""
        with self._lock, self._db:
            self._db.execute("begin immediate")  # not deleted between the look and the write
            self._read(glossary_id)
            self._put(glossary_id, dictionary)
        return dictionary

    def delete_dictionary(self, glossary_id: str, source: str, target: str) -> None:
        d = self.dictionary(glossary_id, source, target)
        with self._lock, self._db:
            self._db.execute(
                "delete from dictionary where glossary_id = ? and source_lang = ? and target_lang = ?",
                (glossary_id, d.source_lang, d.target_lang),
            )

    def delete(self, glossary_id: str) -> None:
        with self._lock, self._db:
            deleted = self._db.execute("delete from glossary where id = ?", (glossary_id,)).rowcount
        if not deleted:
            raise NotFound(f"glossary_id: no glossary {glossary_id!r} on this server", "glossary_id")

    def close(self) -> None:
        self._db.close()
