"""The generation capability of seq2seq models: an input and its options in; the whole answer, or its
events as they come, out, through the model's scheduler."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..engine.sequence import Event, Hypothesis, Usage
from ..errors import QueueFull, invalid
from ..ops.call_record import CallRecord
from .models import Seq2SeqModel
from .registry import ModelRegistry
from .tokenization import Tokenization
from .validation import GenerationOptions, check_text, generation_params


@dataclass(frozen=True)
class GenerateRequest:
    model: str
    input: str
    options: GenerationOptions = GenerationOptions()


@dataclass(frozen=True)
class GenerateResult:
    model: str
    text: str
    token_ids: list[int]
    finish_reason: str
    usage: Usage
    hypotheses: tuple[Hypothesis, ...]  # beam search: the n best, best first


@dataclass(frozen=True)
class GenerationStream:
    model: str
    events: AsyncIterator[Event]  # the last one has finish_reason and usage


async def refuse_when_full(model: Seq2SeqModel, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """The scheduler's events; its queue-full refusal (which comes when the first is asked for) names the
    model."""
    try:
        async for event in events:
            yield event
    except QueueFull as error:
        raise QueueFull(f"model {model.name!r}: {error}; retry later") from None


def record_usage(call: CallRecord, last: Event) -> None:
    u = last.usage
    call.figures.update(
        prompt_tokens=u.prompt_tokens, generated_tokens=u.generated_tokens, finish_reason=last.finish_reason,
        queue_seconds=round(u.queue_seconds, 6), time_to_first_token_seconds=round(u.time_to_first_token, 6),
    )  # fmt: skip


class Generation:
    def __init__(self, registry: ModelRegistry, tokenization: Tokenization, max_beams: int):
        self.registry, self.tokenization, self.max_beams = registry, tokenization, max_beams

    async def stream(self, request: GenerateRequest, call: CallRecord, streaming: bool = True) -> GenerationStream:
        """Validate, tokenize and queue the request; its events follow (token by token when streaming,
        else one at the end). The call's record gets the usage when the last event passes."""
        model = self.registry.get(request.model, "seq2seq", call.rpc)
        call.use_model(model.name)
        check_text("input", request.input)
        params = generation_params(model, request.options, streaming, self.max_beams)
        (encoded,) = await self.tokenization.encode(model, [request.input])
        if encoded.truncated:
            raise invalid("input", f"more than {model.max_input_tokens} tokens, the most model {model.name!r} takes")
        model.metrics.prompt(len(encoded.ids))

        async def events() -> AsyncIterator[Event]:
            async for event in refuse_when_full(model, model.scheduler.generate(encoded.ids, params)):
                if event.finish_reason is not None:
                    record_usage(call, event)
                yield event

        return GenerationStream(model.name, events())

    async def generate(self, request: GenerateRequest, call: CallRecord) -> GenerateResult:
        """The whole answer at once."""
        stream = await self.stream(request, call, streaming=False)
        text, token_ids = [], []
        async for event in stream.events:
            text.append(event.text)
            token_ids.extend(event.token_ids)
        return GenerateResult(
            stream.model, "".join(text), token_ids, event.finish_reason, event.usage, event.hypotheses
        )
