"""Documents of plain text: txt (by paragraphs, every line break and blank line kept), and subtitles, srt
and vtt (each cue's text; the cues' numbers, times and settings kept; a cue's inline tags, <i> or
<v Speaker>, kept around their words as HTML)."""

from __future__ import annotations

import re

import srt
import webvtt

from ....errors import invalid
from ..markup import HTML, MarkupRules
from .pieces import FILE, PIECE_BUDGET, Piece, ReadDocument, decoded, worth_translating

_PARAGRAPHS = re.compile(r"(\n[ \t]*\n\s*)")  # a blank line, and the spaces around it, kept as sent
_LINE_BREAKS = re.compile(r"(\n)")
CUE_MARKUP = MarkupRules(tag_handling=HTML)


def cue_piece(text: str) -> Piece:
    return Piece(text, CUE_MARKUP if "<" in text else None)


def read_txt(data: bytes) -> ReadDocument:
    text = decoded(data, "text").replace("\r\n", "\n")
    parts = []  # paragraphs (a long one's lines) at even places, the blank lines (line breaks) between at odd
    for i, part in enumerate(_PARAGRAPHS.split(text)):
        parts.extend(_LINE_BREAKS.split(part) if i % 2 == 0 and len(part) > PIECE_BUDGET else [part])
    places = [i for i in range(0, len(parts), 2) if worth_translating(parts[i])]

    def write(translations: list[str], target_language: str) -> bytes:
        written = list(parts)
        for place, translation in zip(places, translations):
            written[place] = translation
        return "".join(written).encode("utf-8")

    return ReadDocument([Piece(parts[i]) for i in places], write)


def read_srt(data: bytes) -> ReadDocument:
    try:
        cues = list(srt.parse(decoded(data, "SubRip"), ignore_errors=False))
    except srt.SRTParseError as error:
        raise invalid(FILE, f"not a SubRip (srt) file: {error}") from None
    places = [i for i, cue in enumerate(cues) if worth_translating(cue.content)]

    def write(translations: list[str], target_language: str) -> bytes:
        for place, translation in zip(places, translations):
            cues[place].content = translation
        return srt.compose(cues, reindex=False).encode("utf-8")

    return ReadDocument([cue_piece(cues[i].content) for i in places], write)


def read_vtt(data: bytes) -> ReadDocument:
    try:
        captions = webvtt.from_string(decoded(data, "WebVTT"))
    except webvtt.errors.MalformedFileError as error:
        raise invalid(FILE, f"not a WebVTT (vtt) file: {error}") from None
    cues = captions.captions
    places = [i for i, cue in enumerate(cues) if worth_translating(cue.raw_text)]

    def write(translations: list[str], target_language: str) -> bytes:
        for place, translation in zip(places, translations):
            cues[place].text = translation
        return captions.content.encode("utf-8")

    return ReadDocument([cue_piece(cues[i].raw_text) for i in places], write)
