"""Word alignment between a sentence and its translation, from the model's cross-attention: the
translation read back through the attention-map graph (teacher forcing), the heads of one decoder layer
averaged, and each target word aligned with the source word its tokens attended to most when they were
generated, at the last layer but one (runner/cross_attention.py says why).
Pairs are Pharaoh's "i-j": (source word, target word), 0-based."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...errors import FailedPrecondition
from ...runner.cross_attention import alignment_layer as decoder_alignment_layer
from ..models.served_models import ServedModel
from .tag_projection import Link

WORD_STARTS = ("\u2581", "\u0120")  # SentencePiece's and byte-level BPE's marks of a word's first token
CONTINUES = "##"  # WordPiece's mark of a word's later token


@dataclass(frozen=True)
class SentenceAlignment:
    source_words: tuple[str, ...]
    target_words: tuple[str, ...]
    pairs: tuple[tuple[int, int], ...]  # (source word, target word), by target word then source word


def words_of(tokens: list[str], special: list[bool]) -> tuple[list[str], list[int]]:
    """Tokens grouped into words: -> the words (their tokens' text, marks dropped) and each token's word
    (-1 for a special token)."""
    marked = any(t.startswith(WORD_STARTS) for t, s in zip(tokens, special) if not s)
    words: list[str] = []
    word_of: list[int] = []
    for token, is_special in zip(tokens, special):
        if is_special:
            word_of.append(-1)
            continue
        starts = token.startswith(WORD_STARTS) if marked else not token.startswith(CONTINUES)
        text = token.lstrip("".join(WORD_STARTS)) if marked else token.removeprefix(CONTINUES)
        if starts or not words:
            words.append(text)
        else:
            words[-1] += text
        word_of.append(len(words) - 1)
    return words, word_of


def aligned_sources(weights: np.ndarray, source_special: list[bool], target_special: list[bool]) -> list[int]:
    """weights (target positions, source positions): the attention of the decoder position that generated
    each target token (the position before it). -> each target position's source position (-1: none)."""
    sources = ~np.array(source_special, dtype=bool)
    aligned = []
    for t, special in enumerate(target_special):
        if special or t == 0:
            aligned.append(-1)
            continue
        scores = np.where(sources, weights[t - 1], -np.inf)  # the step whose output was token t
        aligned.append(int(np.argmax(scores)))
    return aligned


def align(weights: np.ndarray, source_word: list[int], target_word: list[int]) -> list[tuple[int, int]]:
    """-> the (source word, target word) pairs of the tokens' alignment."""
    aligned = aligned_sources(weights, [w < 0 for w in source_word], [w < 0 for w in target_word])
    pairs = {(source_word[s], target_word[t]) for t, s in enumerate(aligned) if s >= 0}
    return sorted(pairs, key=lambda pair: (pair[1], pair[0]))


def alignment_layer(model: ServedModel) -> int:
    return decoder_alignment_layer(model.architecture.n_decoder_layers)


async def sentence_alignment(
    model: ServedModel, source_ids: list[int], target_ids: list[int], extra_special: set[int]
) -> SentenceAlignment:
    """target_ids: the decoder's tokens, its start token first (and a target language's code), then the
    translation's. extra_special: language codes, which align with nothing."""
    if model.attention is None:
        raise FailedPrecondition(
            "return_alignment: alignments come from the attention-map graphs, which this server has not loaded; "
            "start it with --tag-alignment (the default) or --attention-maps",
            "return_alignment",
        )
    weights = await cross_attention(model, source_ids, target_ids)
    special = model.special.of(True) | extra_special
    tokens = model.tokenizer.tokens
    source_words, source_word = words_of(tokens(source_ids), [i in special for i in source_ids])
    target_words, target_word = words_of(tokens(target_ids), [i in special for i in target_ids])
    pairs = align(weights, source_word, target_word)
    return SentenceAlignment(tuple(source_words), tuple(target_words), tuple(pairs))


async def cross_attention(model: ServedModel, source_ids: list[int], target_ids: list[int]) -> np.ndarray:
    """The alignment layer's cross-attention, its heads averaged: (target positions, source positions).
    Passes asked for together run as one batch."""
    item = (source_ids, target_ids, alignment_layer(model))
    return await model.attention.gathered_run(item, positions=len(source_ids) + len(target_ids))


def token_ranges(decode: Callable[[list[int]], str], ids: list[int], text: str) -> list[tuple[int, int]]:
    """Each token's characters in text, from the lengths of its decoded prefixes (scaled to text's length
    where the decoding differs from it, as a normalizing tokenizer's may)."""
    ends = [len(decode(ids[: k + 1])) for k in range(len(ids))]
    scale = len(text) / ends[-1] if ids and ends[-1] else 1.0
    ends = [min(round(end * scale), len(text)) for end in ends]
    return list(zip([0, *ends[:-1]], ends))


async def token_links(
    model: ServedModel, source: tuple[str, list[int]], target: tuple[str, list[int]], extra_special: set[int]
) -> list[Link]:
    """source, target: a sentence and its translation, each as (text, the ids the model took or made, the
    decoder's start token first). -> each target token's characters and its aligned source token's."""
    if model.attention is None:
        return []
    (source_text, source_ids), (target_text, target_ids) = source, target
    weights = await cross_attention(model, source_ids, target_ids)
    special = model.special.of(True) | extra_special
    source_content = [i for i, token in enumerate(source_ids) if token not in special]
    target_content = [i for i, token in enumerate(target_ids) if token not in special]
    decode = model.tokenizer.decode
    source_chars = dict(zip(source_content, token_ranges(decode, [source_ids[i] for i in source_content], source_text)))
    target_chars = dict(zip(target_content, token_ranges(decode, [target_ids[i] for i in target_content], target_text)))
    aligned = aligned_sources(weights, [i in special for i in source_ids], [i in special for i in target_ids])
    links = []
    for t, s in enumerate(aligned):
        if s >= 0 and t in target_chars and s in source_chars:
            links.append(Link(*target_chars[t], *source_chars[s]))
    return links
