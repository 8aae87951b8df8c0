"""The HTTP port's part of every call: each API's statuses and error shape (OpenAI's here; DeepL's and
LibreTranslate's in their modules), and a refusal sent as that. The lifecycle itself is the core's
(core/calls/lifecycle.py). The core names fields as the gRPC API does ("params.max_new_tokens"); a refusal here
names the field as this front door's caller sent it ("max_tokens")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import pydantic_core
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.calls.lifecycle import Call, Refusal, Refused, StatusTable
from ..core.serving import ServingCore
from ..errors import (
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    Overloaded,
    RequestTooLarge,
    Unauthenticated,
    Unavailable,
    invalid,
)
from ..ops.auth import BEARER
from ..ops.call_record import REQUEST_ID_HEADER, request_id

# HTTP status and OpenAI's error type for each kind of domain error.
HTTP_STATUSES = StatusTable(
    ok="200",
    cancelled="499",  # the client closed the connection (nginx's code)
    statuses={
        InvalidArgument: (400, "invalid_request_error"),
        RequestTooLarge: (413, "invalid_request_error"),
        NotFound: (404, "invalid_request_error"),
        Overloaded: (429, "rate_limit_error"),  # QueueFull too
        Unavailable: (503, "server_error"),
        FailedPrecondition: (400, "invalid_request_error"),
        DeadlineExceeded: (504, "server_error"),
        Unauthenticated: (401, "authentication_error"),
    },
    internal=(500, "server_error"),
    code=lambda status: str(status[0]),
)


# The statuses of the translation APIs (DeepL's, LibreTranslate's): plain HTTP codes, 403 for a missing or
# wrong key, as theirs are.
KEY_STATUSES = StatusTable(
    ok="200",
    cancelled="499",
    statuses={
        InvalidArgument: 400,
        RequestTooLarge: 413,
        NotFound: 404,
        Overloaded: 429,  # their clients retry it
        Unavailable: 503,
        FailedPrecondition: 400,
        DeadlineExceeded: 504,
        Unauthenticated: 403,
    },
    internal=500,
    code=str,
)


# Plain HTTP statuses with 401 for a missing or wrong token: Cohere's and KServe REST's (Triton's).
BEARER_STATUSES = StatusTable(
    ok="200",
    cancelled="499",
    statuses={**KEY_STATUSES.statuses, Unauthenticated: 401},
    internal=500,
    code=str,
)


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(BaseModel):
    """OpenAI's error body."""

    error: OpenAIErrorDetail


class MessageError(BaseModel):
    """DeepL's and Cohere's error body."""

    message: str


class TextError(BaseModel):
    """LibreTranslate's and Triton's (KServe REST's) error body."""

    error: str


# What each kind of domain error means to a caller, for the OpenAPI document's responses.
MEANINGS = {
    InvalidArgument: "a field not valid: the message names it and its limit",
    RequestTooLarge: "the body over max_message_bytes, or inputs over a limit",
    NotFound: "no served model of that name",
    Overloaded: "the server's queue or concurrency limit is full: the same request may succeed later",
    Unavailable: "the server is starting or shutting down",
    FailedPrecondition: "the server is not set up for this request",
    DeadlineExceeded: "the call ran out of time on the server's side",
    Unauthenticated: "no valid token, where the server requires one",
    Internal: "the server failed (what failed is in its log)",
}


def openai_error(refusal: Refusal) -> dict:
    return {
        "error": {"message": refusal.message, "type": refusal.status[1], "param": refusal.field, "code": refusal.kind}
    }


@dataclass(frozen=True)
class HttpApi:
    """One API on the HTTP port: how its calls are named in records and metrics, its statuses (an HTTP
    status first), and its error body."""

    name: str  # the records' prefix: http (OpenAI's), deepl, libretranslate
    statuses: StatusTable  # each an HTTP status, or a tuple of one and the API's error type
    error_body: Callable[[Refusal], dict]
    error_model: type[BaseModel]  # error_body's shape, for the OpenAPI document
    auth_schemes: tuple[str, ...] = (BEARER,)  # how its clients send a token in the authorization header
    key_in_body: bool = False  # its clients may send the token in the body instead: the route checks it
    route_name: Callable[[str], str] | None = None  # for paths with a model's name in them (KServe's)

    def rpc_name(self, path: str) -> str:
        """A route's name in call records and metrics: /v1/embeddings -> http.embeddings; / -> tei.root."""
        if self.route_name is not None:
            return self.route_name(path)
        return f"{self.name}.{path.rsplit('/', 1)[-1] or 'root'}"

    def error_responses(self) -> dict[int, dict]:
        """The error statuses any of its routes may answer, each with the error body and what it means (for
        FastAPI's `responses`)."""
        meanings: dict[int, list[str]] = {}
        for kind, status in [*self.statuses.statuses.items(), (Internal, self.statuses.internal)]:
            code = status[0] if isinstance(status, tuple) else status
            meanings.setdefault(code, []).append(MEANINGS[kind])
        return {
            code: {"model": self.error_model, "description": "; or ".join(meanings[code]).capitalize()}
            for code in sorted(meanings)
        }

    def error_response(self, refusal: Refusal, call_id: str | None = None) -> JSONResponse:
        status = refusal.status[0] if isinstance(refusal.status, tuple) else refusal.status  # (status, type)
        response = JSONResponse(self.error_body(refusal), status_code=status)
        if call_id:
            response.headers[REQUEST_ID_HEADER] = call_id
        return response


OPENAI = HttpApi("http", HTTP_STATUSES, openai_error, OpenAIError)


class BodyTooLarge(Exception):
    """A request body over its limit (raised while it is read): max_message_bytes, or for an audio upload
    max_upload_bytes."""

    def __init__(self, size: int, limit: int, setting: str = "max_message_bytes"):
        super().__init__(size, limit)
        self.size, self.limit, self.setting = size, limit, setting

    def error(self) -> RequestTooLarge:
        return RequestTooLarge(f"request body: {self.size} bytes or more; at most {self.limit} ({self.setting})")


class FastJSONResponse(JSONResponse):
    """JSON by pydantic-core's Rust encoder: a vector of 384 floats in 18 us, where json.dumps takes 155."""

    def render(self, content) -> bytes:
        return pydantic_core.to_json(content)


def field_of(loc) -> str:
    """A validation error's place as the caller wrote it: ("body", "input", "list[str]", 3) -> input[3]
    (the type names pydantic puts in for a union's members are dropped)."""
    parts = [p for p in loc if p != "body"]
    if not parts:
        return "body"
    return str(parts[0]) + "".join(f"[{p}]" for p in parts[1:] if isinstance(p, int))


def body_error(error: ValidationError) -> InvalidArgument:
    """A body pydantic refused, by its first wrong field (one of a union's members' complaints would
    mislead: a field that fits none of its types is said to)."""
    errors = error.errors()
    field = field_of(errors[0]["loc"])
    if sum(field_of(e["loc"]) == field for e in errors) > 1:
        return invalid(field, "not of a type it takes (the schema: /docs)")
    return invalid(field, errors[0]["msg"])


def refuse(core: ServingCore, headers: Mapping[str, str], path: str, error, api: HttpApi = OPENAI) -> JSONResponse:
    """A request turned away before its route runs (no valid token, a body too large or not valid), as
    a call of its own: recorded and logged."""
    call_id = request_id(headers.items())
    return api.error_response(core.refuse(api.rpc_name(path), call_id, api.statuses, error), call_id)


async def handle(
    core: ServingCore,
    request: Request,
    names: Mapping[str, str],
    work: Callable[[Call], Awaitable[Response]],
    api: HttpApi = OPENAI,
) -> Response:
    """work(call) as one call of the core; a refusal is its status and the API's error body. A call whose
    answer streams (call.hold()) is closed by its stream."""
    rpc = api.rpc_name(request.url.path)
    call_id = request_id(request.headers.items())
    try:
        async with core.call(rpc, call_id, api.statuses, names) as call:
            response = await work(call)
    except Refused as refused:
        response = api.error_response(refused.refusal)
    response.headers[REQUEST_ID_HEADER] = call_id
    return response
