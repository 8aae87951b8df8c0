"""The gRPC port's part of every call (attnserve.v1 and the Open Inference Protocol): its table of status
codes, requests that do not parse refused with INVALID_ARGUMENT (not grpcio's INTERNAL), and a refusal
sent as the call's status, or as a message on a stream. The lifecycle itself is the core's (core/calls/lifecycle.py)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping

import grpc

from ..core.calls.lifecycle import Call, Refused, StatusTable
from ..core.serving import ServingCore
from ..errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Overloaded,
    ServiceError,
    Unauthenticated,
    Unavailable,
)
from ..ops.call_record import request_id

GRPC_STATUSES = StatusTable(
    ok="OK",
    cancelled="CANCELLED",
    statuses={
        InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
        NotFound: grpc.StatusCode.NOT_FOUND,
        Overloaded: grpc.StatusCode.RESOURCE_EXHAUSTED,  # QueueFull too
        Unavailable: grpc.StatusCode.UNAVAILABLE,
        FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
        DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
        Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    },
    internal=grpc.StatusCode.INTERNAL,
    code=lambda status: status.name,
    passes=(grpc.aio.AbortError,),  # a handler's own abort
)


def status_code(error: ServiceError) -> grpc.StatusCode:
    return GRPC_STATUSES.status(error)


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


def call_of(core: ServingCore, context: grpc.aio.ServicerContext, rpc: str, names: Mapping[str, str]):
    """The core's lifecycle for one gRPC call; a caller gone after its deadline is DEADLINE_EXCEEDED."""

    def cancelled() -> str:
        remaining = context.time_remaining()
        return "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0 else "CANCELLED"

    return core.call(rpc, request_id(context.invocation_metadata()), GRPC_STATUSES, names, cancelled)


def handler(method):
    """A servicer method(request, context, call) run as one call of the core (its request parsed or
    refused); a refusal is the call's status, its fields named as the servicer's `field_names` says."""

    @functools.wraps(method)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        try:
            async with call_of(self.core, context, method.__name__, getattr(self, "field_names", {})) as call:
                if isinstance(request, UnparsedRequest):
                    message = f"request: not a valid message for {method.__name__}: {request.error}"
                    raise InvalidArgument(message, "request")
                return await method(self, request, context, call)
        except Refused as refused:
            await context.abort(refused.refusal.status, refused.refusal.message)

    return wrapper


async def answer_on_stream(
    core: ServingCore,
    context: grpc.aio.ServicerContext,
    rpc: str,
    names: Mapping[str, str],
    work: Callable[[Call], Awaitable[None]],
) -> str | None:
    """One request of a stream of requests, run as a call of its own; its refusal is returned as the
    message for the stream to carry, instead of ending the stream and the other requests on it."""
    try:
        async with call_of(core, context, rpc, names) as call:
            await work(call)
    except Refused as refused:
        return refused.refusal.message
    return None
