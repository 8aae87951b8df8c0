"""A text cut into the sentences a translation model takes, and put back together around their
translations: every space, line break and paragraph kept where it was, so that N lines in are N lines out.

Sentences come from sentencex (about 300 languages' rules; imported at the first document). A sentence
longer than the model takes is cut at the safest boundary that makes it fit (after punctuation, else at
a space, else between characters), never truncated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# How a call cuts its texts, as DeepL's split_sentences names them: "1" at sentence ends and line breaks,
# "nonewlines" at sentence ends only (a line break inside a sentence stays in it), "0" not at all.
SPLIT_ALL, SPLIT_NO_NEWLINES, SPLIT_NONE = "1", "nonewlines", "0"
SPLIT_MODES = (SPLIT_ALL, SPLIT_NO_NEWLINES, SPLIT_NONE)

_LINES = re.compile(r"([^\r\n]*)(\r\n|\r|\n|$)")
_EDGES = re.compile(r"^(\s*)(.*?)(\s*)$", re.DOTALL)
# Where a long sentence may be cut, safest first: after a clause's punctuation, then at any space.
_CLAUSE_ENDS = re.compile(r"(?<=[,;:\u3001\uff0c\uff1b\uff1a\u060c)\]])\s+")
_SPACES = re.compile(r"\s+")


@dataclass
class Document:
    """Kept text (str) and places for translated pieces (their index in `pieces`), in order."""

    parts: list[str | int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)

    def keep(self, text: str) -> None:
        if text:
            self.parts.append(text)

    def add(self, piece: str) -> None:
        self.parts.append(len(self.pieces))
        self.pieces.append(piece)

    def assemble(self, translated: Sequence[str]) -> str:
        """The document with each piece replaced by its translation (len(translated) == len(pieces))."""
        return "".join(part if isinstance(part, str) else translated[part] for part in self.parts)

    def offsets(self, translated: Sequence[str]) -> list[int]:
        """Where each piece's translation starts in the assembled document."""
        at, starts = 0, [0] * len(self.pieces)
        for part in self.parts:
            if isinstance(part, str):
                at += len(part)
            else:
                starts[part] = at
                at += len(translated[part])
        return starts


def _segment(text: str, language: str) -> list[str]:
    from sentencex import segment  # the segmenter loads its rules when a document first needs them

    return [s for s in segment(language, text) if s]


def _add_stripped(document: Document, text: str) -> None:
    """text's content as a piece, its leading and trailing whitespace kept."""
    lead, content, trail = _EDGES.match(text).groups()
    document.keep(lead)
    if content:
        document.add(content)
    document.keep(trail)


def split_document(text: str, language: str, mode: str = SPLIT_ALL) -> Document:
    """The text's pieces for translation, and where each goes back. language: the ISO 639-1 code whose
    sentence rules apply (sentencex falls back on English rules for one it lacks)."""
    document = Document()
    if mode == SPLIT_NONE:
        _add_stripped(document, text)
        return document
    if mode == SPLIT_NO_NEWLINES:
        for sentence in _segment(text, language):
            _add_stripped(document, sentence)
        return document
    for match in _LINES.finditer(text):
        line, ending = match.groups()
        if not line and not ending:
            break
        for sentence in _segment(line, language) if line.strip() else [line]:
            _add_stripped(document, sentence)
        document.keep(ending)
    return document


def _cut(text: str, fits: Callable[[str], bool]) -> list[tuple[str, str]]:
    """text as (piece, whitespace after it) pairs, each piece fitting: halves at the boundary nearest the
    middle, of the safest kind the text has, until each half fits."""
    if fits(text) or len(text) < 2:
        return [(text, "")]
    middle = len(text) / 2
    for boundary in (_CLAUSE_ENDS, _SPACES):
        spans = [m.span() for m in boundary.finditer(text)]
        if spans:
            start, end = min(spans, key=lambda span: abs(span[0] - middle))
            break
    else:
        start = end = len(text) // 2  # no space at all (Chinese, Japanese, Thai): between two characters
    head, gap, tail = text[:start], text[start:end], text[end:]
    left, right = _cut(head, fits), _cut(tail, fits)
    left[-1] = (left[-1][0], gap)
    return left + right


def fit_pieces(document: Document, fits: Callable[[str], bool]) -> Document:
    """The document with every piece that does not fit the model cut into pieces that do, the
    whitespace at each cut kept between their translations."""
    if all(fits(piece) for piece in document.pieces):
        return document
    fitted = Document()
    for part in document.parts:
        if isinstance(part, str):
            fitted.keep(part)
            continue
        for piece, gap in _cut(document.pieces[part], fits):
            fitted.add(piece)
            fitted.keep(gap)
    return fitted
