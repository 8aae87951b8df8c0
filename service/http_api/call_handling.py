"""How every HTTP API call is handled: a record opened, admission asked, and domain errors mapped to HTTP
statuses and OpenAI's error shape, here and nowhere else. The core names fields as the gRPC API does
("params.max_new_tokens"); an error here names the field as this front door's caller sent it ("max_tokens")."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.serving import ServingCore
from ..errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Overloaded,
    ServiceError,
    Unavailable,
    renamed,
)
from ..ops.call_record import REQUEST_ID_HEADER, CallRecord, request_id
from ..ops.metrics import Metrics

log = logging.getLogger("attnserve.http")

# HTTP status and OpenAI's error type for each kind of domain error.
STATUSES = {
    InvalidArgument: (400, "invalid_request_error"),
    NotFound: (404, "invalid_request_error"),
    Overloaded: (429, "rate_limit_error"),  # QueueFull too
    Unavailable: (503, "server_error"),
    FailedPrecondition: (400, "invalid_request_error"),
    DeadlineExceeded: (504, "server_error"),
}


def status_of(error: ServiceError) -> tuple[int, str]:
    for kind in type(error).__mro__:
        if kind in STATUSES:
            return STATUSES[kind]
    return 500, "server_error"


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, kind: str, param: str | None = None, code: str | None = None):
    return JSONResponse(error_body(message, kind, param, code), status_code=status)


class BodyTooLarge(Exception):
    """A request body over max_message_bytes (raised while it is read)."""

    def __init__(self, size: int, limit: int):
        super().__init__(size, limit)
        self.size, self.limit = size, limit


def too_large_response(error: BodyTooLarge) -> JSONResponse:
    message = f"request body: {error.size} bytes or more; at most {error.limit} (max_message_bytes)"
    return error_response(413, message, "invalid_request_error", None, "RequestTooLarge")


class HttpCall:
    """An admitted call's record, and the field names of its endpoint."""

    def __init__(self, core: ServingCore, record: CallRecord, names: dict[str, str]):
        self.core, self.record, self.names = core, record, names
        self.admitted = False
        self.streaming = False  # a streamed answer closes the call when the stream ends (close())

    def error(self, error: ServiceError) -> JSONResponse:
        status, kind = status_of(error)
        param, message = renamed(error, self.names)
        self.record.code = str(status)
        return error_response(status, message, kind, param, type(error).__name__)

    def gave_up(self, error: ServiceError) -> None:
        """A streamed answer ended by the server after its status went out: the record says why."""
        self.record.code = str(status_of(error)[0])

    def close(self) -> None:
        """Once per call, whichever path gets here first."""
        if self.record.closed:
            return
        if self.admitted:
            self.core.admission.leave()
        self.record.close()


async def handle(core: ServingCore, metrics: Metrics, request: Request, name: str, names: dict[str, str],
                 work: Callable[[HttpCall], Awaitable[Response]]) -> Response:  # fmt: skip
    """Admission first, then work(call); a domain error becomes its status, anything else 500. Every call,
    admitted or not, ends with one record (its code: the HTTP status), as on the gRPC port; a call whose
    answer streams is closed by its stream."""
    call = HttpCall(core, CallRecord(name, request_id(request.headers.items()), metrics, code="200"), names)
    try:
        core.admission.admit()
        call.admitted = True
        response = await work(call)
    except ServiceError as error:
        call.streaming = False
        response = call.error(error)
    except Exception:
        log.exception("%s failed", name)
        call.streaming = False
        call.record.code = "500"
        response = error_response(500, f"{name}: internal error (see the server log)", "server_error")
    finally:
        if not call.streaming:
            call.close()
    response.headers[REQUEST_ID_HEADER] = call.record.id
    return response
