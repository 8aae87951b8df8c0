"""ByT5 (a T5 whose tokens are bytes, with no tokenizer file): our byte tokenizer as transformers'
ByT5Tokenizer on drawn texts (ids, tokens, decoding both ways, special tokens written in the text); a random
ByT5 checkpoint (ByT5's deep encoder over a shallow decoder) imported, exported and served over gRPC, its
greedy output equal to transformers' generate, streamed a character at a time however many bytes it
takes; a checkpoint too small for its bytes refused by name."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model.export.model_dir import export_model_dir
from model.families.t5.importer import T5ImportError, import_t5, t5_config
from model.families.t5.random_checkpoint import T5Shape, random_t5_checkpoint
from modeldir.byte_tokenizer import ByteTokenizer
from modeldir.files import open_model_dir
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .slow_tests import slow_fixture

transformers = pytest.importorskip("transformers")

# ByT5's layout (an encoder three times the decoder's depth), sentinels fewer than its 125
SHAPE = T5Shape(byte_tokens=True, extra_ids=8, d_kv=16, buckets=8, max_distance=12, encoder_layers=3, decoder_layers=1)
MAX_NEW = 40
INPUTS = [
    "Grüße aus Köln",
    "漢字とかな",
    "a 😀 b",
    "plain ascii text",
    "ça va? ¿sí?",
    "日本語のテキスト",
    " ",
    "x</s>y",
]
SPECIALS = ["</s>", "<pad>", "<unk>", "<extra_id_0>", "<extra_id_7>", " </s> ", "<extra_id_3> "]


@pytest.fixture(scope="module")
def theirs():
    return transformers.ByT5Tokenizer(extra_ids=SHAPE.extra_ids)


@pytest.fixture(scope="module")
def ours():
    return ByteTokenizer(max_tokens=512, extra_ids=SHAPE.extra_ids)


texts = st.lists(
    st.one_of(
        st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20), st.sampled_from(SPECIALS)
    ),
    max_size=5,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_the_byte_tokenizer_is_transformers_byt5_tokenizer(theirs, ours, text):
    ids = theirs(text)["input_ids"]
    assert ours.encode([text])[0].ids == ids
    assert ours.tokens(ids) == theirs.convert_ids_to_tokens(ids)
    for skip in (True, False):
        assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)
    spans = ours.spans([text], add_special_tokens=False)[0]
    data = text.encode()
    for span in spans:  # each byte token's place in the text's UTF-8
        assert span.special or bytes([span.id - 3]) == data[span.start : span.stop]


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(st.integers(0, 3 + 256 + SHAPE.extra_ids - 1), max_size=40))
def test_any_ids_decode_as_transformers_does_and_stream_to_the_same_text(theirs, ours, ids):
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
    stream = ours.stream_decoder()
    streamed = "".join(stream.step(i) for i in ids) + stream.flush()
    assert streamed == ours.decode(ids)


def test_a_character_is_streamed_once_all_its_bytes_have_come(ours):
    text = "Grüße 漢字 😀"
    stream = ours.stream_decoder()
    pieces = [stream.step(i) for i in ours.encode([text])[0].ids[:-1]]
    assert "".join(pieces) == text
    assert [p for p in pieces if p] == list(text)  # never a part of a character, nor a replacement mark
    assert pieces.count("") == len(text.encode()) - len(text)  # the bytes before each character's last


def test_long_inputs_are_cut_keeping_the_eos():
    short = ByteTokenizer(max_tokens=8)
    (right,), (left,) = short.encode(["abcdefghij"]), short.encode(["abcdefghij"], truncate_left=True)
    assert right.ids == [*(b + 3 for b in b"abcdefg"), 1] and right.truncated
    assert left.ids == [*(b + 3 for b in b"defghij"), 1] and left.truncated


@slow_fixture(scope="module")
def byt5(tmp_path_factory):
    source = random_t5_checkpoint(tmp_path_factory.mktemp("byt5-hf"), SHAPE, seed=31)
    model_dir = import_t5(source, tmp_path_factory.mktemp("byt5") / "byt5", "byt5")
    export_model_dir(model_dir, progress_stream=io.StringIO())
    server = ServerThread([model_dir], max_new_tokens=MAX_NEW)
    yield transformers.T5ForConditionalGeneration.from_pretrained(source).eval(), source, model_dir, server
    server.close()


def test_byt5_is_imported_with_bytes_for_tokens(byt5):
    _, source, model_dir, _ = byt5
    assert not (source / "tokenizer.json").exists()
    assert t5_config(source).tokenizer == "byt5"
    files = open_model_dir(model_dir)
    assert files.config.vocab_size == 3 + 256 + SHAPE.extra_ids
    assert not (model_dir / "tokenizer.json").exists() and files.tokenizer == model_dir


def test_byt5_served_greedy_equals_generate_and_streams_whole_characters(byt5):
    hf, source, _, server = byt5
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    assert type(tokenizer).__name__ == "ByT5Tokenizer"  # as transformers loads the checkpoint
    expected = []
    for text in INPUTS:
        with torch.no_grad():
            (row,) = hf.generate(**tokenizer([text], return_tensors="pt"), max_new_tokens=MAX_NEW, num_beams=1)
        ids = row[1:].tolist()
        expected.append(ids[: ids.index(1)] if 1 in ids else ids)
    stub = server.stub()
    params = pb.GenerationParams(max_new_tokens=MAX_NEW, num_beams=1)

    def both(text):
        request = pb.GenerateRequest(model="byt5", input=text, params=params)
        return stub.Generate(request, timeout=60), list(stub.GenerateStream(request, timeout=60))

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(both, INPUTS))
    for (unary, stream), ids in zip(answers, expected):
        assert list(unary.token_ids) == ids
        assert unary.text == tokenizer.decode(ids, skip_special_tokens=True)
        assert "".join(m.text for m in stream) == unary.text
        assert "\ufffd" not in "".join(m.text for m in stream)
    assert sum(len(ids) for ids in expected) > 4 * len(INPUTS)
    assert any(i - 3 >= 0x80 for ids in expected for i in ids)  # bytes past ASCII were decoded


def test_a_byt5_checkpoint_smaller_than_its_bytes_is_refused(byt5, tmp_path):
    _, source, _, _ = byt5
    config = json.loads((source / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "vocab_size": 200}))
    (tmp_path / "tokenizer_config.json").write_text((source / "tokenizer_config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes((source / "model.safetensors").read_bytes())
    with pytest.raises(T5ImportError, match="a ByT5 checkpoint of 200 tokens, fewer than its 259 bytes"):
        t5_config(tmp_path)
