"""A segment's inline tags put back into its translation: each tag around the words its source words were
translated as (through the token alignment from cross-attention, as Bergamot projects tags), each point
before the translation of the word it stood before. Without an alignment, places are carried over by
their share of the text, at word boundaries. The result is well-formed by construction: a tag nested in
another stays inside it, and siblings that would overlap are laid one after the other."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from .markup import InlinePoint, InlineSpan, TextSegment


@dataclass(frozen=True)
class Link:
    """A target token's characters in the translation, and those of the source token it was aligned with."""

    target_start: int
    target_stop: int
    source_start: int
    source_stop: int


def escape(text: str) -> str:
    return html.escape(text, quote=False)


def trimmed(text: str, start: int, stop: int) -> tuple[int, int]:
    """[start, stop) without the whitespace at its edges (an empty range stays where it starts)."""
    while start < stop and text[start].isspace():
        start += 1
    while stop > start and text[stop - 1].isspace():
        stop -= 1
    return start, stop


class Projection:
    """Places in a segment's plain text mapped to places in its translation."""

    def __init__(self, source: str, target: str, links: Sequence[Link] | None):
        self.source, self.target = source, target
        self.links = None
        if links:  # each link's ranges without their spaces; links whose source is only spaces dropped
            self.links = []
            for link in links:
                s0, s1 = trimmed(source, link.source_start, link.source_stop)
                t0, t1 = trimmed(target, link.target_start, link.target_stop)
                if s1 > s0 and t1 > t0:
                    self.links.append(Link(t0, t1, s0, s1))
            self.links = self.links or None
        self.content = trimmed(target, 0, len(target))

    def _by_share(self, at: int, end: bool = False) -> int:
        """at's place by its share of the text, moved to the nearest word start (end: word end)."""
        lo, hi = self.content
        place = lo + round(at / max(len(self.source), 1) * (hi - lo))
        target = self.target
        if end:
            boundaries = [
                i
                for i in range(lo, hi + 1)
                if i == hi or (i > lo and target[i].isspace() and not target[i - 1].isspace())
            ]
        else:
            boundaries = [
                i
                for i in range(lo, hi + 1)
                if i == lo or (i < hi and not target[i].isspace() and target[i - 1].isspace())
            ]
        return min(boundaries, key=lambda b: (abs(b - place), b))

    @staticmethod
    def _within(link: Link, at: int) -> int:
        """A place inside a link's source token carried to the same share of its target token."""
        share = (at - link.source_start) / (link.source_stop - link.source_start)
        return link.target_start + round(share * (link.target_stop - link.target_start))

    def point(self, at: int) -> int:
        """In the whitespace before or after the text: as far from that edge as it was (a translation keeps
        its source's edges). Inside: before the translation of the first source token at or after `at`
        (inside a token: at its share of the token's translation); past the last, after the last."""
        lo, hi = trimmed(self.source, 0, len(self.source))
        if at <= lo:
            return min(at, self.content[0])
        if at >= hi:
            return max(len(self.target) - (len(self.source) - at), self.content[1])
        if self.links is None:
            return self._by_share(at)
        for link in self.links:
            if link.source_start < at < link.source_stop:
                return self._within(link, at)
        after = [link for link in self.links if link.source_start >= at]
        if after:
            first = min(link.source_start for link in after)
            return min(link.target_start for link in after if link.source_start == first)
        last = max(link.source_stop for link in self.links)
        return max(link.target_stop for link in self.links if link.source_stop == last)

    def span(self, start: int, stop: int) -> tuple[int, int]:
        """Around the translation of every source token inside [start, stop)."""
        start, stop = trimmed(self.source, start, stop)
        if start == stop:
            place = self.point(start)
            return place, place
        if (start, stop) == trimmed(self.source, 0, len(self.source)):
            return self.content
        if self.links is None:
            return self._by_share(start), max(self._by_share(start), self._by_share(stop, end=True))
        inside = [link for link in self.links if link.source_start < stop and link.source_stop > start]
        if not inside:
            place = self.point(start)
            return place, place
        starts = [self._within(link, max(start, link.source_start)) for link in inside]
        stops = [self._within(link, min(stop, link.source_stop)) for link in inside]
        return min(starts), max(stops)


def _render(children: Sequence[InlineSpan | InlinePoint], lo: int, hi: int, projection: Projection) -> str:
    placed = []
    for order, child in enumerate(children):
        if isinstance(child, InlinePoint):
            start = stop = min(max(projection.point(child.at), lo), hi)
        else:
            start, stop = projection.span(child.start, child.stop)
            start = min(max(start, lo), hi)
            stop = min(max(stop, start), hi)
        placed.append((start, stop, order, child))
    out, at = [], lo
    for start, stop, _, child in sorted(placed, key=lambda p: (p[0], p[2])):
        start = max(start, at)
        stop = max(stop, start)
        out.append(escape(projection.target[at:start]))
        if isinstance(child, InlinePoint):
            out.append(child.markup)
        else:
            out.append(child.start_tag + _render(child.children, start, stop, projection) + child.end_tag)
        at = stop
    out.append(escape(projection.target[at:hi]))
    return "".join(out)


def place_tags(segment: TextSegment, translation: str, links: Sequence[Link] | None) -> str:
    """The translation (plain text) with the segment's inline markup placed in it, escaped as markup.
    links: the token alignment over the segment's plain text and this translation (None: by share)."""
    projection = Projection(segment.plain, translation, links)
    return _render(segment.children, 0, len(translation), projection)
