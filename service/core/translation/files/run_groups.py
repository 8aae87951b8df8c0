"""An Office paragraph (WordprocessingML's w:p, DrawingML's a:p) as one piece: its runs of equal formatting
merged into groups, a paragraph of several groups sent as an XML fragment with one element per group, so
that a sentence split over runs is translated whole and each formatting lands on the words it was on."""

from __future__ import annotations

import copy
import html
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

import lxml.etree as etree

from ..markup import XML, MarkupRules
from .pieces import Piece, worth_translating

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
GROUP = "g"  # a group's element in a fragment: g0, g1, ...
# Without outline detection, every element of a fragment is inline: the paragraph is one running text.
FRAGMENT_RULES = MarkupRules(tag_handling=XML, outline_detection=False)


@dataclass(frozen=True)
class RunNames:
    """The qualified names of one markup language's paragraph, run, run text and run properties, and the
    properties that say nothing of a run's look (a spelling mark, a language), left out when comparing."""

    paragraph: str
    run: str
    text: str
    properties: str
    unseen: frozenset[str]  # child elements and attributes of the properties, qualified
    marks_spaces: bool  # a text's edge spaces are kept only where it says so (WordprocessingML's xml:space)


def look(run, names: RunNames) -> bytes:
    """A run's formatting as bytes that are equal for runs that look alike."""
    properties = run.find(names.properties)
    if properties is None:
        return b""
    properties = copy.deepcopy(properties)
    for child in [c for c in properties if c.tag in names.unseen]:
        properties.remove(child)
    for attribute in [a for a in properties.attrib if a in names.unseen]:
        del properties.attrib[attribute]
    return etree.tostring(properties) if len(properties) or properties.attrib else b""


class Paragraph:
    """A paragraph's runs that carry text, in groups of equal formatting."""

    def __init__(self, paragraph, names: RunNames):
        self.names = names
        runs = [
            run
            for run in paragraph.iter(names.run)
            if run.find(names.text) is not None and next(run.iterancestors(names.paragraph), None) is paragraph
        ]
        self.groups: list[list] = []
        previous = None
        for run in runs:
            key = look(run, names)
            if self.groups and key == previous:
                self.groups[-1].append(run)
            else:
                self.groups.append([run])
            previous = key

    def texts(self) -> list[str]:
        return ["".join(t.text or "" for run in group for t in run.iter(self.names.text)) for group in self.groups]

    def piece(self) -> Piece | None:
        """The paragraph to translate (None: nothing in it to translate)."""
        texts = self.texts()
        if not worth_translating("".join(texts)):
            return None
        if len(texts) == 1:
            return Piece(texts[0])
        names = [f"{GROUP}{i}" for i in range(len(texts))]
        fragment = "".join(f"<{n}>{html.escape(t, quote=False)}</{n}>" for n, t in zip(names, texts))
        return Piece(fragment, FRAGMENT_RULES)

    def write(self, translation: str) -> None:
        """Each group's translated words into its first run; the group's other runs emptied. Words that
        came back outside every group's element join the group before them (the first, at the start)."""
        texts = [""] * len(self.groups)
        if len(self.groups) == 1:
            texts[0] = translation
        else:
            try:
                root = ElementTree.fromstring(f"<fragment>{translation}</fragment>")
            except ElementTree.ParseError:  # never for well-formed input; all words kept in the first group
                root = ElementTree.fromstring(f"<fragment>{html.escape(translation, quote=False)}</fragment>")
            last = 0
            texts[0] = root.text or ""
            for element in root:
                number = element.tag[len(GROUP) :]
                last = int(number) if number.isdigit() and int(number) < len(texts) else last
                texts[last] += "".join(element.itertext()) + (element.tail or "")
        for group, text in zip(self.groups, texts):
            places = [t for run in group for t in run.iter(self.names.text)]
            for place in places:
                place.text = ""
            places[0].text = text
            if self.names.marks_spaces and text != text.strip():
                places[0].set(XML_SPACE, "preserve")
