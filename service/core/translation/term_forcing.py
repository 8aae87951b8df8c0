"""A glossary applied to one sentence's translation: every source term found in the sentence (as whole
words, case-insensitively) must come out as its target term. The sentence is translated as usual and
checked; where a term is missing, it is generated again with tokens forced: the translation's own tokens
up to where the term's source words were translated (through the token alignment; by their share of the
text without one), then the target term's tokens, the rest generated freely. Forced tokens are the
engine's own (as a target language's code is), so the continuous batch takes such a row as any other.
Terms are applied in the order they stand in the source, each at most once; a translation that has
every term costs nothing more. A target term the model's vocabulary cannot write (its tokens do not
decode back to it) is not forced."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...engine.logit_rules import LogitRules
from ...engine.sequence import GenerationParams
from ..generation.generation import whole_answer
from ..models.served_models import ServedSeq2SeqModel
from .alignment import token_links, token_ranges
from .glossaries import Term

WORD_STARTS = ("\u2581", "\u0120")


@dataclass(frozen=True, eq=False)
class WordEnds:
    """A logit rule (engine/logit_rules.py) for a row whose forced tokens end with a term: its next token
    starts a word, or is punctuation or the end, so that what the model goes on with does not glue onto
    the term (a number forced as "256" and continued "0": "2560"); where the term ends the source, its
    next token is the end. The row's own rules apply first."""

    at: int  # the row's tokens, its forced ones, after which the rule holds once
    tokens: np.ndarray  # the ids ruled out (only: the ids allowed)
    inner: LogitRules | None = None
    only: bool = False

    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        if self.inner is not None:
            self.inner.apply(logits, tokens)
        if len(tokens) != self.at:
            return
        if self.only:
            allowed = logits[self.tokens].copy()
            logits[:] = -np.inf
            logits[self.tokens] = allowed
        else:
            logits[self.tokens] = -np.inf


@functools.lru_cache(maxsize=16)
def word_continuations(tokenizer, vocab_size: int) -> np.ndarray:
    """The tokens of a vocabulary that go on with a word: a letter or digit first, without the mark of a
    word's start (SentencePiece's "\u2581", byte-level BPE's "\u0120")."""
    pieces = tokenizer.tokens(list(range(vocab_size)))
    return np.array([i for i, p in enumerate(pieces) if p[:1].isalnum() and not p.startswith(WORD_STARTS)], np.int64)


def _words(term: str) -> re.Pattern:
    return re.compile(rf"(?<!\w){re.escape(term)}(?!\w)", re.IGNORECASE)


def occurrences(text: str, terms: Sequence[Term]) -> list[tuple[Term, int, int]]:
    """Each term found in text, in order: (term, start, stop); where two overlap, the one that starts
    first (the longer at one place)."""
    found = [(t, m.start(), m.end()) for t in terms for m in _words(t.source).finditer(text)]
    found.sort(key=lambda f: (f[1], f[1] - f[2]))
    kept, end = [], -1
    for term, start, stop in found:
        if start >= end:
            kept.append((term, start, stop))
            end = stop
    return kept


def present(text: str, term: Term) -> bool:
    return _words(term.target).search(text) is not None


async def _place(model, source: tuple[str, list[int]], target: tuple[str, list[int]], span, codes) -> int:
    """Where in the translation the source characters `span` were translated: the first character of the
    earliest target token aligned with them (by share of the text without an alignment)."""
    (piece, _), (text, _) = source, target
    start, stop = span
    links = await token_links(model, source, target, codes)
    inside = [link.target_start for link in links if link.source_start < stop and link.source_stop > start]
    if inside:
        return min(inside)
    return round(len(text) * start / max(len(piece), 1))


async def with_terms(
    model: ServedSeq2SeqModel,
    piece: str,
    ids: list[int],
    params: GenerationParams,
    answer: tuple[str, list[int], object],
    terms: Sequence[Term],
    *,
    codes: set[int],
) -> tuple[str, list[int], object]:
    """answer: (text, token ids, last event) of the sentence's translation -> the same with every term
    found in `piece` present, generated again with its tokens forced where one was missing."""
    text, content, last = answer
    decode = model.tokenizer.decode
    for term, start, stop in occurrences(piece, terms):
        term_ids = model.tokenizer.encode_target(term.target).ids
        if present(text, term) or not present(decode(term_ids), term):
            continue  # there already, or not a text this model's vocabulary can write
        target_ids = [model.special.bos, *params.forced_tokens, *content]
        place = await _place(model, (piece, ids), (text, target_ids), (start, stop), codes)
        before = sum(1 for _, end in token_ranges(decode, content, text) if end <= place)
        forced = content[:before] + term_ids
        forced_tokens = params.forced_tokens + tuple(forced)
        rules = params.rules
        if not piece[stop:].strip():  # the term ends the source: it ends the translation
            rules = WordEnds(len(forced_tokens), np.array([model.special.eos]), rules, only=True)
        elif " " in text and term.target[-1:].isalnum():  # a language of spaces: the term ends a word
            continuations = word_continuations(model.tokenizer, model.architecture.vocab_size)
            rules = WordEnds(len(forced_tokens), continuations, rules)
        again = dataclasses.replace(
            params,
            forced_tokens=forced_tokens,
            max_new_tokens=max(params.max_new_tokens - len(forced), 1),  # the row's positions, as before
            rules=rules,
        )
        _, new_ids, last = await whole_answer(model, ids, again)
        content = forced + list(new_ids)
        text = decode(content).strip()  # as a whole answer's text: the piece's edges are kept apart
    return text, content, last
