"""Each document format read into pieces and written back: translated with their own text (the identity),
every format gives its text back unchanged, Office runs of equal formatting are merged into one piece
and each formatting keeps its words; files that are not what they say are refused naming `file`."""

from __future__ import annotations

import io
import zipfile

import docx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from service.core.translation.files.formats import format_of, read_document
from service.errors import InvalidArgument, RequestTooLarge

WORDS = st.text(alphabet="abc XYZ,.\n", min_size=0, max_size=30)
RUN_TEXT = st.text(alphabet="abc XYZ,.", min_size=1, max_size=12)


def identity(data: bytes, document_format: str) -> bytes:
    document = read_document(document_format, data)
    return document.write([piece.text for piece in document.pieces], "fr")


@settings(max_examples=60, deadline=None)
@given(st.lists(WORDS, max_size=8).map("\n\n".join))
def test_a_text_file_comes_back_unchanged(text):
    assume(any(c.isalnum() for c in text))
    data = text.encode()
    assert identity(data, "txt") == data


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.tuples(RUN_TEXT, st.booleans()), min_size=1, max_size=5), min_size=1, max_size=4))
def test_a_paragraphs_runs_are_one_piece_and_each_formatting_keeps_its_words(paragraphs):
    document = docx.Document()
    for runs in paragraphs:
        paragraph = document.add_paragraph()
        for text, bold in runs:
            paragraph.add_run(text).bold = bold or None
    out = io.BytesIO()
    document.save(out)
    read = read_document("docx", out.getvalue())
    worth = [runs for runs in paragraphs if any(c.isalnum() for text, _ in runs for c in text)]
    assert len(read.pieces) == len(worth)
    for piece, runs in zip(read.pieces, worth):
        groups = 1 + sum(runs[i][1] != runs[i - 1][1] for i in range(1, len(runs)))
        assert (piece.markup is None) == (groups == 1)
        assert piece.plain == "".join(text for text, _ in runs)
    again = docx.Document(io.BytesIO(read.write([piece.text for piece in read.pieces], "fr")))
    for paragraph, runs in zip(again.paragraphs, paragraphs):
        assert paragraph.text == "".join(text for text, _ in runs)
        assert "".join(r.text for r in paragraph.runs if r.bold) == "".join(text for text, bold in runs if bold)


def test_subtitles_and_xliff_come_back_with_their_text_unchanged():
    cues = "1\n00:00:01,000 --> 00:00:02,000\nHello <i>there</i>\n\n2\n00:00:02,500 --> 00:00:04,000\nBye\n\n"
    assert identity(cues.encode(), "srt").decode() == cues
    web = "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\n<v Ann>Hello</v>\n"
    assert identity(web.encode(), "vtt").decode() == web
    xliff = (
        '<xliff xmlns="urn:oasis:names:tc:xliff:document:1.2" version="1.2"><file source-language="en" '
        'datatype="plaintext" original="x"><body><trans-unit id="1"><source>Say <g id="1">hi</g> &amp; '
        '<ph id="2">&lt;br/&gt;</ph>bye</source></trans-unit><trans-unit id="2"><source>Tom &amp; Jerry &lt;3'
        "</source></trans-unit></body></file></xliff>"
    )
    written = identity(xliff.encode(), "xlf").decode()
    assert "<target>Tom &amp; Jerry &lt;3</target>" in written  # a plain segment's text is text, however it reads
    assert '<target>Say <g id="1">hi</g> &amp; <ph id="2">&lt;br/&gt;</ph>bye</target>' in written
    assert "ph" in read_document("xlf", xliff.encode()).pieces[0].markup.ignore_tags  # native code: never translated


def test_a_large_html_page_is_cut_at_its_elements_and_comes_back_whole():
    body = "".join(f"<p>Paragraph {i} with <b>bold</b> &amp; more.</p>\n" for i in range(300)) + "and after"
    page = f"<!DOCTYPE html>\n<html><head><title>A page</title><style>p {{}}</style></head><body>{body}</body></html>"
    document = read_document("html", page.encode())
    assert len(document.pieces) == 302 and document.pieces[1].text == "Paragraph 0 with <b>bold</b> &amp; more."
    assert document.pieces[-1].text == "\nand after"  # the text between a large element's children too
    assert identity(page.encode(), "html").decode().replace('<html lang="fr">', "<html>") == page


def test_files_that_are_not_their_format_are_refused_naming_file():
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as package:
        with package.open("word/document.xml", "w") as part:  # 100 MiB of zeros, deflated to about 100 KiB
            for _ in range(100):
                part.write(bytes(1 << 20))
    with pytest.raises(RequestTooLarge, match=r"^file: its XML unpacks to \d+ bytes; at most 67108864"):
        read_document("docx", bomb.getvalue())
    for document_format, data, message in [
        ("docx", b"PK\x03\x04", "file: not a docx file"),
        ("pptx", b"not a zip", "file: not a pptx file"),
        ("xlsx", b"", "file: not an xlsx file"),
        ("vtt", b"00:01 text", "file: not a WebVTT"),
        ("html", b"\xff\xfe\x00\xd8", "file: not a HTML file"),
    ]:
        with pytest.raises(InvalidArgument, match=message):
            read_document(document_format, data)
    assert format_of("Report.DOCX") == "docx"
    with pytest.raises(InvalidArgument, match="file: 'gz': not a document format served; one of txt,"):
        format_of("archive.tar.gz")
