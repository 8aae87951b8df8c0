"""Text <-> token ids: with the model's tokenizer.json, under truncation and padding set here, explicitly
(a tokenizer.json may carry its own: all-MiniLM-L6-v2's pads and truncates everything to 128); or with
Marian's sentencepiece models, the way transformers' MarianTokenizer uses them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import sentencepiece
from tokenizers import Tokenizer

from .files import MARIAN_KINDS, MARIAN_TARGET_VOCAB_FILE
from .stream_decoding import TokenizerStreamDecoder, WindowDecoder

UNCUT = 1 << 30  # a length no text reaches: "no truncation"


@dataclass(frozen=True)
class Span:
    """A token and where it stands in its text: byte offsets into the text's UTF-8, None for the special
    tokens the post-processor adds (TEI's /tokenize gives these)."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    tokens: list[str]
    truncated: bool  # the text had more than max_tokens tokens


class TextTokenizer:
    def __init__(self, path: Path, max_tokens: int):
        self.max_tokens = max_tokens
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_padding()
        # Counts the special tokens the post-processor adds ([CLS] ... [SEP]), as Hugging Face does.
        self._tokenizer.enable_truncation(max_length=max_tokens)
        # The same, cutting long inputs at their start, or at fewer tokens, or pairs by a strategy: made when
        # first asked for, by (direction, length, strategy).
        self._truncating: dict[tuple[str, int, str], Tokenizer] = {}

    def _truncated_at(self, direction: str, max_tokens: int, strategy: str = "longest_first") -> Tokenizer:
        key = (direction, max_tokens, strategy)
        if key == ("right", self.max_tokens, "longest_first"):
            return self._tokenizer
        if key not in self._truncating:  # two threads may both make one: either serves
            other = Tokenizer.from_str(self._tokenizer.to_str())
            other.enable_truncation(max_length=max_tokens, direction=direction, strategy=strategy)
            self._truncating[key] = other
        return self._truncating[key]

    def encode(self, texts: list[str], truncate_left: bool = False, max_tokens: int | None = None) -> list[Encoded]:
        """truncate_left: a text too long loses its first tokens, not its last (TEI's truncation_direction).
        max_tokens: cut at fewer tokens than the model takes (a ColBERT model's queries)."""
        tokenizer = self._truncated_at(
            "left" if truncate_left else "right", min(max_tokens or self.max_tokens, self.max_tokens)
        )
        return [Encoded(e.ids, e.tokens, bool(e.overflowing)) for e in tokenizer.encode_batch(texts)]

    def text_ids(self, text: str, keep: int) -> list[int]:
        """The text's own token ids, without the special tokens a post-processor adds, its last `keep` of
        them (Whisper's prompt: only the text's end comes before a window)."""
        return self._truncated_at("left", keep).encode(text, add_special_tokens=False).ids

    def encode_pairs(
        self,
        pairs: list[tuple[str, str]],
        truncation: Literal["longest_first", "only_first", "only_second"] = "longest_first",
        truncate_left: bool = False,
    ) -> list[Encoded]:
        """(query, document) pairs as one input each, framed as the checkpoint frames a pair ([CLS] q [SEP] d
        [SEP]), too long ones cut as CrossEncoder cuts them: the longer text first, token by token; or one
        text alone, the document (only_second) or, as the zero-shot pipeline cuts a premise, the first
        (truncate_left: at the texts' starts)."""
        tokenizer = self._truncated_at("left" if truncate_left else "right", self.max_tokens, truncation)
        return [Encoded(e.ids, e.tokens, bool(e.overflowing)) for e in tokenizer.encode_batch(pairs)]

    def spans(self, texts: list[str], add_special_tokens: bool = True) -> list[list[Span]]:
        """Each text's tokens, not cut at any length, with their places in it."""
        tokenizer = self._truncated_at("right", UNCUT)
        out = []
        for text, e in zip(texts, tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)):
            data, at = text.encode(), [0]  # at[i]: where character i starts in data
            for character in text:
                at.append(at[-1] + len(character.encode()))
            spans = []
            for token_id, token, special, (start, stop) in zip(e.ids, e.tokens, e.special_tokens_mask, e.offsets):
                if special:
                    spans.append(Span(token_id, token, True, None, None))
                else:
                    spans.append(
                        Span(token_id, data[at[start] : at[stop]].decode(errors="replace"), False, at[start], at[stop])
                    )
            out.append(spans)
        return out

    def content(self, texts: list[str]) -> list[list[int]]:
        """Each text's own ids, without the special tokens the post-processor adds (a multilingual
        tokenizer frames them with its language codes: modeldir/language_tokenizer.py)."""
        return [e.ids for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def encode_target(self, text: str) -> Encoded:
        """A decoder target's own tokens, without special tokens (the caller frames them)."""
        e = self._tokenizer.encode(text, add_special_tokens=False)
        return Encoded(e.ids, e.tokens, bool(e.overflowing))

    def tokens(self, ids: list[int]) -> list[str]:
        return [self._tokenizer.id_to_token(i) or "" for i in ids]

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the tokenizer's special tokens ([CLS], </s>, ...)."""
        return frozenset(i for i, t in self._tokenizer.get_added_tokens_decoder().items() if t.special)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def stream_decoder(self) -> TokenizerStreamDecoder:
        """Decodes one token at a time (special tokens skipped), as decode does all at once."""
        return TokenizerStreamDecoder(self._tokenizer)

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes: a byte-level BPE token's (GPT-2's, Whisper's) even where they end inside a
        character, which its decoded text cannot show; else its text's UTF-8."""
        token = self._tokenizer.id_to_token(token_id) or ""
        if all(c in BYTE_LEVEL for c in token):
            return bytes(BYTE_LEVEL[c] for c in token)
        return token.encode()


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's bytes_to_unicode): the printable bytes are written as themselves,
    the others as the characters from U+0100 on, in byte order. -> character: byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(others)}


BYTE_LEVEL = _byte_level_alphabet()


class MarianTokenizer:
    """Source text -> pieces of source.spm -> ids through vocab.json (unknown pieces: <unk>), then </s>.

    As transformers' MarianTokenizer does: the special tokens' text in the input stands for those tokens;
    a language code (">>fra<<") at the start of a stretch of text is one token; truncation keeps the </s>.
    Ids -> text: pieces through the target vocabulary, special tokens dropped, joined by target.spm.
    The target vocabulary is vocab.json too, unless the checkpoint has its own (separate_vocabs:
    target_vocab.json, where the special tokens keep their ids)."""

    SPECIALS = ("</s>", "<unk>", "<pad>")
    codes_in_text = True  # a ">>fra<<" at the start of a stretch of text is one token

    def __init__(self, directory: Path, max_tokens: int, separate_vocabs: bool = False):
        directory = Path(directory)
        self.max_tokens = max_tokens
        self.source = sentencepiece.SentencePieceProcessor(model_file=str(directory / "source.spm"))
        self.target = sentencepiece.SentencePieceProcessor(model_file=str(directory / "target.spm"))
        self.vocab = _marian_vocabulary(directory / "vocab.json")
        self.target_vocab = self.vocab
        if separate_vocabs:
            self.target_vocab = _marian_vocabulary(directory / MARIAN_TARGET_VOCAB_FILE)
            moved = [t for t in self.SPECIALS if self.target_vocab[t] != self.vocab[t]]
            if moved:
                raise ValueError(f"{directory}: {', '.join(moved)} have other ids in {MARIAN_TARGET_VOCAB_FILE}")
        self.pieces = {i: piece for piece, i in self.target_vocab.items()}
        self.unk_id, self.eos_id = self.vocab["<unk>"], self.vocab["</s>"]
        self.special_ids = {self.vocab[t] for t in self.SPECIALS}
        self._specials = re.compile("(" + "|".join(re.escape(t) for t in self.SPECIALS) + ")")
        self.skipped = frozenset(self.SPECIALS)  # pieces decode leaves out

    def _pieces(self, text: str, processor: sentencepiece.SentencePieceProcessor) -> list[str]:
        pieces = []
        for part in self._specials.split(text):
            if part in self.SPECIALS:
                pieces.append(part)
                continue
            if self.codes_in_text and part.startswith(">>") and (end := part.find("<<")) != -1:
                pieces.append(part[: end + 2])
                part = part[end + 2 :]
            if part:
                pieces.extend(processor.encode(part, out_type=str))
        return pieces

    def encode(self, texts: list[str]) -> list[Encoded]:
        encoded = []
        for text in texts:
            tokens = self._pieces(text, self.source)
            truncated = len(tokens) + 1 > self.max_tokens
            tokens = tokens[: self.max_tokens - 1] + ["</s>"]
            encoded.append(Encoded([self.vocab.get(t, self.unk_id) for t in tokens], tokens, truncated))
        return encoded

    def content(self, texts: list[str]) -> list[list[int]]:
        """Each text's own ids, without </s> (a multilingual tokenizer frames them)."""
        return [[self.vocab.get(t, self.unk_id) for t in self._pieces(text, self.source)] for text in texts]

    def encode_target(self, text: str) -> Encoded:
        """A decoder target's own tokens: as encode, with target.spm and the target vocabulary, no </s>."""
        tokens = self._pieces(text, self.target)
        truncated = len(tokens) > self.max_tokens
        tokens = tokens[: self.max_tokens]
        return Encoded([self.target_vocab.get(t, self.unk_id) for t in tokens], tokens, truncated)

    def tokens(self, ids: list[int]) -> list[str]:
        return [self.pieces.get(i, "<unk>") for i in ids]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        text, run = "", []  # run: the pieces since the last special token
        for i in ids:
            piece = self.pieces.get(i, "<unk>")
            if piece in self.skipped:
                if not skip_special_tokens:
                    text += self.target.decode_pieces(run) + piece + " "
                    run = []
            else:
                run.append(piece)
        text += self.target.decode_pieces(run)
        return text.replace("\u2581", " ").strip()

    def stream_decoder(self) -> WindowDecoder:
        """Decodes one token at a time (special tokens skipped), as decode does all at once."""
        return WindowDecoder(self.decode)

    def token_to_id(self, token: str) -> int | None:
        return self.vocab.get(token)


def _marian_vocabulary(path: Path) -> dict[str, int]:
    vocab = json.loads(path.read_text(encoding="utf-8"))
    missing = [t for t in MarianTokenizer.SPECIALS if t not in vocab]
    if missing:
        raise ValueError(f"{path} lacks the special tokens {', '.join(missing)}")
    return vocab


def load_tokenizer(kind: str, path: Path, max_tokens: int) -> TextTokenizer | MarianTokenizer:
    """The tokenizer of a model directory, by its config's `tokenizer` kind."""
    if kind in MARIAN_KINDS:
        return MarianTokenizer(path, max_tokens, separate_vocabs=kind == "marian_separate_vocabs")
    return TextTokenizer(path, max_tokens)


def pad_batch(
    sequences: list[list[int]], pad_id: int, attended: list[int | None] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad to the longest: -> input_ids, attention_mask, both (B, S) int64. attended: how many of
    each sequence's first tokens the mask admits (None: all; a ColBERT query's expansion tokens are not)."""
    length = max(len(s) for s in sequences)
    ids = np.full((len(sequences), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(sequences), length), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = sequence
        mask[row, : len(sequence) if attended is None or attended[row] is None else attended[row]] = 1
    return ids, mask
