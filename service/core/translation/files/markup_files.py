"""Documents of markup: HTML (whole where it is small, else element by element, each translated with its
inline tags kept through the markup reader) and XLIFF 1.2 and 2.x (each source segment translated, its
inline codes kept, into the unit's target)."""

from __future__ import annotations

import html

import lxml.etree as etree
import lxml.html

from ....errors import invalid
from ..markup import HTML, HTML_UNTRANSLATED, XML, MarkupRules
from .pieces import FILE, PIECE_BUDGET, Piece, ReadDocument, decoded, worth_translating

HTML_RULES = MarkupRules(tag_handling=HTML)
INNER, TEXT, TAIL = "inner", "text", "tail"  # where in an element a large page's piece goes
XLIFF_1, XLIFF_2 = "urn:oasis:names:tc:xliff:document:1.2", "urn:oasis:names:tc:xliff:document:2.0"
# XLIFF 1.2's holders of native code (their text is the original format's markup, never translated).
XLIFF_NATIVE_CODE = frozenset({"ph", "bpt", "ept", "it", "sub"})
# A segment's inline codes stand in running text wherever they are (no outline detection: all inline).
XLIFF_RULES = {
    XLIFF_1: MarkupRules(tag_handling=XML, outline_detection=False, ignore_tags=XLIFF_NATIVE_CODE),
    XLIFF_2: MarkupRules(tag_handling=XML, outline_detection=False),
}


def inner_markup(element, method: str) -> str:
    """An element's content as markup: its text, then every child with its tail."""
    text = html.escape(element.text or "", quote=False)
    return text + "".join(etree.tostring(child, method=method, encoding="unicode") for child in element)


def read_html(data: bytes) -> ReadDocument:
    text = decoded(data, "HTML")
    if len(text) <= PIECE_BUDGET:  # the page whole: its markup reader keeps every byte outside the text
        return ReadDocument([Piece(text, HTML_RULES)], lambda translations, _: translations[0].encode("utf-8"))
    try:
        root = lxml.html.document_fromstring(text)
    except etree.ParserError as error:
        raise invalid(FILE, f"not an HTML file: {error}") from None
    slots = []  # (element, where: INNER its content, TEXT its text, TAIL the text after it), in order
    pieces = []

    def visit(element) -> None:
        if not isinstance(element.tag, str) or element.tag in HTML_UNTRANSLATED:
            return
        content = inner_markup(element, "html")
        if len(content) <= PIECE_BUDGET:
            if worth_translating(element.text_content()):
                slots.append((element, INNER))
                pieces.append(Piece(content, HTML_RULES))
            return
        if worth_translating(element.text or ""):  # too large for one piece: its own text alone, then
            slots.append((element, TEXT))  # its children one by one, each with the text after it
            pieces.append(Piece(element.text))
        for child in element:
            visit(child)
            if worth_translating(child.tail or ""):
                slots.append((child, TAIL))
                pieces.append(Piece(child.tail))

    for part in (root.find("head/title"), root.find("body")):
        if part is not None:
            visit(part)

    def write(translations: list[str], target_language: str) -> bytes:
        root.set("lang", target_language)
        for (element, where), translation in zip(slots, translations):
            if where != INNER:
                setattr(element, where, translation)
                continue
            for child in list(element):
                element.remove(child)
            fragments = lxml.html.fragments_fromstring(translation) if translation.strip() else []
            element.text = fragments.pop(0) if fragments and isinstance(fragments[0], str) else None
            element.extend(fragments)
        return etree.tostring(root.getroottree(), method="html", encoding="unicode").encode("utf-8")

    return ReadDocument(pieces, write)


def read_xliff(data: bytes) -> ReadDocument:
    parser = etree.XMLParser(resolve_entities=False, no_network=True, remove_blank_text=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as error:
        raise invalid(FILE, f"not an XLIFF file: {error}") from None
    namespace = etree.QName(root).namespace
    if namespace not in (XLIFF_1, XLIFF_2):
        raise invalid(FILE, f"not XLIFF 1.2 or 2.x (its namespace is {namespace!r})")
    units = "trans-unit" if namespace == XLIFF_1 else "segment"
    sources = [unit.find(f"{{{namespace}}}source") for unit in root.iter(f"{{{namespace}}}{units}")]
    sources = [source for source in sources if source is not None and worth_translating("".join(source.itertext()))]
    pieces = []
    for source in sources:
        if len(source) == 0:  # no inline codes: plain text
            pieces.append(Piece(source.text or ""))
            continue
        pieces.append(Piece(inner_markup(source, "xml"), XLIFF_RULES[namespace]))

    def write(translations: list[str], target_language: str) -> bytes:
        for source, translation in zip(sources, translations):
            target = source.getparent().find(f"{{{namespace}}}target")
            if target is None:
                target = etree.Element(f"{{{namespace}}}target")
                source.addnext(target)
                target.tail = source.tail
            if len(source) == 0:  # plain text: its translation is text, however it reads
                target[:] = []
                target.text = translation
                continue
            wrapped = etree.fromstring(f'<target xmlns="{namespace}">{translation}</target>', parser)
            target[:] = list(wrapped)
            target.text = wrapped.text
        if namespace == XLIFF_1:
            for file in root.iter(f"{{{XLIFF_1}}}file"):
                file.set("target-language", target_language)
        else:
            root.set("trgLang", target_language)
        etree.cleanup_namespaces(root)
        return etree.tostring(root, xml_declaration=True, encoding="UTF-8")

    return ReadDocument(pieces, write)
