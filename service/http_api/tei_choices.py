"""What TEI's routes share: the model a route answers with where the body names none, TEI's scores of a
classifier's logits, its labelled answers, and its x-compute-* timing headers."""

from __future__ import annotations

import time

import numpy as np

from ..core.embedding.embeddings import EmbedResult
from ..core.ranking.zero_shot import is_entailment
from ..core.serving import ServingCore
from ..errors import NotFound


def timing_headers(result: EmbedResult | None, started: float, tokens: int, characters: int) -> dict[str, str]:
    """TEI's x-compute-* and per-stage times (milliseconds)."""
    took = str(round((time.perf_counter() - started) * 1000))
    headers = {
        "x-compute-type": "cpu+attnserve",
        "x-compute-time": took,
        "x-total-time": took,
        "x-compute-tokens": str(tokens),
        "x-compute-characters": str(characters),
    }
    if result is not None:
        u = result.usage
        headers.update(
            {
                "x-tokenization-time": str(round(u.tokenization_seconds * 1000)),
                "x-queue-time": str(round(u.queue_seconds * 1000)),
                "x-inference-time": str(round(u.inference_seconds * 1000)),
            }
        )
    return headers


def characters(inputs) -> int:
    """TEI's x-compute-characters: a text's characters, token ids' count."""
    items = [inputs] if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)) else inputs
    return sum(len(item) for item in items)


KINDS = {
    "one": ("reranker (a cross-encoder of one label)", lambda labels: len(labels) == 1),
    "several": ("classifier of several labels", lambda labels: len(labels) > 1),
    "entailment": ("NLI classifier (a label of entailment)", lambda labels: any(map(is_entailment, labels))),
}


def classifier(core: ServingCore, name: str, labels: str) -> str:
    """The model a TEI route asks for: the named one; else the first cross-encoder of one label (a reranker,
    labels "one") or of several (a classifier), as TEI tells them apart, or (zero-shot) an NLI classifier."""
    if name:
        return name
    kind, fits = KINDS[labels]
    for model in core.models():
        if model.task == "classification" and fits(model.labels):
            return model.name
    raise NotFound(f"model: no {kind} is served", "model")


def giving(core: ServingCore, name: str, output: str) -> str:
    """The model an embedding route asks for: the named one; else the default embedding model where it
    gives `output`, else the first that does."""
    if name:
        return name
    models = [m for m in core.models() if m.task == "embedding" and output in m.outputs]
    if not models:
        raise NotFound(f"model: no served model gives {output} vectors", "model")
    return next((m.name for m in models if m.is_default), models[0].name)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def tei_scores(logits: np.ndarray, function: str | None = None) -> np.ndarray:
    """(N, labels) logits -> TEI's scores: a softmax of several labels, a sigmoid of one (or `function`)."""
    function = function or ("softmax" if logits.shape[1] > 1 else "sigmoid")
    if function == "softmax":
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    return sigmoid(logits) if function == "sigmoid" else logits


def labelled(labels: tuple[str, ...], scores: np.ndarray, top_k: int | None = None) -> list[dict]:
    order = sorted(range(len(labels)), key=lambda i: (-float(scores[i]), i))[:top_k]
    return [{"score": float(scores[i]), "label": labels[i]} for i in order]
