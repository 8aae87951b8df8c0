"""Office documents: docx (the body's, headers', footers', notes' and comments' paragraphs, tables' among
them), pptx (slides' and their notes' paragraphs: text boxes, placeholders, tables, groups) and xlsx (every
cell holding text; formulas and numbers left alone), each opened and saved by its well-kept library."""

from __future__ import annotations

import io
import zipfile

import docx
import openpyxl
import pptx
from docx.opc.exceptions import PackageNotFoundError as DocxNotFound
from pptx.exc import PackageNotFoundError as PptxNotFound

from ....errors import RequestTooLarge, invalid
from .pieces import FILE, Piece, ReadDocument, worth_translating
from .run_groups import Paragraph, RunNames

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
WORD_RUNS = RunNames(
    paragraph=f"{W}p",
    run=f"{W}r",
    text=f"{W}t",
    properties=f"{W}rPr",
    unseen=frozenset({f"{W}lang", f"{W}noProof", f"{W}rFonts"}),
    marks_spaces=True,
)
SLIDE_RUNS = RunNames(
    paragraph=f"{A}p",
    run=f"{A}r",
    text=f"{A}t",
    properties=f"{A}rPr",
    unseen=frozenset({"lang", "altLang", "dirty", "err", "noProof", "smtClean"}),
    marks_spaces=False,
)
WORD_PARTS = (".document.main+xml", ".header+xml", ".footer+xml", ".footnotes+xml", ".endnotes+xml", ".comments+xml")
SLIDE_PARTS = (".slide+xml", ".notesSlide+xml")
# Bytes a document's parts may unpack to, all of them and its XML (which is read into trees many times its
# size): a zip bomb is refused before it is opened.
MAX_UNPACKED, MAX_UNPACKED_XML = 256 << 20, 64 << 20


def check_package(data: bytes, kind: str) -> None:
    """An Office file is a zip: refused where it is not one, or unpacks to more than its limits."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            entries = package.infolist()
    except zipfile.BadZipFile:
        raise invalid(FILE, f"not {kind} file (not a zip package)") from None
    unpacked = sum(entry.file_size for entry in entries)
    if unpacked > MAX_UNPACKED:
        raise RequestTooLarge(f"{FILE}: unpacks to {unpacked} bytes; at most {MAX_UNPACKED}", FILE)
    xml = sum(entry.file_size for entry in entries if entry.filename.endswith((".xml", ".rels")))
    if xml > MAX_UNPACKED_XML:
        raise RequestTooLarge(f"{FILE}: its XML unpacks to {xml} bytes; at most {MAX_UNPACKED_XML}", FILE)


def paragraphs_document(package, parts: tuple[str, ...], names: RunNames, save) -> ReadDocument:
    """The paragraphs of a package's parts whose content types end as `parts`, as pieces."""
    paragraphs = []
    for part in package.iter_parts():
        if part.content_type.endswith(parts) and hasattr(part, "_element"):
            paragraphs.extend(Paragraph(p, names) for p in part._element.iter(names.paragraph))
    kept = [(paragraph, piece) for paragraph in paragraphs if (piece := paragraph.piece()) is not None]

    def write(translations: list[str], target_language: str) -> bytes:
        for (paragraph, _), translation in zip(kept, translations):
            paragraph.write(translation)
        out = io.BytesIO()
        save(out)
        return out.getvalue()

    return ReadDocument([piece for _, piece in kept], write)


def read_docx(data: bytes) -> ReadDocument:
    check_package(data, "a docx")
    try:
        document = docx.Document(io.BytesIO(data))
    except (DocxNotFound, ValueError, KeyError) as error:
        raise invalid(FILE, f"not a docx file: {error}") from None
    return paragraphs_document(document.part.package, WORD_PARTS, WORD_RUNS, document.save)


def read_pptx(data: bytes) -> ReadDocument:
    check_package(data, "a pptx")
    try:
        presentation = pptx.Presentation(io.BytesIO(data))
    except (PptxNotFound, ValueError, KeyError) as error:
        raise invalid(FILE, f"not a pptx file: {error}") from None
    return paragraphs_document(presentation.part.package, SLIDE_PARTS, SLIDE_RUNS, presentation.save)


def read_xlsx(data: bytes) -> ReadDocument:
    check_package(data, "an xlsx")
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data))
    except (KeyError, ValueError, OSError, zipfile.BadZipFile) as error:
        raise invalid(FILE, f"not an xlsx file: {error}") from None
    cells = [
        cell
        for sheet in workbook.worksheets
        for row in sheet.iter_rows()
        for cell in row
        if cell.data_type == "s" and isinstance(cell.value, str) and worth_translating(cell.value)
    ]

    def write(translations: list[str], target_language: str) -> bytes:
        for cell, translation in zip(cells, translations):
            cell.value = translation
        out = io.BytesIO()
        workbook.save(out)
        return out.getvalue()

    return ReadDocument([Piece(cell.value) for cell in cells], write)
