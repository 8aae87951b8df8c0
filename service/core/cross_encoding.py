"""The reranking and classification capabilities of cross-encoders (models with a classification head):
query-document pairs (or single texts) in, through the model's batcher as embeddings go; scores out, by the
checkpoint's activation (or raw logits on request), documents ranked by score, ties by their order."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from ..errors import QueueFull, invalid
from ..ops.call_record import CallRecord
from .registry import ModelRegistry
from .served_models import CrossEncoderModel
from .tokenization import INLINE_CHARACTERS, Tokenization
from .validation import check_text, check_texts

TRUNCATIONS = ("longest_first", "only_document")  # CrossEncoder's default; or the query kept whole


@dataclass(frozen=True)
class RerankRequest:
    model: str
    query: str
    documents: list[str]
    top_n: int | None = None  # the best n; None: all
    return_documents: bool = False
    raw_scores: bool = False  # the logits, without the checkpoint's activation
    truncation: str = "longest_first"  # a pair too long: cut the longer text first, or only the document


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


@dataclass(frozen=True)
class ClassifyRequest:
    model: str
    inputs: list[str]
    raw_scores: bool = False


@dataclass(frozen=True)
class ClassifyResult:
    model: str
    labels: tuple[str, ...]  # the checkpoint's, in its order
    scores: np.ndarray  # (inputs, labels) float32
    prompt_tokens: int


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

    async def _logits(self, model: CrossEncoderModel, ids: list[list[int]]) -> np.ndarray:
        try:
            results = await model.batcher.submit(ids)
        except QueueFull as error:
            raise QueueFull(f"model {model.name!r}: {error}; retry later") from None
        model.metrics.prompt(sum(len(i) for i in ids))
        return np.stack([r.vector for r in results])

    async def _pairs(self, model: CrossEncoderModel, request: RerankRequest) -> list[list[int]]:
        pairs = [(request.query, document) for document in request.documents]
        only_second = request.truncation == "only_document"
        encode = model.tokenizer.encode_pairs
        try:
            if sum(len(q) + len(d) for q, d in pairs) <= INLINE_CHARACTERS:
                encoded = encode(pairs, only_second)
            else:
                loop = asyncio.get_running_loop()
                encoded = await loop.run_in_executor(self.tokenization.executor, encode, pairs, only_second)
        except Exception as error:  # only_document, and the query alone leaves no room
            if not only_second:
                raise
            raise invalid(
                "query", f"too long to leave room for a document in {model.max_input_tokens} tokens ({error})"
            ) from None
        return [e.ids for e in encoded]

    def check_rerank(self, model: CrossEncoderModel, request: RerankRequest) -> None:
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

    async def rerank(self, request: RerankRequest, call: CallRecord) -> RerankResult:
        model = self.registry.get(request.model, "classification", call.rpc)
        call.use_model(model.name)
        self.check_rerank(model, request)
        ids = await self._pairs(model, request)
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
        texts = check_texts(request.inputs, self.max_inputs)
        encoded = await self.tokenization.encode(model, texts)
        ids = [e.ids for e in encoded]
        logits = await self._logits(model, ids)
        scores = logits if request.raw_scores else activated(logits, model.score_activation)
        tokens = sum(len(i) for i in ids)
        call.figures.update(inputs=len(ids), prompt_tokens=tokens)
        return ClassifyResult(model.name, model.labels, scores.astype(np.float32), tokens)
