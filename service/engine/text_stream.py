"""Text of a sequence as its tokens arrive, one token at a time: what is safe to send so far, and where a
stop sequence cuts.

Sent text never has to be taken back: the decoder holds half characters back (modeldir/stream_decoding.py),
and any tail that could be the start of a stop sequence is held here until the next token decides. When a
stop sequence appears, the text ends just before it. The work per token does not grow with the text: a
stop sequence is looked for only in the held tail and the new token's text (sent text never ends in the
start of one, so none can begin there).
"""

from __future__ import annotations

from typing import Protocol

from modeldir.stream_decoding import StreamDecoder


class Detokenizer(Protocol):
    """A model's tokenizer, as the scheduler uses it (modeldir/tokenizer.py)."""

    def decode(self, ids: list[int]) -> str: ...

    def stream_decoder(self) -> StreamDecoder: ...


class _NoText:
    """A detokenizer of no text, for a sequence whose caller decodes its ids itself (an API process's:
    service/split/remote_models.py)."""

    def decode(self, ids: list[int]) -> str:
        return ""

    def stream_decoder(self) -> StreamDecoder:
        return self

    def step(self, token: int) -> str:
        return ""

    def flush(self) -> str:
        return ""


NO_TEXT = _NoText()


class TextStream:
    def __init__(self, decoder: StreamDecoder, stop: tuple[str, ...] = (), decode=None):
        """decode: ids -> their whole text, for a sequence decoded once at its end."""
        self.decoder, self.decode = decoder, decode
        self.stop = tuple(s for s in stop if s)
        self.held = ""  # decoded, not sent: it may begin a stop sequence
        self.stopped = False  # a stop sequence ended the text

    def _held_back(self, text: str) -> int:
        """How many trailing characters might begin a stop sequence."""
        held = 0
        for stop in self.stop:
            for size in range(min(len(stop) - 1, len(text)), held, -1):
                if text.endswith(stop[:size]):
                    held = size
                    break
        return held

    def _ready(self, text: str, final: bool) -> str:
        """Of held + new text: what can be sent (up to a stop sequence, if one is there); the rest is held."""
        found = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if found:
            self.stopped, self.held = True, ""
            return text[: min(found)]
        keep = 0 if final else self._held_back(text)
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def update(self, token: int) -> str:
        """The text to send now that `token` has come."""
        new = self.decoder.step(token)
        if not self.stop or not new:
            return new
        return self._ready(self.held + new, final=False)

    def end(self) -> str:
        """The text still to send once no more tokens will come (`stopped` says if a stop sequence cut it)."""
        return self._ready(self.held + self.decoder.flush(), final=True)
