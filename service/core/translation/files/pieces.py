"""What every document format gives a translation job: its pieces of text (plain, or a fragment of markup
with the rules it is read by) and how to write the document again around their translations."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ....errors import invalid
from ..markup import MarkupRules

# A document's field, as DeepL's /v2/document names it: refusals of a file's content name it.
FILE = "file"
# A piece's most characters where a format can cut (a long txt paragraph at its lines, a large HTML body at
# its elements): a translation call takes this many at once with room for the rest of its chunk.
PIECE_BUDGET = 5000
_TAGS = re.compile(r"<[^>]*>")


@dataclass(frozen=True)
class Piece:
    text: str
    markup: MarkupRules | None = None  # None: plain text

    @property
    def plain(self) -> str:
        """Its text alone (a fragment's tags left out)."""
        return self.text if self.markup is None else html.unescape(_TAGS.sub("", self.text))

    @property
    def characters(self) -> int:
        """Of its text alone: what DeepL bills."""
        return len(self.plain)


@dataclass
class ReadDocument:
    """A document's pieces, in order, and `write(translations, target_language)`: the document's bytes with
    each piece's translation in its place (one per piece, in order), marked as in that language where the
    format says which."""

    pieces: list[Piece] = field(default_factory=list)
    write: Callable[[list[str], str], bytes] = lambda translations, target_language: b""

    @property
    def characters(self) -> int:
        return sum(piece.characters for piece in self.pieces)


def decoded(data: bytes, what: str) -> str:
    """A text file's bytes as text: UTF-8 (a BOM read past), UTF-16 with its BOM; else refused by name."""
    for bom, encoding in ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if data.startswith(bom):
            data = data[len(bom) :]
            break
    else:
        encoding = "utf-8"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        raise invalid(FILE, f"not a {what} file in UTF-8 or UTF-16 (byte {error.start})") from None


def worth_translating(text: str) -> bool:
    """A piece with a letter or digit in it (not only spaces, punctuation or symbols)."""
    return any(character.isalnum() for character in text)
