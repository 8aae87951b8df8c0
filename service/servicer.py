"""The Inference service: protobuf in, validation, the batcher or scheduler awaited, protobuf out.

The only module that sees both protobuf and the internal types. Every handler passes admission first:
UNAVAILABLE while the models load or the server drains, RESOURCE_EXHAUSTED beyond
max_concurrent_requests. Admission is done here, not by grpcio's maximum_concurrent_rpcs, which would
turn away health checks too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from concurrent.futures import Executor

import grpc
import numpy as np

from .attention_maps import CROSS, DECODER_SELF, ENCODER_SELF, select_layers, weights_bytes
from .batcher import QueueFull as BatcherQueueFull
from .beam_search import BeamSettings
from .calls import CallRecord, request_id
from .config import ServerConfig
from .errors import RequestError, exhausted, failed_precondition, invalid, unavailable
from .metrics import Metrics
from .models import ModelRegistry, ServedModel
from .pb import inference_pb2 as pb
from .pb import inference_pb2_grpc as pb_grpc
from .sampling import SamplingParams
from .scheduler import CANCELLED, EOS, LENGTH, STOP, Event, GenerationParams, QueueFull, Usage

log = logging.getLogger("attnserve.servicer")

TASKS = {"embedding": pb.TASK_EMBEDDING, "seq2seq": pb.TASK_SEQ2SEQ}
FINISH_REASONS = {
    LENGTH: pb.FINISH_REASON_LENGTH, EOS: pb.FINISH_REASON_EOS, STOP: pb.FINISH_REASON_STOP,
    CANCELLED: pb.FINISH_REASON_CANCELLED,
}  # fmt: skip
ATTENTION_KINDS = {
    ENCODER_SELF: pb.ATTENTION_KIND_ENCODER_SELF, DECODER_SELF: pb.ATTENTION_KIND_DECODER_SELF,
    CROSS: pb.ATTENTION_KIND_CROSS,
}  # fmt: skip
EARLY_STOPPING = {
    pb.EARLY_STOPPING_HEURISTIC: "false", pb.EARLY_STOPPING_ON: "true", pb.EARLY_STOPPING_NEVER: "never",
}  # fmt: skip
MAX_LENGTH_PENALTY = 10.0
MAX_STOP_SEQUENCES = 8
MAX_STOP_LENGTH = 64


async def _queue_checked(model, events):
    """The scheduler's events; its queue-full refusal comes when the first is asked for."""
    try:
        async for event in events:
            yield event
    except QueueFull as error:
        raise exhausted(f"model {model.name!r}: {error}; retry later") from None


class UnparsedRequest:
    """What a request that is not a valid message of its type becomes (see register)."""

    def __init__(self, error: Exception):
        self.error = error


def _lenient(deserialize):
    def parse(data: bytes):
        try:
            return deserialize(data)
        except Exception as error:  # grpcio would answer INTERNAL: ours is INVALID_ARGUMENT
            return UnparsedRequest(error)

    return parse


def register(servicer: InferenceServicer, server: grpc.aio.Server) -> None:
    """add_InferenceServicer_to_server, with request parsing failures kept for the handler to refuse."""

    class Registrar:
        def add_generic_rpc_handlers(self, handlers):
            pass  # the same handlers come again through add_registered_method_handlers

        def add_registered_method_handlers(self, service, handlers):
            handlers = {
                n: h._replace(request_deserializer=_lenient(h.request_deserializer)) for n, h in handlers.items()
            }
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
            server.add_registered_method_handlers(service, handlers)

    pb_grpc.add_InferenceServicer_to_server(servicer, Registrar())


def handler(method):
    """A method behind admission, with its errors turned into statuses (InferenceServicer.call)."""

    @functools.wraps(method)
    async def wrapper(self: InferenceServicer, request, context: grpc.aio.ServicerContext):
        async with self.call(context, method.__name__) as record:
            if isinstance(request, UnparsedRequest):
                raise invalid(f"request: not a valid message for {method.__name__}: {request.error}")
            return await method(self, request, record)

    return wrapper


def _record_usage(record: CallRecord, last: Event) -> None:
    u = last.usage
    record.figures.update(
        prompt_tokens=u.prompt_tokens, generated_tokens=u.generated_tokens, finish_reason=last.finish_reason,
        queue_seconds=round(u.queue_seconds, 6), time_to_first_token_seconds=round(u.time_to_first_token, 6),
    )  # fmt: skip


def _usage(usage: Usage | None) -> pb.GenerateUsage | None:
    if usage is None:
        return None
    return pb.GenerateUsage(
        prompt_tokens=usage.prompt_tokens,
        generated_tokens=usage.generated_tokens,
        time_to_first_token_seconds=usage.time_to_first_token,
        queue_seconds=usage.queue_seconds,
    )


def _check_text(field: str, text: str) -> None:
    if not text:
        raise invalid(f"{field}: empty text")
    if "\x00" in text:
        raise invalid(f"{field}: contains a NUL character")


class InferenceServicer(pb_grpc.InferenceServicer):
    def __init__(self, config: ServerConfig, tokenize_executor: Executor, metrics: Metrics):
        self.config = config
        self.tokenize_executor = tokenize_executor
        self.metrics = metrics
        self.registry: ModelRegistry | None = None  # set once the models are loaded and warm
        self.draining = False
        self.in_flight = 0
        self.attention_calls = 0  # Attention calls in progress

    @contextlib.asynccontextmanager
    async def call(self, context: grpc.aio.ServicerContext, name: str):
        """Admission first; then RequestError becomes its status, anything else INTERNAL. Every call,
        admitted or not, ends with one record: counted, timed and logged (calls.py). A refused call's
        record closes before its status goes out (abort sends it at once), so a client that sees the
        error and then scrapes /metrics or reads the log finds the call there."""
        record = CallRecord(name, request_id(context), self.metrics, context)
        admitted = False
        try:
            self.admit()
            admitted = True
            self.in_flight += 1
            yield record
        except RequestError as error:
            record.code = error.code
            self._end(record, admitted)
            await context.abort(error.code, error.message)
        except (asyncio.CancelledError, GeneratorExit):
            remaining = context.time_remaining()
            expired = remaining is not None and remaining <= 0
            record.code = grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED
            raise
        except grpc.aio.AbortError:
            raise
        except Exception:
            record.code = grpc.StatusCode.INTERNAL
            log.exception("%s failed", name)
            self._end(record, admitted)
            await context.abort(grpc.StatusCode.INTERNAL, f"{name}: internal error (see the server log)")
        finally:
            self._end(record, admitted)

    def _end(self, record: CallRecord, admitted: bool) -> None:
        """Once per call, whichever path gets here first."""
        if record.closed:
            return
        if admitted:
            self.in_flight -= 1
        record.close()

    def admit(self) -> None:
        if self.draining:
            raise unavailable("the server is shutting down; retry on another replica")
        if self.registry is None:
            raise unavailable("the server is starting: models are loading")
        if self.in_flight >= self.config.max_concurrent_requests:
            raise exhausted(
                f"{self.in_flight} calls are in progress, the most this server takes at once "
                f"(max_concurrent_requests {self.config.max_concurrent_requests}); retry later"
            )

    def _texts(self, inputs) -> list[str]:
        texts = list(inputs)
        limit = self.config.max_client_batch_size
        if not texts:
            raise invalid(f"inputs: empty; send 1 to {limit} texts")
        if len(texts) > limit:
            raise invalid(f"inputs: {len(texts)} texts; at most {limit} per call (max_client_batch_size)")
        for i, text in enumerate(texts):
            _check_text(f"inputs[{i}]", text)
        return texts

    async def _tokenize(self, model: ServedModel, texts: list[str]):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.tokenize_executor, model.tokenizer.encode, texts)

    @handler
    async def Embed(self, request: pb.EmbedRequest, record: CallRecord) -> pb.EmbedResponse:
        model = self.registry.get(request.model, "embedding", "Embed")
        record.use_model(model.name)
        texts = self._texts(request.inputs)
        normalize = request.normalize if request.HasField("normalize") else model.normalize_by_default
        truncate = request.truncate if request.HasField("truncate") else True

        started = time.perf_counter()
        encoded = await self._tokenize(model, texts)
        tokenization_seconds = time.perf_counter() - started
        if not truncate:
            for i, e in enumerate(encoded):
                if e.truncated:
                    raise invalid(
                        f"inputs[{i}]: more than {model.max_input_tokens} tokens, the most model {model.name!r} "
                        "takes; shorten it or set truncate to true"
                    )
        try:
            results = await model.batcher.submit([e.ids for e in encoded])
        except BatcherQueueFull as error:
            raise exhausted(f"model {model.name!r}: {error}; retry later") from None

        vectors = np.stack([r.vector for r in results])
        if normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        batch_seconds = {r.batch_id: r.batch_seconds for r in results}
        prompt_tokens = sum(len(e.ids) for e in encoded)
        model.metrics.prompt(prompt_tokens)
        record.figures.update(inputs=len(texts), prompt_tokens=prompt_tokens,
                              queue_seconds=round(max(r.queue_seconds for r in results), 6))  # fmt: skip
        usage = pb.EmbedUsage(
            prompt_tokens=prompt_tokens,
            truncated_inputs=sum(e.truncated for e in encoded),
            queue_seconds=max(r.queue_seconds for r in results),
            tokenization_seconds=tokenization_seconds,
            inference_seconds=sum(batch_seconds.values()),
        )
        return pb.EmbedResponse(
            model=model.name, embeddings=[pb.Embedding(values=v) for v in vectors.tolist()], usage=usage
        )

    @handler
    async def Tokenize(self, request: pb.TokenizeRequest, record: CallRecord) -> pb.TokenizeResponse:
        model = self.registry.find(request.model)
        record.use_model(model.name)
        encoded = await self._tokenize(model, self._texts(request.inputs))
        return pb.TokenizeResponse(
            model=model.name,
            tokenized=[pb.TokenizedInput(ids=e.ids, tokens=e.tokens, truncated=e.truncated) for e in encoded],
        )

    def _generation_params(self, model: ServedModel, p: pb.GenerationParams, streaming: bool) -> GenerationParams:
        geometry = model.scheduler.cache.geometry
        limit = geometry.target_tokens - 1
        max_new_tokens = p.max_new_tokens or limit
        if max_new_tokens > limit:
            raise invalid(
                f"params.max_new_tokens: {max_new_tokens}; at most {limit} for model {model.name!r} "
                f"(its cache rows hold {geometry.target_tokens} decoder positions)"
            )
        if not math.isfinite(p.temperature) or p.temperature < 0:
            raise invalid(f"params.temperature: {p.temperature:.7g}; must be finite and >= 0 (0: greedy)")
        top_p = p.top_p or 1.0
        if not math.isfinite(top_p) or not 0 < top_p <= 1:
            raise invalid(f"params.top_p: {p.top_p:.7g}; must be in (0, 1]")
        penalty = p.repetition_penalty or 1.0
        if not math.isfinite(penalty) or penalty < 0:
            raise invalid(f"params.repetition_penalty: {p.repetition_penalty:.7g}; must be finite and > 0")
        if len(p.stop) > MAX_STOP_SEQUENCES:
            raise invalid(f"params.stop: {len(p.stop)} sequences; at most {MAX_STOP_SEQUENCES}")
        for i, stop in enumerate(p.stop):
            if not 1 <= len(stop) <= MAX_STOP_LENGTH:
                raise invalid(f"params.stop[{i}]: {len(stop)} characters; 1 to {MAX_STOP_LENGTH}")
        if p.temperature == 0:
            # Greedy decoding has nothing to sample from: sampling options would silently do nothing.
            for name, set_ in (("top_k", p.top_k), ("top_p", p.top_p), ("seed", p.HasField("seed"))):
                if set_:
                    raise invalid(f"params.{name}: only with sampling (temperature > 0); temperature 0 is greedy")
        return GenerationParams(
            max_new_tokens=max_new_tokens,
            sampling=SamplingParams(p.temperature, p.top_k, top_p, penalty),
            seed=p.seed if p.HasField("seed") else None,
            stop=tuple(p.stop),
            ignore_eos=p.ignore_eos,
            beams=self._beam_settings(model, p, streaming),
            stream=streaming,
        )

    def _beam_settings(self, model: ServedModel, p: pb.GenerationParams, streaming: bool) -> BeamSettings | None:
        """Beam search settings, or None for greedy/sampling. An unset num_beams is the model's default,
        unless the request asks for what beam search cannot do (stream, sample, stop sequences, ...)."""
        greedy_only = [name for name, set_ in (
            ("stream", streaming), ("temperature", p.temperature), ("repetition_penalty", p.repetition_penalty),
            ("stop", p.stop), ("ignore_eos", p.ignore_eos),
        ) if set_]  # fmt: skip
        beam_only = [name for name, set_ in (
            ("length_penalty", p.HasField("length_penalty")), ("early_stopping", p.early_stopping),
            ("num_return_sequences", p.num_return_sequences > 1)) if set_
        ]  # fmt: skip
        num_beams = p.num_beams or (1 if greedy_only else model.config.get("num_beams", 1))
        if num_beams == 1:
            if beam_only:
                raise invalid(f"params.{beam_only[0]}: only with beam search (num_beams > 1)")
            return None
        limit = min(self.config.max_beams, model.scheduler.cache.rows)
        if num_beams > limit:
            raise invalid(
                f"params.num_beams: {num_beams}; at most {limit} (max_beams {self.config.max_beams}, "
                f"cache rows of model {model.name!r} {model.scheduler.cache.rows})"
            )
        if greedy_only == ["stream"]:
            raise invalid(
                "params.num_beams: beam search does not stream (the best beam is known at the end); use Generate"
            )
        if greedy_only:
            name = next(n for n in greedy_only if n != "stream")
            raise invalid(f"params.{name}: not with beam search (num_beams {num_beams})")
        length_penalty = p.length_penalty if p.HasField("length_penalty") else model.config.get("length_penalty", 1.0)
        if not abs(length_penalty) <= MAX_LENGTH_PENALTY:  # also NaN; length ** penalty stays a float32
            raise invalid(f"params.length_penalty: {length_penalty:.7g}; must be within +-{MAX_LENGTH_PENALTY}")
        if p.early_stopping and p.early_stopping not in EARLY_STOPPING:
            raise invalid(f"params.early_stopping: {p.early_stopping} is not an EarlyStopping value")
        early = EARLY_STOPPING.get(p.early_stopping) or model.config.get("early_stopping", "false")
        returned = p.num_return_sequences or 1
        if returned > num_beams:
            raise invalid(f"params.num_return_sequences: {returned}; at most num_beams ({num_beams})")
        return BeamSettings(num_beams, length_penalty, early, returned)

    async def _events(self, request: pb.GenerateRequest, record: CallRecord):
        """-> the model, and the events of the request's generation."""
        model = self.registry.get(request.model, "seq2seq", record.rpc)
        record.use_model(model.name)
        _check_text("input", request.input)
        params = self._generation_params(model, request.params, streaming=record.rpc == "GenerateStream")
        (encoded,) = await self._tokenize(model, [request.input])
        if encoded.truncated:
            raise invalid(f"input: more than {model.max_input_tokens} tokens, the most model {model.name!r} takes")
        model.metrics.prompt(len(encoded.ids))
        return model, _queue_checked(model, model.scheduler.generate(encoded.ids, params))

    @handler
    async def Generate(self, request: pb.GenerateRequest, record: CallRecord) -> pb.GenerateResponse:
        model, events = await self._events(request, record)
        text, token_ids = [], []
        async for event in events:
            text.append(event.text)
            token_ids.extend(event.token_ids)
        _record_usage(record, event)
        return pb.GenerateResponse(
            model=model.name, text="".join(text), token_ids=token_ids,
            finish_reason=FINISH_REASONS[event.finish_reason], usage=_usage(event.usage),
            hypotheses=[pb.Hypothesis(text=h.text, token_ids=h.token_ids, finish_reason=FINISH_REASONS[h.finish_reason],
                                      score=h.score) for h in event.hypotheses],
        )  # fmt: skip

    @handler
    async def GenerateStream(self, request: pb.GenerateRequest, record: CallRecord) -> None:
        """Messages are written one at a time, each within stream_write_timeout: a client that stops
        reading holds one message in flight, not a growing buffer, and is cut off after the timeout.
        (Its sequence runs on to its end meanwhile, and its cache row is freed then.)"""
        model, events = await self._events(request, record)
        timeout = self.config.stream_write_timeout
        async for event in events:
            if event.finish_reason is not None:
                _record_usage(record, event)
            message = pb.GenerateStreamResponse(
                model=model.name, text=event.text, token_ids=event.token_ids,
                finish_reason=FINISH_REASONS.get(event.finish_reason, pb.FINISH_REASON_UNSPECIFIED),
                usage=_usage(event.usage),
            )  # fmt: skip
            try:
                await asyncio.wait_for(record.context.write(message), timeout)
            except asyncio.TimeoutError:
                raise RequestError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"stream: the client read nothing for {timeout:g} s (stream_write_timeout)",
                ) from None

    @handler
    async def ListModels(self, request: pb.ListModelsRequest, record: CallRecord) -> pb.ListModelsResponse:
        infos = []
        for model in self.registry.models.values():
            infos.append(
                pb.ModelInfo(
                    name=model.name,
                    task=TASKS[model.task],
                    dimensions=model.config["d_model"],
                    max_input_tokens=model.max_input_tokens,
                    execution_provider=model.provider,
                    opset=model.files.manifest["opset"],
                    is_default=self.registry.defaults.get(model.task) is model,
                )
            )
        return pb.ListModelsResponse(models=infos)

    @handler
    async def Attention(self, request: pb.AttentionRequest, record: CallRecord) -> pb.AttentionResponse:
        """Every limit is checked before any model work: the input's tokens, the decoder positions, and
        the answer's size, computed from them (for a generation, from its longest possible length)."""
        config = self.config
        if not config.attention_maps:
            raise failed_precondition(
                "Attention: attention maps are off on this server; start it with --attention-maps "
                "(ATTNSERVE_ATTENTION_MAPS=1)"
            )
        model = self.registry.find(request.model)
        record.use_model(model.name)
        seq2seq, given_target = model.task == "seq2seq", request.HasField("target")
        _check_text("input", request.input)
        if given_target and not seq2seq:
            raise invalid(f"target: model {model.name!r} is an embedding model; a target is for seq2seq models")
        if given_target:
            _check_text("target", request.target)
        if request.max_new_tokens and (not seq2seq or given_target):
            raise invalid("max_new_tokens: only for a seq2seq model that generates (no target given)")
        layers = select_layers(model.config, list(request.layers), model.name)

        (source,) = await self._tokenize(model, [request.input])
        cap = config.attention_max_input_tokens
        limit = min(cap, model.max_input_tokens)
        if source.truncated or len(source.ids) > limit:
            count = f"more than {model.max_input_tokens}" if source.truncated else str(len(source.ids))
            why = "attention_max_input_tokens" if limit == cap else f"the most model {model.name!r} takes"
            raise invalid(f"input: {count} tokens; at most {limit} for Attention ({why})")
        # Decoder positions: the start token, then the target's tokens.
        positions = min(cap, model.config["max_positions"])
        target_ids, new_tokens = None, 0
        if given_target:
            loop = asyncio.get_running_loop()
            target = await loop.run_in_executor(self.tokenize_executor, model.tokenizer.encode_target, request.target)
            most = min(positions - 1, model.max_input_tokens)  # the start token takes a position
            if target.truncated or len(target.ids) > most:
                count = f"more than {model.max_input_tokens}" if target.truncated else str(len(target.ids))
                raise invalid(f"target: {count} tokens; at most {most} for Attention on model {model.name!r}")
            target_ids = [model.config["bos_id"], *target.ids]
        elif seq2seq:
            most = min(model.scheduler.cache.geometry.target_tokens, positions) - 1
            new_tokens = request.max_new_tokens or most
            if new_tokens > most:
                raise invalid(f"max_new_tokens: {new_tokens}; at most {most} for Attention on model {model.name!r}")
        longest_target = len(target_ids) if target_ids else 1 + new_tokens if seq2seq else 0
        size = weights_bytes(model.config, layers, len(source.ids), longest_target)
        if size > config.attention_max_response_bytes:
            fewer = ", fewer max_new_tokens" if new_tokens else ""
            raise invalid(
                f"input: the attention weights would take {size} bytes ({len(source.ids)} source and "
                f"{longest_target} decoder positions); at most {config.attention_max_response_bytes} "
                f"(attention_max_response_bytes): shorten the input, or ask for fewer layers{fewer}"
            )
        if self.attention_calls >= config.attention_max_concurrent:
            raise exhausted(
                f"{self.attention_calls} Attention calls are in progress, the most this server runs at once "
                f"(attention_max_concurrent {config.attention_max_concurrent}); retry later"
            )
        # A call holds its slot until its graph has run, even when its caller leaves first: the slots
        # bound the work queued on the model thread, not only the callers waiting.
        self.attention_calls += 1
        running = None
        try:
            target_text = request.target
            if seq2seq and not given_target:
                params = GenerationParams(max_new_tokens=new_tokens, stream=False)
                text, generated = [], []
                async for event in _queue_checked(model, model.scheduler.generate(source.ids, params)):
                    text.append(event.text)
                    generated.extend(event.token_ids)
                target_ids, target_text = [model.config["bos_id"], *generated], "".join(text)
            running = model.attention.submit(source.ids, target_ids, layers)
            running.add_done_callback(self._attention_done)
            maps = await asyncio.shield(running)
        finally:
            if running is None:
                self.attention_calls -= 1
        record.figures.update(prompt_tokens=len(source.ids), target_tokens=len(target_ids or ()), weights_bytes=size)
        return _attention_response(model, source, target_ids, target_text, maps)

    def _attention_done(self, _: asyncio.Future) -> None:
        self.attention_calls -= 1


def _attention_response(model: ServedModel, source, target_ids, target_text: str, maps) -> pb.AttentionResponse:
    c = model.config
    special = model.tokenizer.special_ids | {c["pad_id"]}
    if model.task == "seq2seq":
        special |= {c["bos_id"], c["eos_id"]}
    response = pb.AttentionResponse(
        model=model.name, source_tokens=source.tokens, source_ids=source.ids,
        source_special=[i in special for i in source.ids],
        attentions=[
            pb.AttentionWeights(kind=ATTENTION_KINDS[kind], shape=weights.shape, data=weights.astype("<f4").tobytes(),
                                layers=maps.layers[kind])
            for kind, weights in maps.weights.items()
        ],
    )  # fmt: skip
    if target_ids is not None:
        response.target_tokens.extend(model.tokenizer.tokens(target_ids))
        response.target_ids.extend(target_ids)
        response.target_special.extend(i in special for i in target_ids)
        response.predicted_tokens.extend(model.tokenizer.tokens(maps.predicted_ids))
        response.predicted_ids.extend(maps.predicted_ids)
        response.target_text = target_text
    return response
