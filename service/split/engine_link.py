"""An API process's side of the link: calls and streams to the engine process over its Unix socket, each
matched to its replies by a call id; a call the caller gives up is cancelled there too."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Callable

from ..engine.sequence import Event
from ..errors import Unavailable
from .wire import END, ERROR, EVENT, HEALTH, OK, Outbox, read_frame

log = logging.getLogger("attnserve.api")

GONE = Unavailable("the engine process has stopped; retry")


class _Stream:
    """One generation's events as they arrive, until its end."""

    def __init__(self) -> None:
        self.events: deque = deque()
        self.waiter: asyncio.Future | None = None

    def put(self, item) -> None:
        self.events.append(item)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


def merged(events: list[Event]) -> Event:
    """Several events of one sequence as one, as the scheduler gives a caller that is behind."""
    if len(events) == 1:
        return events[0]
    ids = [token for event in events for token in event.token_ids]
    return dataclasses.replace(events[-1], text="".join(e.text for e in events), token_ids=ids)


class EngineLink:
    def __init__(self, path: str, on_health: Callable[[str, bool, int], None]):
        """path: the engine's socket; on_health(model, healthy, failures): each push of a model's health."""
        self.path, self.on_health = path, on_health
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future | _Stream] = {}
        self.outbox: Outbox | None = None
        self.reading: asyncio.Task | None = None
        self.closed = asyncio.Event()  # the engine has gone (or the link was closed)

    async def connect(self) -> None:
        reader, writer = await asyncio.open_unix_connection(self.path)
        self.outbox = Outbox(writer)
        self.reading = asyncio.create_task(self._read(reader), name="engine link")

    async def call(self, kind: str, *args):
        """The engine's answer to one call; its domain error raised here."""
        if self.closed.is_set():
            raise GONE
        call_id = next(self.ids)
        future = asyncio.get_running_loop().create_future()
        self.pending[call_id] = future
        self.outbox.put((call_id, kind, args))
        try:
            return await future
        except asyncio.CancelledError:
            self._cancel(call_id)
            raise
        finally:
            self.pending.pop(call_id, None)

    async def stream(self, kind: str, *args, on_end: Callable[[object], None] | None = None) -> AsyncIterator[Event]:
        """The events of one generation, several merged into one where the caller is behind; on_end(what the
        engine sent with its end), before the last event is given."""
        if self.closed.is_set():
            raise GONE
        call_id = next(self.ids)
        stream = self.pending[call_id] = _Stream()
        self.outbox.put((call_id, kind, args))
        ended = False
        try:
            while True:
                if not stream.events:
                    stream.waiter = asyncio.get_running_loop().create_future()
                    await stream.waiter
                items = list(stream.events)
                stream.events.clear()
                ended = items[-1][0] != EVENT  # END, or ERROR
                events = [value for tag, value in items if tag == EVENT]
                if ended and items[-1][0] == END and on_end is not None:
                    on_end(items[-1][1])
                if events:
                    yield merged(events)
                if ended:
                    tag, value = items[-1]
                    if tag == ERROR:
                        raise value
                    return
        finally:
            self.pending.pop(call_id, None)
            if not ended:
                self._cancel(call_id)

    def tell_readiness(self, ready: bool) -> None:
        """Tell the engine whether this process serves (its /readyz counts the API processes that do)."""
        if not self.closed.is_set():
            self.outbox.put((0, "ready", (os.getpid(), ready)))

    def _cancel(self, call_id: int) -> None:
        if not self.closed.is_set():
            self.outbox.put((0, "cancel", call_id))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                for call_id, tag, value in await read_frame(reader):
                    self._received(call_id, tag, value)
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            log.error("the engine process has gone (%s): calls fail with UNAVAILABLE", type(error).__name__)
        finally:
            self.closed.set()
            for waiting in self.pending.values():
                if isinstance(waiting, _Stream):
                    waiting.put((ERROR, GONE))
                elif not waiting.done():
                    waiting.set_exception(GONE)

    def _received(self, call_id: int, tag: str, value) -> None:
        if tag == HEALTH:
            self.on_health(*value)
            return
        waiting = self.pending.get(call_id)
        if isinstance(waiting, _Stream):
            waiting.put((tag, value))
        elif waiting is not None and not waiting.done():
            if tag == OK:
                waiting.set_result(value)
            else:
                waiting.set_exception(value)

    async def close(self) -> None:
        if self.reading is not None:
            self.reading.cancel()
        if self.outbox is not None:
            self.outbox.writer.close()
        self.closed.set()
