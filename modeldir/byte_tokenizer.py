"""ByT5's tokenizer, which has no vocabulary file: a text's UTF-8 bytes are its ids (each byte + 3, after pad
0, eos 1 and unk 2), then </s>; the special tokens' text in the input stands for them, as transformers'
ByT5Tokenizer reads it (</s>, <pad> and <unk> taking the spaces around them, <extra_id_N> not); ids -> text:
the bytes as UTF-8, an incomplete or invalid sequence left out, as there."""

from __future__ import annotations

import re

from .stream_decoding import WindowDecoder
from .tokenizer import Encoded, Span

OFFSET = 3  # ids before the first byte's
FIRST_SENTINEL = OFFSET + 256  # <extra_id_0>'s id, after the bytes'
STRIPPING = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2: the spaces around their text go with them


class ByteTokenizer:
    def __init__(self, max_tokens: int, extra_ids: int = 125):
        """extra_ids: the <extra_id_N> sentinels after the bytes (125 in ByT5's checkpoints)."""
        self.max_tokens = max_tokens
        self.vocab = {token: i for i, token in enumerate(STRIPPING)}
        self.vocab |= {f"<extra_id_{i}>": FIRST_SENTINEL + i for i in range(extra_ids)}
        self.names = {i: token for token, i in self.vocab.items()}
        self.special_ids = frozenset(self.vocab.values())
        self.eos_id = self.vocab["</s>"]
        stripping = "|".join(r"\s*" + re.escape(t) + r"\s*" for t in STRIPPING)
        sentinels = "|".join(re.escape(t) for t in self.vocab if t not in STRIPPING)
        self._specials = re.compile(f"({stripping}{'|' + sentinels if sentinels else ''})")

    def _spans(self, text: str) -> list[Span]:
        """The text's tokens with their byte offsets (a special token's text: none, as for added ones)."""
        spans, at = [], 0
        for index, part in enumerate(self._specials.split(text)):
            data = part.encode("utf-8")
            if index % 2:  # a special token's text, with the spaces it takes
                token = part.strip()
                spans.append(Span(self.vocab[token], token, True, None, None))
            else:
                spans.extend(
                    Span(b + OFFSET, bytes([b]).decode(errors="replace"), False, at + i, at + i + 1)
                    for i, b in enumerate(data)
                )
            at += len(data)
        return spans

    def _ids(self, text: str) -> list[int]:
        return [span.id for span in self._spans(text)]

    def spans(self, texts: list[str], add_special_tokens: bool = True) -> list[list[Span]]:
        """Each text's tokens, uncut, with their places in it (TEI's /tokenize): a byte each."""
        eos = [Span(self.eos_id, "</s>", True, None, None)] if add_special_tokens else []
        return [[*self._spans(text), *eos] for text in texts]

    def content(self, texts: list[str]) -> list[list[int]]:
        """Each text's own ids, without </s>."""
        return [self._ids(text) for text in texts]

    def encode(self, texts: list[str], truncate_left: bool = False, max_tokens: int | None = None) -> list[Encoded]:
        """Each text's ids and </s> (none more where the text ends with its own, as transformers' warns and
        does), cut at max_tokens (the </s> kept; truncate_left: its first bytes go)."""
        limit = min(max_tokens or self.max_tokens, self.max_tokens) - 1
        encoded = []
        for ids in self.content(texts):
            ids = ids[:-1] if ids and ids[-1] == self.eos_id else ids
            kept = ids[-limit:] if truncate_left and len(ids) > limit else ids[:limit]
            kept = [*kept, self.eos_id]
            encoded.append(Encoded(kept, self.tokens(kept), len(ids) > limit))
        return encoded

    def encode_target(self, text: str) -> Encoded:
        ids = self._ids(text)
        return Encoded(ids[: self.max_tokens], self.tokens(ids[: self.max_tokens]), len(ids) > self.max_tokens)

    def tokens(self, ids: list[int]) -> list[str]:
        """A byte's token is its character (chr of the byte), as transformers names them."""
        return [
            self.names[i] if i in self.names else chr(i - OFFSET) if 0 <= i - OFFSET < 256 else "<unk>" for i in ids
        ]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        data = bytearray()
        for i in ids:
            if i in self.names:
                data += b"" if skip_special_tokens else self.names[i].encode()
            elif 0 <= i - OFFSET < 256:
                data.append(i - OFFSET)
        return data.decode("utf-8", errors="ignore")

    def stream_decoder(self) -> WindowDecoder:
        """One token at a time: a character is given out once its last byte has come."""
        return WindowDecoder(self.decode)

    def token_to_id(self, token: str) -> int | None:
        if token in self.vocab:
            return self.vocab[token]
        data = token.encode("utf-8")
        return data[0] + OFFSET if len(data) == 1 else None

    def token_bytes(self, token_id: int) -> bytes:
        return bytes([token_id - OFFSET]) if 0 <= token_id - OFFSET < 256 and token_id not in self.names else b""
