"""One call's lifecycle, the same for every front door: its record opened, admission asked, the work run,
and its outcome (answered, refused, cancelled, failed) recorded once, a refusal put in the door's own
status and field names (Refused). A door keeps only its StatusTable and how it sends a Refusal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from ...errors import Internal, ServiceError, renamed
from ...ops.call_record import EVERY_CALL, AccessLog, CallRecord
from ...ops.metrics import Metrics
from .admission import Admission

log = logging.getLogger("attnserve.calls")

Status = TypeVar("Status")


@dataclass(frozen=True)
class StatusTable(Generic[Status]):
    """A front door's statuses: one per kind of domain error, and how its call records name them."""

    ok: str  # the record's code for an answered call
    cancelled: str  # the record's code for a call whose caller went away
    statuses: Mapping[type[ServiceError], Status]  # a kind not here (Internal among them) gets `internal`
    internal: Status
    code: Callable[[Status], str]  # a status as the call record names it
    passes: tuple[type[BaseException], ...] = ()  # the door's own control flow, let through untouched

    def status(self, error: ServiceError) -> Status:
        for kind in type(error).__mro__:
            if kind in self.statuses:
                return self.statuses[kind]
        return self.internal


@dataclass(frozen=True)
class Refusal(Generic[Status]):
    """A refused or failed call as its door sends it: the status, and the field and message as this door's
    callers name the field."""

    status: Status
    field: str | None
    message: str
    kind: str  # the domain error's class name ("InvalidArgument")


class Call(Generic[Status]):
    """One call of a front door: its record (for the capabilities to fill), its door's statuses and field
    names, and the admission it leaves when it closes."""

    def __init__(
        self, record: CallRecord, table: StatusTable[Status], names: Mapping[str, str], admission: Admission | None
    ):
        """admission: what the call leaves when it closes (None: it was never admitted)."""
        self.record, self.table, self.names, self._admission = record, table, names, admission
        self.held = False  # the answer goes on after the block (a stream): close() ends the call

    def hold(self) -> None:
        """The answer streams on after the call's block returns; whoever sends it calls close() at its end."""
        self.held = True

    def refuse(self, error: ServiceError) -> Refusal[Status]:
        """The error as this door sends it, recorded as the call's outcome (also for an error that ends a
        streamed answer after it started)."""
        status = self.table.status(error)
        field, message = renamed(error, self.names)
        self.record.code = self.table.code(status)
        return Refusal(status, field, message, type(error).__name__)

    def went_away(self, code: str | None = None) -> None:
        """The caller left before the answer ended: recorded as `code` (the table's), unless the call
        already says why it ended."""
        if self.record.code == self.table.ok:
            self.record.code = code or self.table.cancelled

    def close(self) -> None:
        """Once per call, whichever path gets here first: admission left, the record counted and logged."""
        if self.record.closed:
            return
        if self._admission is not None:
            self._admission.leave()
        self.record.close()


class Refused(Exception):
    """A call refused or failed, its record closed: what the door sends (`refusal`)."""

    def __init__(self, refusal: Refusal):
        super().__init__(refusal.message)
        self.refusal = refusal


def failure(rpc: str) -> Internal:
    return Internal(f"{rpc}: internal error (see the server log)")


@contextlib.asynccontextmanager
async def run_call(
    admission: Admission,
    metrics: Metrics,
    rpc: str,
    request_id: str,
    table: StatusTable[Status],
    names: Mapping[str, str],
    *,
    cancelled: Callable[[], str] | None = None,
    access: AccessLog = EVERY_CALL,
) -> AsyncIterator[Call[Status]]:
    """Admission first, then the block. A refusal by admission, or a domain error from the block, leaves
    as Refused (anything else is logged and refused as Internal); the record closes before, so a client
    that sees the error and then scrapes /metrics or reads the log finds the call there. A caller that went
    away is recorded as `cancelled()` (the table's code by default), unless the call already says why."""
    record = CallRecord(rpc, request_id, metrics, code=table.ok, ok=table.ok, access=access)
    try:
        admission.admit()
    except ServiceError as error:
        raise _refused(Call(record, table, names, None), error) from None
    call = Call(record, table, names, admission)
    streams_on = False  # held by a stream that was handed to the door, which closes the call
    try:
        yield call
        streams_on = call.held
    except ServiceError as error:
        raise _refused(call, error) from None
    except (asyncio.CancelledError, GeneratorExit):
        call.went_away(cancelled() if cancelled else None)
        raise
    except table.passes:
        raise
    except Exception:
        log.exception("%s failed", rpc)
        raise _refused(call, failure(rpc)) from None
    finally:
        if not streams_on:
            call.close()


def _refused(call: Call, error: ServiceError) -> Refused:
    refused = Refused(call.refuse(error))
    call.close()
    return refused


def refused(
    metrics: Metrics,
    rpc: str,
    request_id: str,
    table: StatusTable[Status],
    error: ServiceError,
    names: Mapping[str, str] | None = None,
    *,
    access: AccessLog = EVERY_CALL,
) -> Refusal[Status]:
    """A call refused before admission (no valid credentials, a body that does not parse or is too large):
    recorded, timed and logged like any other."""
    call = Call(
        CallRecord(rpc, request_id, metrics, code=table.ok, ok=table.ok, access=access), table, names or {}, None
    )
    return _refused(call, error).refusal
