"""The OpenAI-compatible HTTP API: /v1/embeddings, /v1/completions (seq2seq models), /v1/models and /health.
JSON in, core types; core results out, OpenAI's shapes. Validation, limits and policy are the core's;
statuses and error shapes are call_handling.py's."""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.routing import Match

from ..core.calls.lifecycle import Call, failure
from ..core.calls.validation import GenerationOptions
from ..core.embedding.embeddings import EmbedRequest
from ..core.generation.generation import LENGTH
from ..core.generation.streaming import merged
from ..core.info import ModelInfo
from ..core.serving import ServingCore
from ..errors import ServiceError, invalid
from .call_handling import (
    OPENAI,
    BodyTooLarge,
    FastJSONResponse,
    HttpApi,
    field_of,
    handle,
    openai_error,
    refuse,
)
from .event_stream import AbortConnection, PacedEventStream, sse
from .openai_types import CHUNK, COMPLETION, EMBEDDINGS, HEALTH, MODELS, CompletionsRequest, EmbeddingsRequest
from .openapi_document import REF, answers

log = logging.getLogger("attnserve.http")

EMBEDDING_NAMES = {"inputs": "input"}
COMPLETION_NAMES = {
    "input": "prompt",
    "inputs": "prompt",
    "params.max_new_tokens": "max_tokens",
    "params.temperature": "temperature",
    "params.top_p": "top_p",
    "params.top_k": "top_k",
    "params.seed": "seed",
    "params.stop": "stop",
    "params.repetition_penalty": "repetition_penalty",
    "params.min_p": "min_p",
    "params.presence_penalty": "presence_penalty",
    "params.frequency_penalty": "frequency_penalty",
    "params.ignore_eos": "ignore_eos",
    "params.num_beams": "n",
    "params.num_return_sequences": "n",
    "params.answers": "n",
}


def finish_reason(reason: str) -> str:
    return "length" if reason == LENGTH else "stop"  # eos and stop sequences alike


def embedding_values(vector: np.ndarray, encoding: str):
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode()
    return vector.tolist()


def generation_options(body: CompletionsRequest) -> GenerationOptions:
    """n = 1 leaves the number of beams to the checkpoint's default, as an unset num_beams does on gRPC."""
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    return GenerationOptions(
        max_new_tokens=body.max_tokens or 0,
        temperature=body.temperature or 0.0,
        top_k=body.top_k or 0,
        top_p=body.top_p or 0.0,
        repetition_penalty=body.repetition_penalty or 0.0,
        min_p=body.min_p or 0.0,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        seed=body.seed,
        stop=stop,
        ignore_eos=body.ignore_eos,
        answers=body.n,
        source_language=body.source_language or None,
        target_language=body.target_language or None,
    )


def model_card(m: ModelInfo) -> dict:
    """A model as /v1/models lists it: OpenAI's fields, its task, and a multilingual model's languages."""
    card = {"id": m.name, "object": "model", "created": 0, "owned_by": "attnserve", "task": m.task}
    if m.languages:
        card.update(
            languages=list(m.languages),
            needs_source_language=m.needs_source_language,
            needs_target_language=m.needs_target_language,
        )
    if m.language_pair:
        card.update(source_language=m.language_pair[0], target_language=m.language_pair[1])
    if m.prompt_names:
        card.update(prompts=list(m.prompt_names), default_prompt=m.default_prompt_name or None)
    return card


def prompts_of(body: CompletionsRequest) -> list[str]:
    return [body.prompt] if isinstance(body.prompt, str) else body.prompt


def create_app(
    core: ServingCore, abort_connection: AbortConnection, api_of: Callable[[str], HttpApi] = lambda path: OPENAI
) -> FastAPI:
    """The API; abort_connection(scope) drops the connection of a request whose stream is given up;
    api_of(path): the API whose shape a body refused before its route runs is answered in."""
    summary = "OpenAI-compatible embeddings and completions; TEI's, DeepL's and LibreTranslate's APIs"
    app = FastAPI(title="attnserve", summary=summary, docs_url="/docs")

    @app.exception_handler(RequestValidationError)
    async def refuse_invalid_body(request: Request, error: RequestValidationError) -> JSONResponse:
        first = (error.errors() or [{"loc": (), "msg": "not a valid request"}])[0]
        field = field_of(first.get("loc", ()))
        path = request.url.path
        return refuse(core, request.headers, path, invalid(field, str(first.get("msg"))), api_of(path))

    @app.exception_handler(StarletteHTTPException)
    async def refuse_in_api_shape(request: Request, error: StarletteHTTPException) -> Response:
        """A body FastAPI could not parse is refused as its API refuses bodies; a method a path does not take
        is answered with every method its routes take (two routes may share a path: DeepL's languages)."""
        path = request.url.path
        if error.status_code == 400:
            return refuse(core, request.headers, path, invalid("body", f"not valid JSON: {error.detail}"), api_of(path))
        if error.status_code == 405:
            sharing = [route for route in app.routes if route.matches(request.scope)[0] == Match.PARTIAL]
            allowed = ", ".join(sorted({method for route in sharing for method in route.methods}))
            return JSONResponse({"detail": "Method Not Allowed"}, status_code=405, headers={"Allow": allowed})
        return await http_exception_handler(request, error)

    @app.exception_handler(BodyTooLarge)
    async def refuse_large_body(request: Request, error: BodyTooLarge) -> JSONResponse:
        return refuse(core, request.headers, request.url.path, error.error(), api_of(request.url.path))

    health_answers = {
        200: {"description": "Serving", "content": {"application/json": {"schema": HEALTH}}},
        503: {"description": "Starting or shutting down", "content": {"application/json": {"schema": HEALTH}}},
    }

    @app.get("/health", responses=health_answers)
    async def health() -> Response:
        ready = core.ready()
        return JSONResponse({"status": "ok" if ready else "unavailable"}, status_code=200 if ready else 503)

    @app.get("/v1/models", responses=answers(OPENAI, MODELS))
    async def models(request: Request) -> Response:
        async def listing(call: Call) -> Response:
            return JSONResponse({"object": "list", "data": [model_card(m) for m in core.models()]})

        return await handle(core, request, {}, listing)

    @app.post("/v1/embeddings", responses=answers(OPENAI, EMBEDDINGS))
    async def embeddings(body: EmbeddingsRequest, request: Request) -> Response:
        async def embed(call: Call) -> Response:
            one = isinstance(body.input, str) or (body.input and all(isinstance(t, int) for t in body.input))
            embed = EmbedRequest(
                model=body.model,
                inputs=[body.input] if one else body.input,  # texts, or token-id arrays: the model's own ids
                dimensions=body.dimensions,
                prompt_name=body.prompt_name,
                input_type=body.input_type,
                truncation_direction=body.truncation_direction,
                outputs=("dense",),  # OpenAI's embeddings are dense vectors: a model without them refuses
            )
            result = await core.embeddings.embed(embed, call.record)
            data = [
                {"object": "embedding", "index": i, "embedding": embedding_values(v, body.encoding_format)}
                for i, v in enumerate(result.vectors)
            ]
            tokens = result.usage.prompt_tokens
            return FastJSONResponse(
                {
                    "object": "list",
                    "data": data,
                    "model": result.model,
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                }
            )

        return await handle(core, request, EMBEDDING_NAMES, embed)

    completions_answers = answers(OPENAI, COMPLETION)
    event = {
        "type": "string",
        "description": "a chunk, or after it started an error in OpenAI's shape",
        "contentMediaType": "application/json",
        "contentSchema": {"anyOf": [CHUNK, {"$ref": REF.format(model="OpenAIError")}]},
    }
    done = {"const": "[DONE]", "description": "the last event"}
    completions_answers[200]["content"]["text/event-stream"] = {  # each server-sent event
        "schema": {
            "anyOf": [
                {"type": "object", "properties": {"data": done}, "required": ["data"]},
                {"type": "object", "properties": {"data": event}, "required": ["data"]},
            ]
        }
    }

    @app.post("/v1/completions", responses=completions_answers)
    async def completions(body: CompletionsRequest, request: Request) -> Response:
        async def complete(call: Call) -> Response:
            unsupported = body.unsupported()
            if unsupported:
                raise invalid(unsupported, "not served by attnserve")
            prompts = prompts_of(body)
            options = generation_options(body)
            if body.stream:
                abort = functools.partial(abort_connection, request.scope)
                return await stream_completions(core, call, body, prompts, options, abort)
            return await whole_completions(core, call, body, prompts, options)

        return await handle(core, request, COMPLETION_NAMES, complete)

    return app


async def whole_completions(core, call: Call, body, prompts: list[str], options) -> JSONResponse:
    """Every prompt generated at once (the scheduler batches them), answered in order."""
    results = await core.generation.generate_all(body.model, prompts, options, call.record)
    choices = []
    for r in results:
        answers = r.hypotheses if body.n > 1 else [r]
        for answer in answers:
            choices.append(
                {
                    "index": len(choices),
                    "text": answer.text,
                    "logprobs": None,
                    "finish_reason": finish_reason(answer.finish_reason),
                }
            )
    figures = call.record.figures
    return JSONResponse(completion(results[0].model, choices, figures["prompt_tokens"], figures["generated_tokens"]))


def completion(model: str, choices: list[dict], prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


async def stream_completions(core, call: Call, body, prompts: list[str], options, abort) -> PacedEventStream:
    """Server-sent events: each prompt's text as it comes (its choice index says which), then [DONE]. The
    requests are checked and queued before the answer starts, so a refusal is a plain error status."""
    streams = await core.generation.stream_all(body.model, prompts, options, call.record)
    call.hold()
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    return PacedEventStream(events(call, streams, include_usage), call, core.streams, abort)


async def events(call: Call, streams: list, include_usage: bool) -> AsyncIterator[bytes]:
    """The prompts' events merged as they come; the call closes when the last ends, fails or the client goes."""
    model, completion_id = streams[0].model, f"cmpl-{uuid.uuid4().hex}"
    usage = {"prompt_tokens": 0, "completion_tokens": 0}
    try:
        async for index, event in merged(streams):
            reason = finish_reason(event.finish_reason) if event.finish_reason else None
            if reason is not None:
                usage["prompt_tokens"] += event.usage.prompt_tokens
                usage["completion_tokens"] += event.usage.generated_tokens
            choice = {"index": index, "text": event.text, "logprobs": None, "finish_reason": reason}
            yield sse(chunk(completion_id, model, [choice]))
        if include_usage:
            yield sse({**chunk(completion_id, model, []), "usage": {**usage, "total_tokens": sum(usage.values())}})
        yield sse("[DONE]")
    except asyncio.CancelledError:  # the client went away: its sequences stop with the merge
        call.went_away()
        raise
    except ServiceError as error:  # after the answer started: the error goes as the last event
        yield sse(openai_error(call.refuse(error)))
    except Exception:
        log.exception("completions stream failed")
        yield sse(openai_error(call.refuse(failure(call.record.rpc))))
    finally:
        call.close()


def chunk(completion_id: str, model: str, choices: list[dict]) -> dict:
    return {
        "id": completion_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
