"""The engine link's frames: the messages of one turn of the event loop (each a tuple), pickled together
behind their length, over a local (Unix) socket between processes of one server; errors travel as the
domain errors they are, any other as EngineFailed."""

from __future__ import annotations

import asyncio
import pickle
import struct

from ..errors import ServiceError

HEADER = struct.Struct("!I")  # a frame's length, in bytes
# Replies and pushes, by the kind in their second place.
OK, ERROR, EVENT, END, HEALTH = "ok", "error", "event", "end", "health"


def frame(messages: list[tuple]) -> bytes:
    body = pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> list[tuple]:
    """The next frame's messages; IncompleteReadError when the other side has gone."""
    (length,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    return pickle.loads(await reader.readexactly(length))


class Outbox:
    """The messages to one peer, sent as one frame once the loop's turn ends: a decoding step's token
    events for hundreds of streams cost one pickle and one write, not one each (docs/benchmarks.md,
    "The doors on every core")."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.messages: list[tuple] = []

    def put(self, message: tuple) -> None:
        if not self.messages:
            asyncio.get_running_loop().call_soon(self._send)
        self.messages.append(message)

    def _send(self) -> None:
        messages, self.messages = self.messages, []
        if not self.writer.is_closing():
            self.writer.write(frame(messages))


class EngineFailed(Exception):
    """What the engine raised that is not a domain error: the API process's call fails as on any unexpected
    error (logged there, its caller told only "internal error"), as a single process's would."""


def portable(error: BaseException) -> BaseException:
    """An error as the other process can raise it: a domain error as itself (its field too), anything
    else as EngineFailed, whose message names what failed (the engine's log has the rest)."""
    if isinstance(error, ServiceError):
        return error
    return EngineFailed(f"the engine failed: {type(error).__name__}: {error}")
