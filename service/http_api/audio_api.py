"""OpenAI's audio API on the HTTP port: POST /v1/audio/transcriptions and /v1/audio/translations, a
multipart upload (file, model, language, prompt, response_format, temperature, timestamp_granularities[],
include[], stream, chunking_strategy) answered as OpenAI answers: json, text, srt, vtt or verbose_json
(every segment's fields, and with word granularity every word's), or server-sent transcript.text.delta
events, a window's segments at a time, and transcript.text.done."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

import langcodes
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ..core.calls.lifecycle import Call, failure
from ..core.serving import ServingCore
from ..core.transcription.long_form import Segment
from ..core.transcription.transcription import Heard, TranscribeRequest
from ..errors import ServiceError, invalid
from .audio_chunking import ServerVad, chunking_of, is_chunking_key
from .call_handling import OPENAI, BodyTooLarge, FastJSONResponse, handle, openai_error
from .event_stream import AbortConnection, PacedEventStream, sse
from .openapi_document import answers, request_body
from .request_fields import FALSE, TRUE

log = logging.getLogger("attnserve.http")
MULTIPART = "multipart/form-data"
FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
GRANULARITIES = ("segment", "word")
PATHS = {"/v1/audio/transcriptions": "transcribe", "/v1/audio/translations": "translate"}
FORM_ROOM = 64 * 1024  # bytes of an upload's body beside its file: the other fields, the parts' headers


class TranslationUpload(BaseModel):
    """The multipart body of /v1/audio/translations: any language's speech into English text."""

    model_config = ConfigDict(extra="forbid")
    file: str = Field(
        json_schema_extra={"contentMediaType": "application/octet-stream"},
        description="the audio, in any format FFmpeg reads",
    )
    model: str = Field("", json_schema_extra={"x-filled-from": "speech_translation_models"})
    prompt: str = Field("", max_length=4000, description="text the speech continues")
    response_format: str = Field("json", json_schema_extra={"enum": list(FORMATS)})
    temperature: float = Field(0.0, ge=0.0, le=1.0, description="the first; on fallback it rises by 0.2 to 1")


class TranscriptionUpload(TranslationUpload):
    """The multipart body of /v1/audio/transcriptions. Segment and word timestamps come with verbose_json
    (segments unless only words are asked for); a stream sends text (json or text)."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "allOf": [
                {
                    "if": {"required": ["timestamp_granularities[]"]},
                    "then": {
                        "required": ["response_format"],
                        "properties": {"response_format": {"const": "verbose_json"}},
                    },
                },
                {
                    "if": {"required": ["include[]"]},
                    "then": {"properties": {"response_format": {"const": "json"}}},
                },
                {
                    "if": {"required": ["stream"], "properties": {"stream": {"enum": list(TRUE)}}},
                    "then": {"properties": {"response_format": {"enum": ["json", "text"]}}},
                },
            ]
        },
    )
    model: str = Field("", json_schema_extra={"x-filled-from": "transcription_models"})
    language: str = Field("", description="ISO 639-1 code of the speech; empty: detected")
    timestamp_granularities: list[str] = Field(
        default_factory=list,
        alias="timestamp_granularities[]",
        json_schema_extra={"items": {"enum": list(GRANULARITIES)}},
    )
    include: list[str] = Field(
        default_factory=list,
        alias="include[]",
        json_schema_extra={"items": {"enum": ["logprobs"]}},
        description="logprobs: each text token's log-probability (json, and the stream's deltas)",
    )
    stream: bool = False
    chunking_strategy: Literal["auto"] | ServerVad | None = Field(
        None,
        description="absent: window after window, each continuing the text before it; auto or server_vad: "
        "cut at silences (the model's voice activity detector), the pieces decoded at once",
    )


def boolean(value: str, field: str) -> bool:
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise invalid(field, f"{value!r}; true or false")


def number(value: str, field: str) -> float:
    try:
        parsed = float(value)
    except ValueError:
        raise invalid(field, f"{value!r}; a number") from None
    if not math.isfinite(parsed):
        raise invalid(field, f"{value!r}; a finite number")
    return parsed


@dataclass(frozen=True)
class Asked:
    """What an upload asks of the answer."""

    response_format: str
    stream: bool
    segments: bool  # verbose_json: its segments (all but a request for words alone)
    words: bool  # verbose_json: its words
    logprobs: bool  # json and stream events: each text token's log-probability


async def read_form(request: Request, task: str) -> tuple[TranscribeRequest, Asked]:
    """The upload and its fields -> (the core's request, what it asks of the answer), refused by field name."""
    try:
        form = await request.form(max_files=1, max_fields=64)
    except BodyTooLarge as error:
        raise error.error() from None
    except Exception as error:  # the multipart parser's own errors: a body that is not a form
        raise invalid("body", f"not a multipart/form-data body: {error}") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise invalid("file", "required: the audio, as a file part of a multipart/form-data body")
    fields = {key: value for key, value in form.multi_items() if isinstance(value, str)}
    known = {"model", "prompt", "response_format", "temperature"}
    if task == "transcribe":
        known |= {"language", "stream", "timestamp_granularities[]", "include[]", "chunking_strategy"}
    for key in fields:
        if key not in known and not (task == "transcribe" and is_chunking_key(key)):
            raise invalid(key, "not a field of this call")
    response_format = fields.get("response_format", "json")
    if response_format not in FORMATS:
        raise invalid("response_format", f"{response_format!r}; one of {', '.join(FORMATS)}")
    granularities = form.getlist("timestamp_granularities[]")
    for granularity in granularities:
        if granularity not in GRANULARITIES:
            raise invalid("timestamp_granularities[]", f"{granularity!r}; one of {', '.join(GRANULARITIES)}")
    if granularities and response_format != "verbose_json":
        raise invalid("timestamp_granularities[]", "only with response_format verbose_json")
    included = form.getlist("include[]")
    for item in included:
        if item != "logprobs":
            raise invalid("include[]", f"{item!r}; logprobs")
    if included and response_format != "json":
        raise invalid("include[]", f"logprobs come with response_format json, not {response_format}")
    stream = boolean(fields["stream"], "stream") if "stream" in fields else False
    if stream and response_format not in ("json", "text"):
        raise invalid("stream", f"not with response_format {response_format}: a stream sends text events")
    transcription = TranscribeRequest(
        audio=await upload.read(),
        model=fields.get("model", ""),
        task=task,
        language=fields.get("language", ""),
        prompt=fields.get("prompt", ""),
        temperature=number(fields["temperature"], "temperature") if "temperature" in fields else 0.0,
        word_timestamps="word" in granularities,
        chunking_strategy=chunking_of(fields),
    )
    segments = not granularities or "segment" in granularities
    return transcription, Asked(response_format, stream, segments, "word" in granularities, bool(included))


def language_name(code: str) -> str:
    """OpenAI names the language in verbose_json: "english"."""
    return langcodes.Language.get(code).display_name().lower()


def clock(seconds: float, separator: str) -> str:
    milliseconds = round(seconds * 1000)
    hours, rest = divmod(milliseconds, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}{separator}{rest % 1000:03d}"


def subtitles(segments: tuple[Segment, ...], kind: str) -> str:
    separator = "," if kind == "srt" else "."
    cues = []
    for number_, s in enumerate(segments, 1):
        times = f"{clock(s.start, separator)} --> {clock(s.end, separator)}"
        cues.append(f"{number_}\n{times}\n{s.text.strip()}\n" if kind == "srt" else f"{times}\n{s.text.strip()}\n")
    return ("WEBVTT\n\n" if kind == "vtt" else "") + "\n".join(cues)


def usage(duration: float) -> dict:
    return {"type": "duration", "seconds": math.ceil(duration)}


def segment_fields(index: int, s: Segment) -> dict:
    return {
        "id": index,
        "seek": s.seek,
        "start": round(s.start, 2),
        "end": round(s.end, 2),
        "text": s.text,
        "tokens": s.tokens,
        "temperature": s.temperature,
        "avg_logprob": s.avg_logprob,
        "compression_ratio": s.compression_ratio,
        "no_speech_prob": s.no_speech_prob,
    }


def word_fields(segments: tuple[Segment, ...]) -> list[dict]:
    """Every word of the transcript, as OpenAI spells them (no leading space), with openai-whisper's probability."""
    words = [w for s in segments for w in s.words]
    return [
        {"word": w.word.strip(), "start": round(w.start, 2), "end": round(w.end, 2), "probability": w.probability}
        for w in words
    ]


def logprob_fields(core: ServingCore, model: str, segments) -> list[dict]:
    """OpenAI's logprobs: each text token's text, log-probability and bytes."""
    found = core.transcription.text_logprobs(model, segments)
    return [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)} for t in found]


def answer(core: ServingCore, transcript, asked: Asked) -> Response:
    response_format = asked.response_format
    if response_format == "text":
        return PlainTextResponse(transcript.text.strip() + "\n")
    if response_format in ("srt", "vtt"):
        return PlainTextResponse(subtitles(transcript.segments, response_format))
    if response_format == "json":
        logprobs = {"logprobs": logprob_fields(core, transcript.model, transcript.segments)} if asked.logprobs else {}
        return FastJSONResponse({"text": transcript.text.strip(), **logprobs, "usage": usage(transcript.duration)})
    verbose = {
        "task": transcript.task,
        "language": language_name(transcript.language),
        "duration": round(transcript.duration, 2),
        "text": transcript.text.strip(),
    }
    if asked.segments:
        verbose["segments"] = [segment_fields(i, s) for i, s in enumerate(transcript.segments)]
    if asked.words:
        verbose["words"] = word_fields(transcript.segments)
    return FastJSONResponse({**verbose, "usage": usage(transcript.duration)})


async def events(core: ServingCore, call: Call, heard: Heard, logprobs: bool) -> AsyncIterator[bytes]:
    """Each segment as one delta once its window is final (with its tokens' log-probabilities, where asked),
    then the whole text."""
    texts = []
    try:
        async for segment in core.transcription.segments(heard):
            texts.append(segment.text)
            delta = {"type": "transcript.text.delta", "delta": segment.text}
            if logprobs:
                delta["logprobs"] = logprob_fields(core, heard.model.name, [segment])
            yield sse(delta)
        yield sse({"type": "transcript.text.done", "text": "".join(texts).strip(), "usage": usage(heard.duration)})
    except asyncio.CancelledError:
        call.went_away()
        raise
    except ServiceError as error:
        yield sse(openai_error(call.refuse(error)))
    except Exception:
        log.exception("transcription stream failed")
        yield sse(openai_error(call.refuse(failure(call.record.rpc))))
    finally:
        call.close()


def add_audio_routes(app: FastAPI, core: ServingCore, abort_connection: AbortConnection) -> None:
    text = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    responses = answers(OPENAI, text, "The transcript: json or verbose_json; text, srt or vtt as text/plain")
    responses[200]["content"]["text/plain"] = {"schema": {"type": "string"}}
    responses[200]["content"]["text/event-stream"] = {"schema": {"type": "string"}}  # with stream
    uploads = {"transcribe": TranscriptionUpload, "translate": TranslationUpload}
    for path, task in PATHS.items():
        body = request_body(app, uploads[task], MULTIPART)
        route = audio_route(core, task, abort_connection)
        app.add_api_route(path, route, methods=["POST"], openapi_extra=body, responses=responses)


def audio_route(core: ServingCore, task: str, abort_connection: AbortConnection):
    """The route of one task: transcribe, or translate into English."""

    async def route(request: Request) -> Response:
        async def transcribe(call: Call) -> Response:
            transcription, asked = await read_form(request, task)
            if asked.stream:
                heard = await core.transcription.prepare(transcription, call.record.rpc)
                call.hold()
                abort = functools.partial(abort_connection, request.scope)
                return PacedEventStream(events(core, call, heard, asked.logprobs), call, core.streams, abort)
            transcript = await core.transcription.transcribe(transcription, call.record.rpc)
            return answer(core, transcript, asked)

        return await handle(core, request, {}, transcribe)

    return route
