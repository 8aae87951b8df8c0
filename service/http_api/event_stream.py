"""Server-sent events written as the core's stream policy says: one event at a time, each within
stream_write_timeout; a client that stops reading has its connection reset, as its 200 is already sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from starlette.responses import StreamingResponse
from starlette.types import Scope, Send

from ..core.calls.lifecycle import Call
from ..core.generation.streaming import StreamPolicy, StreamStalled

# Drops a request's connection at once, unsent bytes and all (HttpServer.abort_connection): a client that
# stopped reading would otherwise keep the socket, and what waits in it, until it goes.
AbortConnection = Callable[[Scope], None]


def sse(payload: dict | str) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()


class PacedEventStream(StreamingResponse):
    def __init__(self, events: AsyncIterator[bytes], call: Call, policy: StreamPolicy, abort: Callable[[], None]):
        super().__init__(events, media_type="text/event-stream")
        self.events, self.call, self.policy, self.abort = events, call, policy, abort

    async def stream_response(self, send: Send) -> None:
        start = {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        try:
            await self.policy.send(send(start), [self.call.record])
            async for chunk in self.events:
                message = {"type": "http.response.body", "body": chunk, "more_body": True}
                await self.policy.send(send(message), [self.call.record])
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except StreamStalled as error:
            self.call.refuse(error)  # the status went out: the record says why it ended
            self.abort()
            await asyncio.sleep(0)  # the connection's loss is handled before uvicorn looks at the response
        finally:
            await self.events.aclose()  # its sequences stop, and the call closes
