"""The reranking and classification capabilities of cross-encoders (models with a classification head):
query-document pairs (or single texts) in, through the model's batcher as embeddings go; scores out, by the
checkpoint's activation (or raw logits on request), documents ranked by score, ties by their order."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

import numpy as np

from modeldir.tokenizer import Encoded

from ...errors import QueueFull, invalid
from ...ops.call_record import CallRecord
from ..calls.tokenization import INLINE_CHARACTERS, Tokenization
from ..calls.validation import check_text, check_texts
from ..models.registry import ModelRegistry
from ..models.served_models import ServedCrossEncoder
from .zero_shot import DEFAULT_TEMPLATE, entailment_index, hypotheses, zero_shot_scores

TRUNCATIONS = ("longest_first", "only_document")  # CrossEncoder's default; or the query kept whole


@dataclass(frozen=True, kw_only=True)
class RerankRequest:
    model: str
    query: str
    documents: list[str]
    top_n: int | None = None  # the best n; None: all
    return_documents: bool = False
    raw_scores: bool = False  # the logits, without the checkpoint's activation
    truncation: str = "longest_first"  # a pair too long: cut the longer text first, or only the document
    truncate: bool = True  # False: a pair too long is refused, not cut
    truncation_direction: str = "right"  # where a text is cut: at its end, or its start ("left")


@dataclass(frozen=True)
class Ranked:
    index: int  # the document's place in the request
    score: float
    document: str | None  # with return_documents


@dataclass(frozen=True)
class RerankResult:
    model: str
    results: list[Ranked]  # best first; equal scores in the documents' order
    prompt_tokens: int


@dataclass(frozen=True, kw_only=True)
class ClassifyRequest:
    model: str
    inputs: list[str | tuple[str, str]]  # texts, or pairs of texts framed as the checkpoint frames a pair
    raw_scores: bool = False
    truncate: bool = True  # False: an input too long is refused, not cut
    truncation_direction: str = "right"
    # Zero-shot (an NLI classifier): each text scored against these labels, not the checkpoint's; with
    # raw_scores, each label's entailment logit.
    candidate_labels: tuple[str, ...] | None = None  # None: classified by the model's own labels
    hypothesis_template: str = DEFAULT_TEMPLATE
    multi_label: bool = False  # each label true or not on its own, not one of them


@dataclass(frozen=True)
class ClassifyResult:
    model: str
    labels: tuple[str, ...]  # the checkpoint's, in its order; or the candidate labels, in the request's
    scores: np.ndarray  # (inputs, labels) float32
    prompt_tokens: int


def check_direction(direction: str) -> None:
    if direction not in ("right", "left"):
        raise invalid("truncation_direction", f"{direction!r}; right or left")


def check_classify_inputs(inputs: list[str | tuple[str, str]], limit: int) -> list[str | tuple[str, str]]:
    """1 to `limit` inputs, each a text or a pair of texts, none empty."""
    check_texts([item if isinstance(item, str) else "pair" for item in inputs], limit)
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            continue
        if len(item) != 2:
            raise invalid(f"inputs[{i}]", f"a pair is two texts, not {len(item)}")
        for j, text in enumerate(item):
            check_text(f"inputs[{i}][{j}]", text)
    return inputs


def activated(logits: np.ndarray, activation: str) -> np.ndarray:
    """(N, labels) logits through CrossEncoder's activation_fn."""
    if activation == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    if activation == "softmax":
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    return logits


class CrossEncoding:
    def __init__(self, registry: ModelRegistry, tokenization: Tokenization, max_documents: int, max_inputs: int):
        self.registry, self.tokenization = registry, tokenization
        self.max_documents, self.max_inputs = max_documents, max_inputs

    async def _logits(self, model: ServedCrossEncoder, ids: list[list[int]]) -> np.ndarray:
        try:
            results = await model.batcher.submit(ids)
        except QueueFull as error:
            raise QueueFull(f"model {model.name!r}: {error}; retry later") from None
        model.metrics.prompt(sum(len(i) for i in ids))
        return np.stack([r.vector for r in results])

    async def _pairs(
        self, model: ServedCrossEncoder, pairs: list[tuple[str, str]], truncation: str = "longest_first", left=False
    ) -> list[Encoded]:
        encode = functools.partial(model.tokenizer.encode_pairs, truncation=truncation, truncate_left=left)
        try:
            if sum(len(q) + len(d) for q, d in pairs) <= INLINE_CHARACTERS:
                return encode(pairs)
            return await asyncio.get_running_loop().run_in_executor(self.tokenization.executor, encode, pairs)
        except Exception as error:  # one text cut alone, and the other leaves it no room
            if truncation == "longest_first":
                raise
            kept, cut = ("query", "a document") if truncation == "only_second" else ("hypothesis_template", "a text")
            raise invalid(
                kept, f"too long to leave room for {cut} in {model.max_input_tokens} tokens ({error})"
            ) from None

    @staticmethod
    def _check_length(model: ServedCrossEncoder, encoded: list[Encoded], truncate: bool, field: str) -> None:
        if truncate:
            return
        for i, e in enumerate(encoded):
            if e.truncated:
                raise invalid(
                    f"{field}[{i}]",
                    f"more than {model.max_input_tokens} tokens, the most model {model.name!r} takes; "
                    "shorten it or set truncate to true",
                )

    def check_rerank(self, model: ServedCrossEncoder, request: RerankRequest) -> None:
        if len(model.labels) != 1:
            raise invalid(
                "model", f"{model.name!r} is a classifier of {len(model.labels)} labels; Rerank needs one of one label"
            )
        check_text("query", request.query)
        if not request.documents:
            raise invalid("documents", f"empty; send 1 to {self.max_documents} documents")
        if len(request.documents) > self.max_documents:
            count = len(request.documents)
            raise invalid(
                "documents", f"{count} documents; at most {self.max_documents} per call (rerank_max_documents)"
            )
        for i, document in enumerate(request.documents):
            check_text(f"documents[{i}]", document)
        if request.top_n is not None and request.top_n < 1:
            raise invalid("top_n", f"{request.top_n}; at least 1")
        if request.truncation not in TRUNCATIONS:
            raise invalid("truncation", f"{request.truncation!r}; one of {', '.join(TRUNCATIONS)}")
        check_direction(request.truncation_direction)

    async def rerank(self, request: RerankRequest, call: CallRecord) -> RerankResult:
        model = self.registry.get(request.model, "classification", call.rpc)
        call.use_model(model.name)
        self.check_rerank(model, request)
        pairs = [(request.query, document) for document in request.documents]
        truncation = "only_second" if request.truncation == "only_document" else "longest_first"
        encoded = await self._pairs(model, pairs, truncation, request.truncation_direction == "left")
        self._check_length(model, encoded, request.truncate, "documents")
        ids = [e.ids for e in encoded]
        logits = await self._logits(model, ids)
        scores = logits[:, 0] if request.raw_scores else activated(logits, model.score_activation)[:, 0]
        order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))[: request.top_n or len(scores)]
        results = [
            Ranked(i, float(scores[i]), request.documents[i] if request.return_documents else None) for i in order
        ]
        tokens = sum(len(i) for i in ids)
        call.figures.update(inputs=len(ids), prompt_tokens=tokens)
        return RerankResult(model.name, results, tokens)

    async def classify(self, request: ClassifyRequest, call: CallRecord) -> ClassifyResult:
        model = self.registry.get(request.model, "classification", call.rpc)
        call.use_model(model.name)
        inputs = check_classify_inputs(request.inputs, self.max_inputs)
        check_direction(request.truncation_direction)
        if request.candidate_labels is not None:
            return await self._zero_shot(model, request, inputs, call)
        left = request.truncation_direction == "left"
        texts = [item for item in inputs if isinstance(item, str)]
        encoded_texts = iter(await self.tokenization.encode(model, texts, truncate_left=left))
        encoded_pairs = iter(
            await self._pairs(model, [item for item in inputs if not isinstance(item, str)], left=left)
        )
        encoded = [next(encoded_texts if isinstance(item, str) else encoded_pairs) for item in inputs]
        self._check_length(model, encoded, request.truncate, "inputs")
        ids = [e.ids for e in encoded]
        logits = await self._logits(model, ids)
        scores = logits if request.raw_scores else activated(logits, model.score_activation)
        tokens = sum(len(i) for i in ids)
        call.figures.update(inputs=len(ids), prompt_tokens=tokens)
        return ClassifyResult(model.name, model.labels, scores.astype(np.float32), tokens)

    async def _zero_shot(
        self, model: ServedCrossEncoder, request: ClassifyRequest, inputs: list, call: CallRecord
    ) -> ClassifyResult:
        """Each text against each candidate label's hypothesis, as one batch of pairs (zero_shot.py)."""
        entailment = entailment_index(model.name, model.labels)
        if any(not isinstance(item, str) for item in inputs):
            raise invalid("inputs", "zero-shot classification takes texts, not pairs (the labels make the pairs)")
        candidates = list(request.candidate_labels)
        filled = hypotheses(request.hypothesis_template, candidates, self.max_documents)
        if len(inputs) * len(filled) > self.max_documents:
            raise invalid(
                "candidate_labels",
                f"{len(inputs)} texts x {len(filled)} labels = {len(inputs) * len(filled)} pairs; at most "
                f"{self.max_documents} per call (rerank_max_documents)",
            )
        pairs = [(text, hypothesis) for text in inputs for hypothesis in filled]
        # The pipeline cuts the premise only, so that every hypothesis is read whole.
        encoded = await self._pairs(model, pairs, "only_first", request.truncation_direction == "left")
        groups = [encoded[i : i + len(filled)] for i in range(0, len(encoded), len(filled))]  # a text's pairs
        self._check_length(model, [max(g, key=lambda e: e.truncated) for g in groups], request.truncate, "inputs")
        ids = [e.ids for e in encoded]
        logits = (await self._logits(model, ids)).reshape(len(inputs), len(filled), -1)
        scores = (
            logits[..., entailment] if request.raw_scores else zero_shot_scores(logits, entailment, request.multi_label)
        )
        tokens = sum(len(i) for i in ids)
        call.figures.update(inputs=len(ids), prompt_tokens=tokens)
        return ClassifyResult(model.name, tuple(candidates), scores.astype(np.float32), tokens)
