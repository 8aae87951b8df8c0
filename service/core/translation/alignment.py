"""Word alignment between a sentence and its translation, from the model's cross-attention: the
translation read back through the attention-map graph (teacher forcing), the heads of one decoder layer
averaged, and each target word aligned with the source word its tokens attended to most when they were
generated. The layer is the last but one, where an unsupervised Transformer's attention agrees best with
human alignments (Garg et al. 2019, "Jointly Learning to Align and Translate with Transformer Models").
Pairs are Pharaoh's "i-j": (source word, target word), 0-based."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from ...errors import FailedPrecondition
from ..attention.maps import CROSS
from ..models.served_models import ServedModel

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


def align(weights: np.ndarray, source_word: list[int], target_word: list[int]) -> list[tuple[int, int]]:
    """weights (target positions, source positions): the attention of the decoder position that generated
    each target token (the position before it). -> the (source word, target word) pairs."""
    sources = np.array(source_word) >= 0
    pairs = set()
    for t, word in enumerate(target_word):
        if word < 0 or t == 0:
            continue
        scores = np.where(sources, weights[t - 1], -np.inf)  # the step whose output was token t
        pairs.add((source_word[int(np.argmax(scores))], word))
    return sorted(pairs, key=lambda pair: (pair[1], pair[0]))


def alignment_layer(model: ServedModel) -> int:
    return max(model.architecture.n_decoder_layers - 2, 0)


async def sentence_alignment(
    model: ServedModel, source_ids: list[int], target_ids: list[int], extra_special: set[int]
) -> SentenceAlignment:
    """target_ids: the decoder's tokens, its start token first (and a target language's code), then the
    translation's. extra_special: language codes, which align with nothing."""
    if model.attention is None:
        raise FailedPrecondition(
            "return_alignment: alignments come from the attention-map graphs, which this server has not loaded; "
            "start it with --attention-maps (ATTNSERVE_ATTENTION_MAPS=1)",
            "return_alignment",
        )
    layer = alignment_layer(model)
    running = model.attention.submit(
        source_ids, target_ids, {CROSS: [layer]}, positions=len(source_ids) + len(target_ids)
    )
    maps = await asyncio.shield(running)
    weights = maps.weights[CROSS][0].mean(axis=0)  # (heads, T, S) -> (T, S)
    special = model.special.of(True) | extra_special
    tokens = model.tokenizer.tokens
    source_words, source_word = words_of(tokens(source_ids), [i in special for i in source_ids])
    target_words, target_word = words_of(tokens(target_ids), [i in special for i in target_ids])
    pairs = align(weights, source_word, target_word)
    return SentenceAlignment(tuple(source_words), tuple(target_words), tuple(pairs))
