"""The engine link's frames: each message a pickled tuple behind its length, over a local (Unix) socket
between processes of one server; errors travel as the domain errors they are."""

from __future__ import annotations

import asyncio
import pickle
import struct

from ..errors import Internal, ServiceError

HEADER = struct.Struct("!I")  # a frame's length, in bytes
# Replies and pushes, by the kind in their second place.
OK, ERROR, EVENT, END, HEALTH = "ok", "error", "event", "end", "health"


def frame(message: tuple) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> tuple:
    """The next message; IncompleteReadError when the other side has gone."""
    (length,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    return pickle.loads(await reader.readexactly(length))


def portable(error: BaseException) -> BaseException:
    """An error as the other process can raise it: a domain error as itself (its field too), anything
    else as Internal, whose message names what failed (the engine's log has the rest)."""
    if isinstance(error, ServiceError):
        return error
    return Internal(f"the engine failed: {type(error).__name__}: {error}")
