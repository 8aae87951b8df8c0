"""The embeddings capability: texts in, one vector per text out (and, from the same pass, the sparse and
multi-vector outputs a model's heads give), through the model's batcher; each text after the prompt its
request names (by name, or by Cohere's input type), cut at the end or the start."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...errors import QueueFull, invalid
from ...ops.call_record import CallRecord
from ..calls.tokenization import Tokenization
from ..calls.validation import check_dimensions, check_inputs
from ..models.registry import ModelRegistry
from .outputs import (
    SparseVector,
    check_embedding_type,
    check_outputs,
    graph_output,
    multi_vector,
    quantized,
    sparse_of,
)


@dataclass(frozen=True, kw_only=True)
class EmbedRequest:
    model: str
    inputs: list[str | list[int]]  # texts, or the model's token ids (special tokens included as given)
    normalize: bool | None = None  # None: the model's default (L2-normalised unless it says otherwise)
    truncate: bool = True  # cut texts longer than the model takes; False: refuse them
    dimensions: int | None = None  # keep the first n values of each vector (Matryoshka), normalised after; None: all
    prompt_name: str | None = None  # one of the model's prompts; None: its default prompt, if it has one
    input_type: str | None = None  # Cohere's: search_query, search_document, classification, clustering
    truncation_direction: str = "right"  # where a text too long is cut: "right" (its end) or "left"
    outputs: tuple[str, ...] = ()  # any of dense, sparse, multi_vector, token_embeddings; (): the model's first
    embedding_type: str = "float"  # of dense vectors and multi-vectors: float, int8, uint8, binary or ubinary
    dense_types: tuple[str, ...] = ()  # the dense vectors in these types too, from the same pass (Cohere's)
    max_tokens: int | None = None  # cut (or refuse) inputs at fewer tokens than the model takes


# Cohere's input types -> the prompt names checkpoints give them, in the order tried. A type none of whose
# names the model has gets no prompt (the model was not trained with one for it).
INPUT_TYPES = {
    "search_query": ("search_query", "query"),
    "search_document": ("search_document", "document", "passage", "doc"),
    "classification": ("classification",),
    "clustering": ("clustering",),
}
TRUNCATION_DIRECTIONS = ("right", "left")
# A ColBERT-style model embeds a text as a query or as a document (modeldir/late_interaction.py).
COLBERT_ROLES = {"search_query": "query", "search_document": "document"}


def role_of(model, request: EmbedRequest) -> str | None:
    """A ColBERT-style model's role for the call's texts, by input_type, which it needs: a query and a
    document are cut, padded and kept differently (None: not such a model)."""
    if model.colbert is None:
        return None
    if request.input_type not in COLBERT_ROLES:
        given = "none is given" if request.input_type is None else f"not {request.input_type!r}"
        raise invalid(
            "input_type",
            f"model {model.name!r} embeds queries and documents apart: search_query or search_document, {given}",
        )
    return COLBERT_ROLES[request.input_type]


def prompt_of(model, request: EmbedRequest) -> str:
    """The text put before each input: by prompt_name, or input_type, or the model's default prompt. (A
    ColBERT-style model's input_type names the texts' role too, so a prompt_name may come with it.)"""
    prompts = model.prompts
    if request.prompt_name is not None and request.input_type is not None and model.colbert is None:
        raise invalid("prompt_name", "give prompt_name or input_type, not both")
    if request.prompt_name is not None:
        if request.prompt_name not in prompts:
            has = f"its prompts are {', '.join(sorted(prompts))}" if prompts else "it has no prompts"
            raise invalid("prompt_name", f"{request.prompt_name!r} is not a prompt of model {model.name!r}; {has}")
        return prompts[request.prompt_name]
    if request.input_type is not None:
        if request.input_type not in INPUT_TYPES:
            raise invalid("input_type", f"{request.input_type!r}; one of {', '.join(INPUT_TYPES)}")
        name = next((n for n in INPUT_TYPES[request.input_type] if n in prompts), None)
        return prompts[name] if name else ""
    return prompts[model.default_prompt] if model.default_prompt else ""


@dataclass(frozen=True)
class EmbedUsage:
    prompt_tokens: int
    truncated_inputs: int
    queue_seconds: float  # the longest any of the call's texts waited for its batch
    tokenization_seconds: float
    inference_seconds: float  # the model time of the batches the call's texts ran in


@dataclass(frozen=True)
class EmbedResult:
    model: str
    # (inputs, dimensions) float32 in the order of the inputs, or packed bits (embedding_type); None where
    # the request did not ask for the dense output.
    vectors: np.ndarray | None
    usage: EmbedUsage
    sparse: list[SparseVector] | None = None  # one per input, where asked for
    multi_vectors: list[np.ndarray] | None = None  # one (vectors, dim) per input, typed as vectors are
    token_embeddings: list[np.ndarray] | None = None  # one (tokens, d_model) float32 per input
    dense_typed: dict[str, np.ndarray] = field(default_factory=dict)  # the dense vectors in each of dense_types


class EmbeddingService:
    def __init__(self, registry: ModelRegistry, tokenization: Tokenization, max_client_batch_size: int):
        self.registry, self.tokenization, self.max_client_batch_size = registry, tokenization, max_client_batch_size

    async def embed(self, request: EmbedRequest, call: CallRecord) -> EmbedResult:
        model = self.registry.get(request.model, "embedding", call.rpc)
        call.use_model(model.name)
        inputs = check_inputs(request.inputs, self.max_client_batch_size, model.architecture.vocab_size)
        dimensions = check_dimensions(request.dimensions, model.dimensions, model.name)
        normalize = model.normalize_by_default if request.normalize is None else request.normalize
        if request.truncation_direction not in TRUNCATION_DIRECTIONS:
            raise invalid("truncation_direction", f"{request.truncation_direction!r}; right or left")
        outputs = check_outputs(request.outputs, model)
        embedding_type = check_embedding_type(request.embedding_type, outputs, model, normalize, dimensions)
        dense_types = [check_embedding_type(t, ("dense",), model, normalize, dimensions) for t in request.dense_types]
        if request.max_tokens is not None and request.max_tokens < 1:
            raise invalid("max_tokens", f"{request.max_tokens}; at least 1")
        ranges = model.int8_ranges
        role = role_of(model, request)
        prompt = prompt_of(model, request)  # before each text (token ids are the model's input as they are)

        started = time.perf_counter()
        left = request.truncation_direction == "left"
        most = min(model.colbert.max_tokens(role), model.max_input_tokens) if role else model.max_input_tokens
        most = min(most, request.max_tokens or most)
        encoded = await self.tokenization.encode_inputs(model, inputs, prompt, left, most)
        tokenization_seconds = time.perf_counter() - started
        if not request.truncate:
            for i, e in enumerate(encoded):
                if e.truncated:
                    raise invalid(
                        f"inputs[{i}]",
                        f"more than {most} tokens, the most model {model.name!r} takes{f' in a {role}' if role else ''}; "
                        "shorten it or set truncate to true",
                    )
        sequences, attended = [e.ids for e in encoded], None
        if role:  # the marker token in, a query padded with expansion tokens
            sequences, attended = map(list, zip(*(model.colbert.frame(ids, role) for ids in sequences)))
        extra = tuple(graph_output(model, name) for name in outputs if name != "dense")
        try:
            results = await model.batcher.submit(sequences, extra, attended)
        except QueueFull as error:
            raise QueueFull(f"model {model.name!r}: {error}; retry later") from None

        vectors, typed = None, {}
        if "dense" in outputs:
            floats = np.stack([r.vector for r in results])[:, :dimensions]
            if normalize:
                floats = floats / np.maximum(np.linalg.norm(floats, axis=1, keepdims=True), 1e-12)
            vectors = quantized(floats, embedding_type, ranges.get("dense"))
            typed = {t: quantized(floats, t, ranges.get("dense")) for t in dense_types}
        sparse = multi = None
        if "sparse" in outputs:
            graph, special = graph_output(model, "sparse"), model.special.of(seq2seq=False)
            sparse = [sparse_of(graph, e.ids, r.extra[graph], special) for e, r in zip(encoded, results)]
        if "multi_vector" in outputs:
            multi = [
                quantized(multi_vector(model, role, ids, r.extra), embedding_type, ranges.get("multi_vector"))
                for ids, r in zip(sequences, results)
            ]
        states = None
        if "token_embeddings" in outputs:  # every token's, special tokens included, as float
            states = [r.extra["last_hidden_state"][: len(ids)] for ids, r in zip(sequences, results)]
        batch_seconds = {r.batch_id: r.batch_seconds for r in results}
        prompt_tokens = sum(len(ids) for ids in sequences)
        queue_seconds = max(r.queue_seconds for r in results)
        model.metrics.prompt(prompt_tokens)
        call.figures.update(inputs=len(inputs), prompt_tokens=prompt_tokens, queue_seconds=round(queue_seconds, 6))
        usage = EmbedUsage(
            prompt_tokens=prompt_tokens,
            truncated_inputs=sum(e.truncated for e in encoded),
            queue_seconds=queue_seconds,
            tokenization_seconds=tokenization_seconds,
            inference_seconds=sum(batch_seconds.values()),
        )
        return EmbedResult(model.name, vectors, usage, sparse, multi, states, typed)
