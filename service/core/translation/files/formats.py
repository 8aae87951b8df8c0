"""The document formats served, by file name extension: each one's reader and media type."""

from __future__ import annotations

import importlib
import logging
from pathlib import PurePath

from ....errors import ServiceError, invalid
from .pieces import FILE, ReadDocument

log = logging.getLogger("attnserve.documents")

OFFICE = "application/vnd.openxmlformats-officedocument."
# Each format's reader (module and function: imported at the first document of its kind, so that a server
# that translates no documents never loads lxml, python-docx, python-pptx or openpyxl) and media type.
READERS: dict[str, tuple[str, str, str]] = {
    "txt": ("plain_files", "read_txt", "text/plain; charset=utf-8"),
    "html": ("markup_files", "read_html", "text/html; charset=utf-8"),
    "htm": ("markup_files", "read_html", "text/html; charset=utf-8"),
    "docx": ("office_files", "read_docx", OFFICE + "wordprocessingml.document"),
    "pptx": ("office_files", "read_pptx", OFFICE + "presentationml.presentation"),
    "xlsx": ("office_files", "read_xlsx", OFFICE + "spreadsheetml.sheet"),
    "xlf": ("markup_files", "read_xliff", "application/xliff+xml"),
    "xliff": ("markup_files", "read_xliff", "application/xliff+xml"),
    "srt": ("plain_files", "read_srt", "application/x-subrip"),
    "vtt": ("plain_files", "read_vtt", "text/vtt; charset=utf-8"),
}
FORMATS = tuple(READERS)


def format_of(filename: str, field: str = FILE) -> str:
    """A file's format, from its name's extension; refused naming `field` where it is not served."""
    extension = PurePath(filename or "").suffix.lower().lstrip(".")
    if extension not in READERS:
        named = f"{extension!r}" if extension else "a file name without an extension"
        raise invalid(field, f"{named}: not a document format served; one of {', '.join(FORMATS)}")
    return extension


def same_format(name: str, format: str) -> bool:
    """Whether an extension names the format (htm and html, xlf and xliff are one each)."""
    return READERS.get(name.lower()) == READERS[format]


def media_type(format: str) -> str:
    return READERS[format][2]


def read_document(format: str, data: bytes) -> ReadDocument:
    """The document's pieces; a file its format's library cannot read refused naming `file`."""
    module, function, _ = READERS[format]
    reader = getattr(importlib.import_module(f"{__package__}.{module}"), function)
    try:
        return reader(data)
    except ServiceError:
        raise
    except Exception as error:  # each library fails in its own way on a malformed file: all are the file's fault
        log.info("a %s document could not be read: %r", format, error)
        raise invalid(FILE, f"could not be read as {format}: {type(error).__name__}") from None
