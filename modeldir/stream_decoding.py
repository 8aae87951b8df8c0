"""Token ids to text one token at a time, in time that does not grow with the text: each new token is
decoded with a short window of the tokens before it, and the text the window already had is cut off.

The pieces add up to the decode of all the ids at once (tested against it on random vocabularies): a
token that ends in half of a multi-byte character gives nothing until the character is whole, and
`flush` gives what is left when no more tokens will come.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

REPLACEMENT = "\ufffd"  # what a decoder makes of half a character
# WindowDecoder's window grows to this many tokens before it starts again at its last piece: one decode a
# token while it grows, one more each time it starts again.
WINDOW_TOKENS = 8


class StreamDecoder(Protocol):
    def step(self, token: int) -> str:
        """The new text that `token` completes ("" while a character or a piece is incomplete)."""
        ...

    def flush(self) -> str:
        """What is left once no more tokens will come (half characters included, as the whole decode has)."""
        ...


def _after(text: str, prefix: str) -> str:
    """text less prefix; "" if text does not go on from it (a piece already given out is never changed)."""
    return text[len(prefix) :] if len(text) > len(prefix) and text.startswith(prefix) else ""


class WindowDecoder:
    """For any decode(ids) -> text (sentencepiece's). The window starts at the first token of a piece given
    out, so that a decoder that treats a text's first token apart (sentencepiece drops its leading space)
    treats it the same way in both decodes it compares; once it holds WINDOW_TOKENS, it starts again at
    the last piece."""

    def __init__(self, decode: Callable[[list[int]], str]):
        self.decode = decode
        self.window: list[int] = []  # from the first token of a piece given out, to the last token
        self.read = 0  # where, in window, the tokens since the last piece begin
        self.read_text = ""  # decode(window[:read])

    def step(self, token: int) -> str:
        self.window.append(token)
        text = self.decode(self.window)
        new = _after(text, self.read_text)
        if not new or new.endswith(REPLACEMENT):
            return ""
        if len(self.window) < WINDOW_TOKENS:
            self.read, self.read_text = len(self.window), text
        else:  # start again at the piece just given out
            self.window = self.window[self.read :]
            self.read = len(self.window)
            self.read_text = self.decode(self.window)
        return new

    def flush(self) -> str:
        new = _after(self.decode(self.window), self.read_text)
        self.window, self.read, self.read_text = [], 0, ""
        return new


class TokenizerStreamDecoder:
    """For a tokenizer.json: tokenizers' own DecodeStream, one call a token. Its window is kept beside it
    only as far as flush needs: the last piece's tokens and those since."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.stream = DecodeStream(skip_special_tokens=True)
        self.last: list[int] = []  # the last piece's tokens
        self.since: list[int] = []  # the tokens since, that gave no text yet

    def step(self, token: int) -> str:
        try:
            new = self.stream.step(self.tokenizer, token)
        except Exception:  # a decoder whose text does not go on from its window's: wait for more
            new = None
        if not new:
            self.since.append(token)
            return ""
        self.since.append(token)
        self.last, self.since = self.since, []
        return new

    def flush(self) -> str:
        if not self.since:
            return ""
        decode = self.tokenizer.decode
        return _after(decode(self.last + self.since), decode(self.last))
