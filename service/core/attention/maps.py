"""The attention-maps capability: for one input, the softmax weights of every layer and head, from each
model's attention-map graph (runner/attention_maps.py). Every limit is checked before any model work: the
input's tokens, the decoder positions, and the answer's size computed from them (for a generation, from
its longest possible length); and at most a few calls run at once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from modeldir.tokenizer import Encoded

from ...engine.sequence import GenerationParams
from ...errors import FailedPrecondition, Overloaded, invalid
from ...ops.call_record import CallRecord
from ...runner import attention_maps
from ...runner.attention_maps import Maps
from ..calls.tokenization import Tokenization
from ..calls.validation import check_text
from ..generation.generation import whole_answer
from ..models.registry import ModelRegistry
from ..models.served_models import Architecture, ServedModel

# The kinds of attention a model has, as every front door names them (the runner's names for them).
ENCODER_SELF, DECODER_SELF, CROSS = attention_maps.ENCODER_SELF, attention_maps.DECODER_SELF, attention_maps.CROSS
BYTES_PER_WEIGHT = 4  # float32


def stack_sizes(architecture: Architecture, seq2seq: bool) -> dict[str, int]:
    """Layers of each kind of attention the model has: kind -> count."""
    sizes = {ENCODER_SELF: architecture.n_encoder_layers}
    if seq2seq:
        sizes.update({DECODER_SELF: architecture.n_decoder_layers, CROSS: architecture.n_decoder_layers})
    return sizes


def select_layers(model: ServedModel, requested: list[int]) -> dict[str, list[int]]:
    """kind -> the layers to return: all, or the requested ones (each must exist in every stack)."""
    a, seq2seq = model.architecture, model.task == "seq2seq"
    sizes = stack_sizes(a, seq2seq)
    if not requested:
        return {kind: list(range(n)) for kind, n in sizes.items()}
    if len(set(requested)) != len(requested):
        raise invalid("layers", f"{list(requested)} names a layer twice")
    fewest = min(sizes.values())
    for i, layer in enumerate(requested):
        if layer >= fewest:
            stacks = (
                f"{a.n_encoder_layers} encoder and {a.n_decoder_layers} decoder layers"
                if seq2seq
                else f"{fewest} layers"
            )
            raise invalid(f"layers[{i}]", f"{layer}; model {model.name!r} has {stacks} (0-based: at most {fewest - 1})")
    return {kind: sorted(requested) for kind in sizes}


def weights_bytes(n_heads: int, layers: dict[str, list[int]], source: int, target: int) -> int:
    """Bytes of the weights an answer holds, for `source` encoder and `target` decoder positions."""
    positions = {ENCODER_SELF: source * source, DECODER_SELF: target * target, CROSS: target * source}
    return sum(BYTES_PER_WEIGHT * len(chosen) * n_heads * positions[kind] for kind, chosen in layers.items())


@dataclass(frozen=True, kw_only=True)
class AttentionLimits:
    enabled: bool  # attention_maps
    max_input_tokens: int  # attention_max_input_tokens: and most decoder positions
    max_response_bytes: int  # attention_max_response_bytes
    max_concurrent: int  # attention_max_concurrent


@dataclass(frozen=True, kw_only=True)
class AttentionRequest:
    model: str
    input: str
    target: str | None = None  # seq2seq: the decoder reads this text instead of a greedy generation
    max_new_tokens: int = 0  # seq2seq without a target: of the greedy generation; 0: the most allowed
    layers: tuple[int, ...] = ()  # empty: all


@dataclass(frozen=True)
class AttentionResult:
    model: str
    source: Encoded
    source_special: list[bool]
    weights: dict[str, np.ndarray]  # kind -> (layers, heads, queries, keys) float32, C order
    layers: dict[str, list[int]]  # kind -> the model layer of each index of the first axis
    predicted_ids: list[int]  # seq2seq: the argmax token at each decoder position
    target_ids: list[int] | None  # seq2seq: the decoder's tokens, the start token first
    target_tokens: list[str]
    target_special: list[bool]
    predicted_tokens: list[str]  # seq2seq: the argmax at each decoder position
    target_text: str
    weights_bytes: int


class AttentionMaps:
    def __init__(self, registry: ModelRegistry, tokenization: Tokenization, limits: AttentionLimits):
        self.registry, self.tokenization, self.limits = registry, tokenization, limits
        self.calls = 0  # Attention calls in progress

    async def maps(self, request: AttentionRequest, call: CallRecord) -> AttentionResult:
        limits = self.limits
        if not limits.enabled:
            raise FailedPrecondition(
                "Attention: attention maps are off on this server; start it with --attention-maps "
                "(ATTNSERVE_ATTENTION_MAPS=1)"
            )
        model = self.registry.find(request.model)
        call.use_model(model.name)
        seq2seq, given_target = model.task == "seq2seq", request.target is not None
        check_text("input", request.input)
        if given_target and not seq2seq:
            raise invalid("target", f"model {model.name!r} is an embedding model; a target is for seq2seq models")
        if given_target:
            check_text("target", request.target)
        if request.max_new_tokens and (not seq2seq or given_target):
            raise invalid("max_new_tokens", "only for a seq2seq model that generates (no target given)")
        layers = select_layers(model, list(request.layers))

        (source,) = await self.tokenization.encode(model, [request.input])
        cap = limits.max_input_tokens
        limit = min(cap, model.max_input_tokens)
        if source.truncated or len(source.ids) > limit:
            count = f"more than {model.max_input_tokens}" if source.truncated else str(len(source.ids))
            why = "attention_max_input_tokens" if limit == cap else f"the most model {model.name!r} takes"
            raise invalid("input", f"{count} tokens; at most {limit} for Attention ({why})")
        # Decoder positions: the start token, then the target's tokens.
        positions = min(cap, model.architecture.max_positions)
        target_ids, new_tokens = None, 0
        if given_target:
            target = await self.tokenization.encode_target(model, request.target)
            most = min(positions - 1, model.max_input_tokens)  # the start token takes a position
            if target.truncated or len(target.ids) > most:
                count = f"more than {model.max_input_tokens}" if target.truncated else str(len(target.ids))
                raise invalid("target", f"{count} tokens; at most {most} for Attention on model {model.name!r}")
            target_ids = [model.special.bos, *target.ids]
        elif seq2seq:
            most = min(model.limits.max_new_tokens + 1, positions) - 1
            new_tokens = request.max_new_tokens or most
            if new_tokens > most:
                raise invalid("max_new_tokens", f"{new_tokens}; at most {most} for Attention on model {model.name!r}")
        longest_target = len(target_ids) if target_ids else 1 + new_tokens if seq2seq else 0
        size = weights_bytes(model.architecture.n_heads, layers, len(source.ids), longest_target)
        if size > limits.max_response_bytes:
            fewer = ", fewer max_new_tokens" if new_tokens else ""
            raise invalid(
                "input",
                f"the attention weights would take {size} bytes ({len(source.ids)} source and "
                f"{longest_target} decoder positions); at most {limits.max_response_bytes} "
                f"(attention_max_response_bytes): shorten the input, or ask for fewer layers{fewer}",
            )
        if self.calls >= limits.max_concurrent:
            raise Overloaded(
                f"{self.calls} Attention calls are in progress, the most this server runs at once "
                f"(attention_max_concurrent {limits.max_concurrent}); retry later"
            )
        # A call holds its slot until its graph has run, even when its caller leaves first: the slots
        # bound the work queued on the model thread, not only the callers waiting.
        self.calls += 1
        running = None
        try:
            target_text = request.target or ""
            if seq2seq and not given_target:
                params = GenerationParams(max_new_tokens=new_tokens, stream=False)
                target_text, generated, _ = await whole_answer(model, source.ids, params)
                target_ids = [model.special.bos, *generated]
            positions = len(source.ids) + len(target_ids or ())
            running = model.attention.submit(source.ids, target_ids, layers, positions=positions)
            running.add_done_callback(self._done)
            maps = await asyncio.shield(running)
        finally:
            if running is None:
                self.calls -= 1
        call.figures.update(prompt_tokens=len(source.ids), target_tokens=len(target_ids or ()), weights_bytes=size)
        return self._result(model, source, target_ids, target_text, maps, size)

    def _done(self, _: asyncio.Future) -> None:
        self.calls -= 1

    @staticmethod
    def _result(model: ServedModel, source: Encoded, target_ids, target_text: str, maps: Maps, size: int):
        special = model.special.of(model.task == "seq2seq")
        tokens = model.tokenizer.tokens
        return AttentionResult(
            model=model.name,
            source=source,
            source_special=[i in special for i in source.ids],
            weights=maps.weights,
            layers=maps.layers,
            predicted_ids=maps.predicted_ids,
            target_ids=target_ids,
            target_tokens=tokens(target_ids) if target_ids is not None else [],
            target_special=[i in special for i in target_ids or ()],
            predicted_tokens=tokens(maps.predicted_ids) if target_ids is not None else [],
            target_text=target_text if target_ids is not None else "",
            weights_bytes=size,
        )
