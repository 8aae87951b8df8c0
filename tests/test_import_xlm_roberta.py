"""XLM-RoBERTa sentence-embedding checkpoints (multilingual-e5, bge-m3's encoder, paraphrase-multilingual):
random ones built by transformers and saved by sentence-transformers, imported, exported and served, give
sentence-transformers' own vectors, over inputs of any text and length, truncated where it truncates."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelbuild.export import export_model_dir
from modelbuild.import_bert import import_sentence_transformer
from modelbuild.random_xlm_roberta import XlmRobertaShape, random_xlm_roberta_checkpoint
from modelbuild.stdlib_sentences import stdlib_sentences
from modelbuild.weights import load_model_dir
from service.grpc_api.client import Client
from testing.server_thread import ServerThread

sentence_transformers = pytest.importorskip("sentence_transformers")
SHAPES = {
    "xlmr-mean": XlmRobertaShape(),
    "xlmr-cls": XlmRobertaShape(pooling="cls", normalize=False, activation="relu", heads=2, layers=3),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> (the sentence-transformers directory, our exported model directory)."""
    root = tmp_path_factory.mktemp("xlm-roberta")
    out = {}
    for seed, (name, shape) in enumerate(SHAPES.items()):
        source = random_xlm_roberta_checkpoint(root / f"{name}-hf", shape, seed=seed)
        directory = import_sentence_transformer(source, root / name, name)
        export_model_dir(directory, progress_stream=io.StringIO())
        out[name] = (source, directory)
    return out


@pytest.fixture(scope="module")
def server(checkpoints):
    server = ServerThread([directory for _, directory in checkpoints.values()])
    yield server
    server.close()


@pytest.fixture(scope="module")
def references(checkpoints):
    return {
        name: sentence_transformers.SentenceTransformer(str(source), device="cpu")
        for name, (source, _) in checkpoints.items()
    }


def test_positions_count_from_padding_idx_plus_one(checkpoints):
    source, directory = checkpoints["xlmr-mean"]
    hf = json.loads((source / "config.json").read_text())
    _, config, _ = load_model_dir(directory)
    assert (config.position_offset, config.type_vocab_size) == (hf["pad_token_id"] + 1, 1)
    # The longest input: max_position_embeddings - padding_idx - 1.
    assert config.max_positions == config.max_input_tokens == hf["max_position_embeddings"] - hf["pad_token_id"] - 1
    assert (config.bos_id, config.eos_id, config.pad_id) == (0, 2, 1)


@pytest.mark.parametrize("name", SHAPES)
def test_vectors_equal_sentence_transformers(server, references, name):
    texts = stdlib_sentences(24, 3, 80) + ["Hi", "Ünïcödé, 日本語のテキスト, ελληνικά."]
    want = references[name].encode(texts, batch_size=8)
    with Client(server.target) as client:
        got = np.array(client.embed(texts, model=name, normalize=SHAPES[name].normalize).vectors)
    np.testing.assert_allclose(got, want, atol=1e-5)
    lengths = [len(references[name].tokenizer(t)["input_ids"]) for t in texts]
    assert max(lengths) > SHAPES[name].max_seq_length  # some were truncated, as sentence-transformers does


@settings(max_examples=40, deadline=None)
@given(text=st.text(min_size=1, max_size=300).filter(lambda t: t.strip() and "\x00" not in t))
def test_any_text_gives_sentence_transformers_vector(server, references, text):
    want = references["xlmr-mean"].encode([text])
    with Client(server.target) as client:
        got = np.array(client.embed([text], model="xlmr-mean").vectors)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_other_families_are_refused(tmp_path):
    from modelbuild.import_bert import bert_config

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deberta-v2"}))
    with pytest.raises(ValueError, match="model_type 'deberta-v2' is not supported"):
        bert_config(tmp_path)
