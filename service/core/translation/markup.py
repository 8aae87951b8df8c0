"""A text with markup (XML or HTML) cut into the segments a translation takes, each its plain text with its
inline tags as spans and points over that text, and put back together around their translations.

Block tags (and DeepL's splitting_tags) end a segment; inline tags (and non_splitting_tags) stay inside
one, so a sentence with a bold word is translated whole. Elements not to translate (ignore_tags, script,
style, code, translate="no", class="notranslate") are carried verbatim: inside a segment as a point,
between segments as they stood. The tags' own text (attributes, quoting, case) is kept as it was sent.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from html.parser import HTMLParser

from ...errors import invalid

XML, HTML = "xml", "html"
TAG_HANDLINGS = (XML, HTML)
# DeepL's own message for markup its parser refuses.
PARSING_FAILED = "Tag handling parsing failed, please check input."

# HTML elements that start a new segment (flow content that is not phrasing content), and br.
HTML_BLOCKS = frozenset(
    "address article aside blockquote body br caption dd details dialog div dl dt fieldset figcaption figure "
    "footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html li main nav ol option p section summary table "
    "tbody td tfoot th thead title tr ul".split()
)
HTML_VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())
# Do-not-translate spans in any markup: <dnt>, as translation tools and CAT tools' exports mark them.
DO_NOT_TRANSLATE = frozenset({"dnt"})
HTML_UNTRANSLATED = frozenset("script style code pre kbd samp var textarea svg math noscript template".split())
_NAME = re.compile(r"<\s*/?\s*([^\s/>]+)")


@dataclass(frozen=True, kw_only=True)
class MarkupRules:
    """How a call's markup is read: DeepL's tag-handling options."""

    tag_handling: str  # xml or html
    outline_detection: bool = True  # xml: an element that stands apart from running text is a block
    splitting_tags: frozenset[str] = frozenset()
    non_splitting_tags: frozenset[str] = frozenset()
    ignore_tags: frozenset[str] = frozenset()


@dataclass
class Element:
    name: str
    start: str  # its start tag as sent
    end: str = ""  # its end tag as sent ("" for a void or self-closing element, or one never closed)
    attributes: dict[str, str | None] = field(default_factory=dict)
    children: list[Element | Text | Raw] = field(default_factory=list)

    def raw(self) -> str:
        return self.start + "".join(child.raw() for child in self.children) + self.end


@dataclass
class Text:
    source: str  # as sent (entities written as they were)

    def raw(self) -> str:
        return self.source

    @property
    def plain(self) -> str:
        return html.unescape(self.source)


@dataclass
class Raw:
    """A comment, processing instruction, declaration or CDATA section: carried verbatim."""

    source: str

    def raw(self) -> str:
        return self.source


@dataclass(frozen=True)
class InlineSpan:
    """An inline element over [start, stop) of its segment's plain text; its spans and points inside."""

    start_tag: str
    end_tag: str
    start: int
    stop: int
    children: tuple[InlineSpan | InlinePoint, ...]


@dataclass(frozen=True)
class InlinePoint:
    """Markup that stands at one place in a segment's plain text: a void element, an untranslated one."""

    markup: str
    at: int


@dataclass
class TextSegment:
    """One run of text between block boundaries: its plain text and its inline markup over it."""

    plain: str
    children: tuple[InlineSpan | InlinePoint, ...]
    raw: str  # as sent, for a segment with nothing to translate

    @property
    def translatable(self) -> bool:
        return bool(self.plain.strip())

    @property
    def tagged(self) -> bool:
        return bool(self.children)


@dataclass
class Markup:
    """Kept markup (str) and places for translated segments (their index in `segments`), in order."""

    parts: list[str | int]
    segments: list[TextSegment]

    def assemble(self, translated: list[str]) -> str:
        """translated: each segment's translation with its markup (a segment not translated: its raw)."""
        return "".join(part if isinstance(part, str) else translated[part] for part in self.parts)


class _Lexer(HTMLParser):
    """Markup as a tree of elements, texts and raw parts, each holding the exact text it was sent as."""

    def __init__(self, text: str, case_sensitive: bool):
        super().__init__(convert_charrefs=False)
        self.text, self.case_sensitive = text, case_sensitive
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\n", text)]
        self.root = Element("", "")
        self.stack = [self.root]
        self.events: list[tuple[int, str, object]] = []  # (offset, kind, detail), in order

    def _offset(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def _name(self, offset: int) -> str:
        match = _NAME.match(self.text, offset)
        name = match.group(1) if match else ""
        return name if self.case_sensitive else name.lower()

    def handle_starttag(self, tag, attrs):
        self.events.append((self._offset(), "start", dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.events.append((self._offset(), "empty", dict(attrs)))

    def handle_endtag(self, tag):
        self.events.append((self._offset(), "end", None))

    def handle_data(self, data):
        self.events.append((self._offset(), "text", None))

    handle_entityref = handle_charref = handle_data

    def _raw(self, data):
        self.events.append((self._offset(), "raw", None))

    handle_comment = handle_decl = handle_pi = unknown_decl = _raw

    def tree(self) -> Element:
        self.feed(self.text)
        self.close()
        offsets = [offset for offset, _, _ in self.events] + [len(self.text)]
        for (offset, kind, detail), stop in zip(self.events, offsets[1:]):
            self._place(kind, self.text[offset:stop], detail, offset)
        return self.root

    def _place(self, kind: str, source: str, detail, offset: int) -> None:
        parent = self.stack[-1]
        if kind == "text":
            if parent.children and isinstance(parent.children[-1], Text):
                parent.children[-1].source += source
            else:
                parent.children.append(Text(source))
        elif kind == "raw":
            parent.children.append(Raw(source))
        elif kind == "empty":
            parent.children.append(Element(self._name(offset), source, attributes=detail))
        elif kind == "start":
            element = Element(self._name(offset), source, attributes=detail)
            parent.children.append(element)
            if self.case_sensitive or element.name not in HTML_VOID:
                self.stack.append(element)
        else:
            self._close(self._name(offset), source)

    def _close(self, name: str, source: str) -> None:
        """An end tag closes its open element and any left open inside it; a stray one is kept as text."""
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].name == name:
                self.stack[depth].end = source
                del self.stack[depth:]
                return
        self.stack[-1].children.append(Raw(source))


def _untranslated(element: Element, rules: MarkupRules) -> bool:
    if element.name in rules.ignore_tags:
        return True
    if (element.attributes.get("translate") or "").lower() == "no":
        return True
    if "notranslate" in (element.attributes.get("class") or "").split():
        return True
    if element.name in DO_NOT_TRANSLATE:
        return True
    return rules.tag_handling == HTML and element.name in HTML_UNTRANSLATED


class _Classes:
    """Each element's role: untranslated, block (ends segments) or inline."""

    def __init__(self, root: Element, rules: MarkupRules):
        self.rules, self.blocks, self.skipped = rules, set(), set()
        self._walk(root, in_running_text=False)

    def _walk(self, element: Element, in_running_text: bool) -> bool:
        """-> whether the element is a block."""
        if element.name and _untranslated(element, self.rules):
            self.skipped.add(id(element))
            return False
        running = any(isinstance(c, Text) and c.plain.strip() for c in element.children)
        has_block = False
        for child in element.children:
            if isinstance(child, Element):
                has_block |= self._walk(child, running)
        rules, name = self.rules, element.name
        if has_block or not name or name in rules.splitting_tags:
            block = True
        elif name in rules.non_splitting_tags:
            block = False
        elif rules.tag_handling == HTML:
            block = name in HTML_BLOCKS
        else:
            block = rules.outline_detection and not in_running_text
        if block:
            self.blocks.add(id(element))
        return block


class _SegmentBuilder:
    """The inline content of one segment as it is walked: its plain text, spans and points."""

    def __init__(self):
        self.plain: list[str] = []
        self.raw: list[str] = []
        self.length = 0
        self.levels: list[list[InlineSpan | InlinePoint]] = [[]]

    def text(self, node: Text) -> None:
        plain = node.plain
        self.plain.append(plain)
        self.raw.append(node.source)
        self.length += len(plain)

    def point(self, markup: str) -> None:
        self.raw.append(markup)
        self.levels[-1].append(InlinePoint(markup, self.length))

    def open(self, element: Element) -> int:
        self.raw.append(element.start)
        self.levels.append([])
        return self.length

    def close(self, element: Element, start: int) -> None:
        self.raw.append(element.end)
        children = tuple(self.levels.pop())
        self.levels[-1].append(InlineSpan(element.start, element.end, start, self.length, children))

    def segment(self) -> TextSegment | None:
        if not self.raw:
            return None
        return TextSegment("".join(self.plain), tuple(self.levels[0]), "".join(self.raw))


class _Splitter:
    def __init__(self, classes: _Classes):
        self.classes = classes
        self.markup = Markup([], [])
        self.current = _SegmentBuilder()

    def flush(self) -> None:
        segment = self.current.segment()
        self.current = _SegmentBuilder()
        if segment is None:
            return
        if segment.translatable:
            self.markup.parts.append(len(self.markup.segments))
            self.markup.segments.append(segment)
        else:
            self.markup.parts.append(segment.raw)

    def walk(self, element: Element) -> None:
        for child in element.children:
            if isinstance(child, Text):
                self.current.text(child)
            elif isinstance(child, Raw) or id(child) in self.classes.skipped:
                self.current.point(child.raw())
            elif id(child) in self.classes.blocks:
                self.flush()
                self.markup.parts.append(child.start)
                self.walk(child)
                self.flush()
                self.markup.parts.append(child.end)
            elif not child.children and not child.end:
                self.current.point(child.start)  # void, self-closing or never closed and empty
            else:
                start = self.current.open(child)
                self.walk(child)
                self.current.close(child, start)


def check_xml(text: str) -> None:
    """Strict XML (a fragment: several roots and text between them allowed), refused with DeepL's message."""
    try:
        ElementTree.fromstring(f"<attnserve-fragment>{text}</attnserve-fragment>")
    except ElementTree.ParseError:
        raise invalid("tag_handling", PARSING_FAILED) from None


def parse_markup(text: str, rules: MarkupRules) -> Markup:
    """The text's segments and the markup kept around them."""
    if rules.tag_handling == XML:
        check_xml(text)
    root = _Lexer(text, case_sensitive=rules.tag_handling == XML).tree()
    splitter = _Splitter(_Classes(root, rules))
    splitter.walk(root)
    splitter.flush()
    return splitter.markup
