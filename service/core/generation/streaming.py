"""How answers stream to their clients, the same on every front door: a message goes out only when the one
before it has, each within stream_write_timeout; a stream whose client stops reading is given up
(StreamStalled), counted, and releases what it holds. The sequences of one call merge through a bounded
buffer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterable

from ...errors import DeadlineExceeded
from ...ops.call_record import CallRecord
from ...ops.metrics import Metrics
from .generation import GenerationStream, StreamEvent

# Events merged ahead of a writer that waits for its client. Beyond, the sequences' own events wait in
# the scheduler, bounded by their max_new_tokens, until the stream takes them or is given up.
MERGED_EVENTS = 16


class StreamStalled(DeadlineExceeded):
    """The client took no message for stream_write_timeout: the stream is given up."""

    def __init__(self, seconds: float):
        super().__init__(f"stream: the client read nothing for {seconds:g} s (stream_write_timeout)")
        self.seconds = seconds


class StreamPolicy:
    def __init__(self, write_timeout: float, metrics: Metrics):
        self.write_timeout, self.metrics = write_timeout, metrics

    async def send(self, write: Awaitable[object], calls: Iterable[CallRecord]) -> None:
        """Await one message's write (the door's own: a gRPC write, an ASGI send). A client that does not
        take it within the timeout gets StreamStalled, and the calls on its stream (`calls`, read then)
        are counted and marked as given up."""
        try:
            await asyncio.wait_for(write, self.write_timeout)
        except asyncio.TimeoutError:
            for call in calls:
                self.metrics.streams_stalled.labels(call.rpc, call.model).inc()
                call.figures["stalled_after_seconds"] = self.write_timeout
            raise StreamStalled(self.write_timeout) from None


async def merged(streams: list[GenerationStream]) -> AsyncIterator[tuple[int, StreamEvent]]:
    """The streams' events as they come, each with its stream's index, until every stream has ended; the
    first error ends them all. Closing this closes every stream, which frees their cache rows."""
    if len(streams) == 1:  # nothing to merge: the stream's own events, several tokens in one when behind
        try:
            async for event in streams[0].events:
                yield 0, event
        finally:
            await streams[0].events.aclose()
        return
    buffer: asyncio.Queue = asyncio.Queue(maxsize=MERGED_EVENTS)

    async def pump(index: int, stream: GenerationStream) -> None:
        try:
            async for event in stream.events:
                await buffer.put((index, event))
        except Exception as error:
            await buffer.put((index, error))
        else:
            await buffer.put((index, None))  # this stream has ended
        finally:
            await stream.events.aclose()

    pumps = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(pumps)
        while running:
            index, item = await buffer.get()
            if isinstance(item, Exception):
                raise item
            if item is None:
                running -= 1
            else:
                yield index, item
    finally:
        for task in pumps:
            task.cancel()
