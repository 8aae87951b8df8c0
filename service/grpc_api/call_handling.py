"""How every call on the gRPC port (attnserve.v1 and the Open Inference Protocol) is handled: a record
opened, admission asked, the handler awaited, and domain errors mapped to gRPC status codes, here and
nowhere else. Requests that do not parse get INVALID_ARGUMENT, not grpcio's INTERNAL."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable

import grpc

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
from ..ops.call_record import CallRecord, request_id
from ..ops.metrics import Metrics

log = logging.getLogger("attnserve.grpc")

STATUS_CODES = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    Overloaded: grpc.StatusCode.RESOURCE_EXHAUSTED,  # QueueFull too
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def status_code(error: ServiceError) -> grpc.StatusCode:
    for kind in type(error).__mro__:
        if kind in STATUS_CODES:
            return STATUS_CODES[kind]
    return grpc.StatusCode.INTERNAL


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


def register(add_to_server, servicer, server: grpc.aio.Server) -> None:
    """add_to_server(servicer, server) (a generated add_*Servicer_to_server), with request parsing failures
    kept for the handler to refuse."""

    class Registrar:
        def add_generic_rpc_handlers(self, handlers):
            pass  # the same handlers come again through add_registered_method_handlers

        def add_registered_method_handlers(self, service, handlers):
            handlers = {
                n: h._replace(request_deserializer=_lenient(h.request_deserializer)) for n, h in handlers.items()
            }
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
            server.add_registered_method_handlers(service, handlers)

    add_to_server(servicer, Registrar())


class CallContext:
    """What a servicer method gets: the call's record and its gRPC context."""

    def __init__(self, record: CallRecord, context: grpc.aio.ServicerContext):
        self.record, self.context = record, context


@contextlib.asynccontextmanager
async def run_call(
    core: ServingCore, metrics: Metrics, context: grpc.aio.ServicerContext, name: str, names: dict[str, str]
):
    """Admission first; then a domain error becomes its status (its field named as this service's callers
    name it: `names` maps the core's field names to theirs), anything else INTERNAL. Every call,
    admitted or not, ends with one record: counted, timed and logged. A refused call's record closes
    before its status goes out (abort sends it at once), so a client that sees the error and then
    scrapes /metrics or reads the log finds the call there."""
    record = CallRecord(name, request_id(context.invocation_metadata()), metrics)
    admitted = False

    def end() -> None:  # once per call, whichever path gets here first
        if not record.closed:
            if admitted:
                core.admission.leave()
            record.close()

    try:
        core.admission.admit()
        admitted = True
        yield CallContext(record, context)
    except ServiceError as error:
        code = status_code(error)
        record.code = code.name
        end()
        await context.abort(code, renamed(error, names)[1])
    except (asyncio.CancelledError, GeneratorExit):
        remaining = context.time_remaining()
        expired = remaining is not None and remaining <= 0
        record.code = "DEADLINE_EXCEEDED" if expired else "CANCELLED"
        raise
    except grpc.aio.AbortError:
        raise
    except Exception:
        record.code = "INTERNAL"
        log.exception("%s failed", name)
        end()
        await context.abort(grpc.StatusCode.INTERNAL, f"{name}: internal error (see the server log)")
    finally:
        end()


def handler(method):
    """A servicer method behind run_call, its request parsed or refused; errors name fields as the
    servicer's `field_names` says."""

    @functools.wraps(method)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        names = getattr(self, "field_names", {})
        async with run_call(self.core, self.metrics, context, method.__name__, names) as call:
            if isinstance(request, UnparsedRequest):
                raise InvalidArgument(f"request: not a valid message for {method.__name__}: {request.error}", "request")
            return await method(self, request, call)

    return wrapper


async def answer_on_stream(
    core: ServingCore, metrics: Metrics, context: grpc.aio.ServicerContext, name: str, names: dict[str, str],
    work: Callable[[CallContext], Awaitable[None]],
) -> str | None:  # fmt: skip
    """One request of a stream of requests, handled as a call of its own (admitted, recorded, its errors
    mapped), except that a refusal or failure is returned as its message for the stream to carry, instead
    of ending the stream and the other requests on it."""
    record = CallRecord(name, request_id(context.invocation_metadata()), metrics)
    admitted = False
    try:
        core.admission.admit()
        admitted = True
        await work(CallContext(record, context))
        return None
    except ServiceError as error:
        record.code = status_code(error).name
        return renamed(error, names)[1]
    except asyncio.CancelledError:
        if record.code == "OK":  # else the stream gave it up, and said why (DEADLINE_EXCEEDED)
            record.code = "CANCELLED"
        raise
    except Exception:
        record.code = "INTERNAL"
        log.exception("%s failed", name)
        return f"{name}: internal error (see the server log)"
    finally:
        if admitted:
            core.admission.leave()
        record.close()
