"""The generation capability of seq2seq models: an input and its options in; the whole answer, or its
events as they come, out, through the model's scheduler. A request that names a target language but no
model goes to the served model that covers its pair (routing.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ...engine import sequence
from ...errors import QueueFull, ServiceError, invalid
from ...ops.call_record import CallRecord
from ..calls.tokenization import Tokenization
from ..calls.validation import GenerationOptions, check_text, generation_params
from ..models.registry import ModelRegistry
from ..models.served_models import ServedSeq2SeqModel
from ..translation.languages import check_languages
from ..translation.routing import LanguageRouter

# Why a generation ended, as every front door reports it (the engine's names for them).
LENGTH, EOS, STOP, CANCELLED = sequence.LENGTH, sequence.EOS, sequence.STOP, sequence.CANCELLED


# The longest a stream's news waits for its next message: however many streams are open, a reader sees
# text at least four times a second (the budget may then be exceeded: 1,024 streams send 4,096 a second).
MAX_STREAM_INTERVAL = 0.25
# The message budget where the setting leaves it to the device (-1): on the CPU a message's CPU is taken
# from the model's, and 1,000 messages a second over all streams gave 1.8-2x the tokens/s of a message
# for every token at 32 to 1,024 streams on 2 cores (benchmarks/stream_policy_bench.py). On a GPU the
# model takes no CPU: every token goes out as it is made, and tokens merge only while a stream is behind.
CPU_STREAM_MESSAGES = 1000.0


@dataclass(frozen=True)
class GenerationUsage:
    prompt_tokens: int
    generated_tokens: int
    queue_seconds: float  # from arrival to admission
    time_to_first_token: float  # from arrival to the first token

    @staticmethod
    def of(usage: sequence.Usage) -> GenerationUsage:
        return GenerationUsage(
            usage.prompt_tokens, usage.generated_tokens, usage.queue_seconds, usage.time_to_first_token
        )


@dataclass(frozen=True)
class BestAnswer:
    """One of a beam search's best finished hypotheses."""

    text: str
    token_ids: list[int]  # without the eos token
    finish_reason: str
    score: float  # what it was ranked by: sum(log p) / generated_length ** length_penalty
    mean_log_prob: float  # sum(log p) / its tokens, eos included


@dataclass(frozen=True)
class StreamEvent:
    """New text and token ids of one generation; the last event has finish_reason and usage."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    usage: GenerationUsage | None = None


@dataclass(frozen=True, kw_only=True)
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
    usage: GenerationUsage
    hypotheses: tuple[BestAnswer, ...]  # beam search: the n best, best first
    mean_log_prob: float | None = None  # with options.scores (or a beam search): per token, eos included


@dataclass(frozen=True)
class GenerationStream:
    model: str
    events: AsyncIterator[StreamEvent]  # the last one has finish_reason and usage


def queue_full(model: ServedSeq2SeqModel, error: QueueFull) -> QueueFull:
    """The scheduler's queue-full refusal (which comes when the first event is asked for), naming the model."""
    return QueueFull(f"model {model.name!r}: {error}; retry later")


async def whole_answer(model: ServedSeq2SeqModel, ids: list[int], params: sequence.GenerationParams):
    """A generation's whole text and token ids, and its last event (finish reason, usage, hypotheses)."""
    text, token_ids = [], []
    try:
        async for event in model.scheduler.generate(ids, params):
            text.append(event.text)
            token_ids.extend(event.token_ids)
    except QueueFull as error:
        raise queue_full(model, error) from None
    return "".join(text), token_ids, event


def answer(model: str, text: str, token_ids: list[int], last: sequence.Event) -> GenerateResult:
    """A whole answer from its text, ids and last event."""
    hypotheses = tuple(
        BestAnswer(h.text, h.token_ids, h.finish_reason, h.score, h.mean_log_prob) for h in last.hypotheses
    )
    usage = GenerationUsage.of(last.usage)
    return GenerateResult(model, text, token_ids, last.finish_reason, usage, hypotheses, last.mean_log_prob)


def record_usage(call: CallRecord, last: sequence.Event) -> None:
    u = last.usage
    call.figures.update(
        prompt_tokens=u.prompt_tokens,
        generated_tokens=u.generated_tokens,
        finish_reason=last.finish_reason,
        queue_seconds=round(u.queue_seconds, 6),
        time_to_first_token_seconds=round(u.time_to_first_token, 6),
    )


def indexed(error: ServiceError, index: int, count: int) -> ServiceError:
    """An input's error names which input, where the call sent several: 'input: ...' -> 'inputs[3]: ...'."""
    if count > 1 and error.field == "input":
        error.field, error.message = f"inputs[{index}]", f"inputs[{index}]" + error.message[len("input") :]
    return error


class Generation:
    def __init__(
        self,
        registry: ModelRegistry,
        tokenization: Tokenization,
        max_beams: int,
        max_client_batch_size: int,
        stream_messages: float = -1.0,
        router: LanguageRouter | None = None,
    ):
        """stream_messages: the events a second all streams together aim at (0: one for every token unless
        the stream is behind; -1: by the model's device, budget()).
        router: where a request that names languages but no model goes (None: to the default model)."""
        self.registry, self.tokenization, self.max_beams = registry, tokenization, max_beams
        self.max_client_batch_size, self.stream_messages = max_client_batch_size, stream_messages
        self.router = router
        self.streams_open = 0

    def budget(self, model) -> float:
        """The events a second all streams of a model together aim at (0: none held back): the setting, or
        by default (-1) none on a GPU and CPU_STREAM_MESSAGES on the CPU."""
        if self.stream_messages >= 0:
            return self.stream_messages
        return 0.0 if "CUDA" in model.provider else CPU_STREAM_MESSAGES

    def interval(self, budget: float) -> float:
        """The least seconds between two events of one stream, for the streams open now to send at most
        `budget` a second together (one stream at 1,000: a millisecond, so never held back), and never more
        than MAX_STREAM_INTERVAL."""
        return min(self.streams_open / budget, MAX_STREAM_INTERVAL)

    def check_count(self, inputs: list[str]) -> None:
        """Several inputs in one call: 1 to max_client_batch_size of them."""
        limit = self.max_client_batch_size
        if not inputs:
            raise invalid("inputs", f"empty; send 1 to {limit} texts")
        if len(inputs) > limit:
            raise invalid("inputs", f"{len(inputs)} texts; at most {limit} per call (max_client_batch_size)")

    async def _prepare(self, request: GenerateRequest, call: CallRecord, streaming: bool):
        """Validate and tokenize the request: -> its model, its generation parameters and its prompt's ids."""
        options = request.options
        if not request.model and options.target_language and self.router is not None:  # routed by its pair
            check_text("input", request.input)
            source, target = options.source_language, options.target_language
            route = self.router.route(request.input, source, target, self.router.candidates("", target))
            model, languages = route.model, route.languages
            call.use_model(model.name)
        else:
            model = self.registry.get(request.model, "seq2seq", call.rpc)
            call.use_model(model.name)
            check_text("input", request.input)
            languages = check_languages(model, options.source_language, options.target_language)
        params = generation_params(
            model, options, streaming, self.max_beams, languages.first_token, languages.start_token
        )
        (encoded,) = await self.tokenization.encode(model, [request.input], languages)
        if encoded.truncated:
            raise invalid("input", f"more than {model.max_input_tokens} tokens, the most model {model.name!r} takes")
        model.metrics.prompt(len(encoded.ids))
        return model, params, encoded.ids

    async def stream(self, request: GenerateRequest, call: CallRecord) -> GenerationStream:
        """The request checked and queued; its events follow token by token (several tokens in one when
        the stream waited, or was behind). The call's record gets the usage when the last one passes."""
        model, params, ids = await self._prepare(request, call, streaming=True)
        queued = model.scheduler.generate(ids, params)
        loop = asyncio.get_running_loop()
        budget = self.budget(model)

        async def events() -> AsyncIterator[StreamEvent]:
            self.streams_open += 1
            try:
                async for e in queued:
                    if e.finish_reason is None:
                        taken = loop.time()
                        yield StreamEvent(e.text, e.token_ids)
                        # The tokens that come while this waits, or while the door sends the last event,
                        # wait in the sequence and go out together.
                        if budget and (wait := taken + self.interval(budget) - loop.time()) > 0:
                            await asyncio.sleep(wait)
                    else:
                        record_usage(call, e)
                        yield StreamEvent(e.text, e.token_ids, e.finish_reason, GenerationUsage.of(e.usage))
            except QueueFull as error:
                raise queue_full(model, error) from None
            finally:
                self.streams_open -= 1
                await queued.aclose()

        return GenerationStream(model.name, events())

    async def generate(self, request: GenerateRequest, call: CallRecord) -> GenerateResult:
        """The whole answer at once."""
        model, params, ids = await self._prepare(request, call, streaming=False)
        text, token_ids, event = await whole_answer(model, ids, params)
        record_usage(call, event)
        return answer(model.name, text, token_ids, event)

    async def generate_all(
        self, model: str, inputs: list[str], options: GenerationOptions, call: CallRecord
    ) -> list[GenerateResult]:
        """Several inputs with the same options, generated at once (the scheduler batches them), answered in
        order. One refused or failed input stops the others, which free their cache rows."""
        self.check_count(inputs)

        async def one(i: int, text: str) -> GenerateResult:
            try:
                return await self.generate(GenerateRequest(model=model, input=text, options=options), call)
            except ServiceError as error:
                raise indexed(error, i, len(inputs)) from None

        tasks = [asyncio.ensure_future(one(i, text)) for i, text in enumerate(inputs)]
        try:
            results = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        call.figures.update(
            inputs=len(inputs),
            prompt_tokens=sum(r.usage.prompt_tokens for r in results),
            generated_tokens=sum(r.usage.generated_tokens for r in results),
        )
        return results

    async def stream_one(
        self, model: str, inputs: list[str], options: GenerationOptions, call: CallRecord
    ) -> GenerationStream:
        """The stream of a request whose answer has room for one input's events (no index says which)."""
        if len(inputs) != 1:
            raise invalid("inputs", f"{len(inputs)} texts; a streamed request takes 1")
        (stream,) = await self.stream_all(model, inputs, options, call)
        return stream

    async def stream_all(
        self, model: str, inputs: list[str], options: GenerationOptions, call: CallRecord
    ) -> list[GenerationStream]:
        """Several inputs' streams, each checked and queued before any is returned: a refusal comes here,
        before a front door starts its answer, and closes the streams already open."""
        self.check_count(inputs)
        streams = []
        try:
            for i, text in enumerate(inputs):
                try:
                    streams.append(await self.stream(GenerateRequest(model=model, input=text, options=options), call))
                except ServiceError as error:
                    raise indexed(error, i, len(inputs)) from None
        except BaseException:
            for stream in streams:
                await stream.events.aclose()
            raise
        return streams
