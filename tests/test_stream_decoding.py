"""Token-by-token decoding against whole-text decoding: a byte-level BPE tokenizer.json and a sentencepiece
model with byte fallback, both trained here on text in several scripts, and the numbers model's own
tokenizer; random ids, half characters at the end included; stop sequences that span tokens."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import sentencepiece
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from modeldir.stream_decoding import REPLACEMENT
from modeldir.tokenizer import MarianTokenizer, TextTokenizer
from service.engine.text_stream import TextStream

ROOT = Path(__file__).resolve().parents[1]
WORDS = [
    "café",
    "naïve",
    "日本語の",
    "テキスト",
    "Привет",
    "мир",
    "ελληνικά",
    "🎉",
    "🚀 go",
    "über",
    "ß",
    "a",
    "the",
    "x1",
]
RARE = ["鬱", "𝔘𝔫𝔦", "ǅ"]  # once in the training text: sentencepiece spells them in bytes


def texts(count: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(count)] + RARE


@pytest.fixture(scope="module")
def byte_level(tmp_path_factory) -> TextTokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(texts(), trainer)
    path = tmp_path_factory.mktemp("byte_level") / "tokenizer.json"
    tokenizer.save(str(path))
    return TextTokenizer(path, max_tokens=512)


@pytest.fixture(scope="module")
def sentencepiece_marian(tmp_path_factory) -> MarianTokenizer:
    """A Marian tokenizer directory whose sentencepiece model falls back to bytes for rare characters."""
    directory = tmp_path_factory.mktemp("sentencepiece")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts()),
        model_prefix=str(directory / "m"),
        vocab_size=400,
        hard_vocab_limit=False,
        model_type="unigram",
        character_coverage=0.98,
        byte_fallback=True,
        eos_id=0,
        unk_id=1,
        bos_id=-1,
        pad_id=-1,
        minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / "m.model"))
    vocab = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
    vocab["<pad>"] = len(vocab)
    for name in ("source.spm", "target.spm"):
        (directory / name).write_bytes((directory / "m.model").read_bytes())
    (directory / "vocab.json").write_text(json.dumps(vocab))
    return MarianTokenizer(directory, max_tokens=512)


@pytest.fixture(scope="module")
def numbers() -> TextTokenizer:
    return TextTokenizer(ROOT / "checkpoints" / "numbers" / "tokenizer.json", max_tokens=64)


TOKENIZERS = ["byte_level", "sentencepiece_marian", "numbers"]


def vocabulary_size(tokenizer) -> int:
    if isinstance(tokenizer, MarianTokenizer):
        return len(tokenizer.vocab)
    return tokenizer._tokenizer.get_vocab_size()


def drawn_text_ids(tokenizer, data) -> list[int]:
    """The target ids of a text of drawn words (multi-byte characters, rare ones spelled in bytes)."""
    text = " ".join(data.draw(st.lists(st.sampled_from(WORDS + RARE), min_size=1, max_size=12)))
    return tokenizer.encode_target(text).ids


def streamed(tokenizer, ids: list[int]) -> list[str]:
    decoder = tokenizer.stream_decoder()
    return [decoder.step(i) for i in ids] + [decoder.flush()]


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_pieces_add_up_to_the_whole_decode(name, request, data):
    """Random ids (special tokens and stray bytes of multi-byte characters among them)."""
    tokenizer = request.getfixturevalue(name)
    ids = data.draw(st.lists(st.integers(0, vocabulary_size(tokenizer) - 1), max_size=40))
    pieces = streamed(tokenizer, ids)
    assert "".join(pieces) == tokenizer.decode(ids)
    assert not any(piece.endswith(REPLACEMENT) for piece in pieces[:-1])


@pytest.mark.parametrize("name", TOKENIZERS[:2])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_encoded_text_comes_back_piece_by_piece(name, request, data):
    """Real text, multi-byte characters split over several tokens, cut anywhere."""
    tokenizer = request.getfixturevalue(name)
    ids = drawn_text_ids(tokenizer, data)
    ids = ids[: data.draw(st.integers(0, len(ids)))]
    assert "".join(streamed(tokenizer, ids)) == tokenizer.decode(ids)


def test_half_a_character_gives_nothing_until_it_is_whole(byte_level):
    ids = byte_level.encode_target("🎉").ids
    decoder = byte_level.stream_decoder()
    assert len(ids) > 1 and [decoder.step(i) for i in ids] == [""] * (len(ids) - 1) + ["🎉"]
    assert decoder.flush() == ""
    decoder = byte_level.stream_decoder()
    assert [decoder.step(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    half = byte_level.decode(ids[:-1])
    assert REPLACEMENT in half and decoder.flush() == half


@pytest.mark.parametrize("name", TOKENIZERS[:2])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_stop_sequences_spanning_tokens_cut_the_text_before_them(name, request, data):
    tokenizer = request.getfixturevalue(name)
    ids = drawn_text_ids(tokenizer, data)
    full = tokenizer.decode(ids)
    start = data.draw(st.integers(0, max(0, len(full) - 1)))
    stop = full[start : start + data.draw(st.integers(1, 6))] or "never there"
    stream = TextStream(tokenizer.stream_decoder(), stop=(stop, "never there"))
    sent = []
    for i in ids:
        sent.append(stream.update(i))
        if stream.stopped:
            break
    else:
        sent.append(stream.end())
    expected = full[: full.index(stop)] if stop in full else full
    assert "".join(sent) == expected and stream.stopped == (stop in full)


class Words:
    """A decoder of whole words, for the hold-back rules on their own."""

    def __init__(self, words: list[str]):
        self.words = words

    def step(self, token: int) -> str:
        return self.words[token]

    def flush(self) -> str:
        return ""


def test_possible_stop_prefixes_are_held_back_until_the_next_token_decides():
    stream = TextStream(Words(["café", " E", "N", "D", "x"]), stop=("END",))
    assert stream.update(0) == "café"
    assert stream.update(1) == " "
    assert stream.update(2) == ""
    assert stream.update(3) == "" and stream.stopped
    stream = TextStream(Words(["café", " E", "N", "D", "x"]), stop=("END",))
    assert [stream.update(i) for i in (1, 2, 4)] == [" ", "", "ENx"] and not stream.stopped
    assert stream.end() == ""
    stream = TextStream(Words(["café", " E", "N", "D", "x"]), stop=("END",))
    assert [stream.update(i) for i in (1, 2)] == [" ", ""] and stream.end() == "EN" and not stream.stopped
