"""Text of a sequence as its tokens arrive: what is safe to send so far, and where a stop sequence cuts.

Sent text never has to be taken back: a trailing replacement character (half of a multi-byte
character) and any tail that could be the start of a stop sequence are held until the next token
decides. When a stop sequence appears, the text ends just before it.
"""

from __future__ import annotations

from collections.abc import Callable

REPLACEMENT = "\ufffd"


class TextStream:
    def __init__(self, decode: Callable[[list[int]], str], stop: tuple[str, ...] = ()):
        self.decode = decode
        self.stop = tuple(s for s in stop if s)
        self.sent = ""
        self.stopped = False  # a stop sequence ended the text

    def _held_back(self, text: str) -> int:
        """How many trailing characters might still change or begin a stop sequence."""
        held = len(text) - len(text.rstrip(REPLACEMENT))
        for stop in self.stop:
            for size in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:size]):
                    held = max(held, size)
                    break
        return held

    def update(self, ids: list[int], final: bool = False) -> str:
        """The text to send now that the sequence's tokens are `ids`; `final`: no more will come."""
        text = self.decode(ids)
        found = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if found:
            text = text[: min(found)]
            self.stopped = final = True
        ready = text if final else text[: len(text) - self._held_back(text)]
        if not ready.startswith(self.sent) or len(ready) <= len(self.sent):
            # Nothing new (or a decoder that is not prefix-stable: never resend, wait for more).
            return ""
        new, self.sent = ready[len(self.sent) :], ready
        return new
