"""XLM-RoBERTa sentence-embedding checkpoints (multilingual-e5, bge-m3's encoder, paraphrase-multilingual):
random ones built by transformers and saved by sentence-transformers, imported, exported and served, give
sentence-transformers' own vectors, over inputs of any text and length, truncated where it truncates (at
either end), with the checkpoint's prompts by name, by Cohere's input type and by default."""

from __future__ import annotations

import io
import json
from pathlib import Path

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.architecture.weights import load_model_dir
from model.export.model_dir import export_model_dir
from model.export.stdlib_sentences import stdlib_sentences
from model.families.bert.importer import import_sentence_transformer
from model.families.xlm_roberta.random_checkpoint import XlmRobertaShape, random_xlm_roberta_checkpoint
from service.grpc_api.client import Client
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http
from .model_cache import built
from .slow_tests import slow_fixture

sentence_transformers = pytest.importorskip("sentence_transformers")
E5_PROMPTS = (("query", "query: "), ("passage", "passage: "))  # multilingual-e5's
SHAPES = {
    "xlmr-mean": XlmRobertaShape(prompts=E5_PROMPTS),
    "xlmr-cls": XlmRobertaShape(
        pooling="cls",
        normalize=False,
        activation="relu",
        heads=2,
        layers=3,
        prompts=E5_PROMPTS,
        default_prompt_name="query",
    ),
}


@slow_fixture(scope="module")
def checkpoints():
    """name -> (the sentence-transformers directory, our exported model directory)."""

    def build(root: Path) -> None:
        for seed, (name, shape) in enumerate(SHAPES.items()):
            source = random_xlm_roberta_checkpoint(root / f"{name}-hf", shape, seed=seed)
            export_model_dir(import_sentence_transformer(source, root / name, name), progress_stream=io.StringIO())

    root = built("xlm-roberta", build, extra_sources=("tests/test_import_xlm_roberta.py",))
    return {name: (root / f"{name}-hf" / "model", root / name) for name in SHAPES}  # the checkpoint's model/


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
    from model.families.bert.importer import bert_config

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deberta-v2"}))
    with pytest.raises(ValueError, match="model_type 'deberta-v2' is not supported"):
        bert_config(tmp_path)


def embed(server, name: str, texts: list[str], **fields) -> tuple[np.ndarray, pb.EmbedResponse]:
    request = pb.EmbedRequest(model=name, inputs=texts, normalize=SHAPES[name].normalize, **fields)
    response = server.stub().Embed(request, timeout=60)
    return np.array([e.values for e in response.embeddings]), response


def test_prompts_by_name_by_input_type_and_by_default(server, references):
    texts = stdlib_sentences(6, 3, 30)
    e5 = references["xlmr-mean"]
    query, _ = embed(server, "xlmr-mean", texts, prompt_name="query")
    np.testing.assert_allclose(query, e5.encode(texts, prompt_name="query"), atol=1e-5)
    by_type, response = embed(server, "xlmr-mean", texts, input_type="search_document")
    np.testing.assert_allclose(by_type, e5.encode(texts, prompt_name="passage"), atol=1e-5)
    plain, _ = embed(server, "xlmr-mean", texts, input_type="clustering")  # no such prompt: none
    np.testing.assert_allclose(plain, e5.encode(texts), atol=1e-5)
    # The prompt's tokens are counted as the caller's (up to the truncation, which cuts the text).
    cap = SHAPES["xlmr-mean"].max_seq_length
    counted = sum(min(len(e5.tokenizer("passage: " + t)["input_ids"]), cap) for t in texts)
    assert response.usage.prompt_tokens == counted
    default, _ = embed(server, "xlmr-cls", texts)  # its default prompt is "query"
    np.testing.assert_allclose(default, references["xlmr-cls"].encode(texts), atol=1e-5)
    np.testing.assert_allclose(default, references["xlmr-cls"].encode(texts, prompt_name="query"), atol=1e-5)
    models = {m.name: m for m in server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models}
    assert sorted(models["xlmr-cls"].prompt_names) == ["passage", "query"]
    assert models["xlmr-cls"].default_prompt_name == "query" and models["xlmr-mean"].default_prompt_name == ""


def test_long_inputs_are_cut_at_the_end_asked(server, references):
    long_texts = [" ".join(stdlib_sentences(6, 10, 40))]
    e5 = references["xlmr-mean"]
    right, _ = embed(server, "xlmr-mean", long_texts)
    left, response = embed(server, "xlmr-mean", long_texts, truncation_direction=pb.TRUNCATION_DIRECTION_LEFT)
    np.testing.assert_allclose(right, e5.encode(long_texts), atol=1e-5)
    e5.tokenizer.truncation_side = "left"
    try:
        np.testing.assert_allclose(left, e5.encode(long_texts), atol=1e-5)
    finally:
        e5.tokenizer.truncation_side = "right"
    assert response.usage.truncated_inputs == 1 and not np.allclose(left, right, atol=1e-3)


def test_prompts_on_the_openai_door_and_refusals_by_name(server):
    texts = ["A cat sleeps.", "The delivery truck blocked the street."]
    grpc_vectors, _ = embed(server, "xlmr-mean", texts, prompt_name="passage")
    url = f"http://localhost:{server.server.http.port}/v1/embeddings"
    answer = http().post(url, json={"model": "xlmr-mean", "input": texts, "prompt_name": "passage"}).json()
    np.testing.assert_allclose([d["embedding"] for d in answer["data"]], grpc_vectors, atol=1e-6)
    cases = [
        (
            dict(prompt_name="instruct"),
            "prompt_name: 'instruct' is not a prompt of model 'xlmr-mean'; its prompts are passage, query",
        ),
        (dict(input_type="search"), "input_type: 'search'; one of search_query, search_document"),
        (dict(prompt_name="query", input_type="search_query"), "prompt_name: give prompt_name or input_type, not both"),
        (dict(truncation_direction=5), "truncation_direction: '5'; right or left"),
    ]
    for fields, message in cases:
        with pytest.raises(grpc.RpcError) as raised:
            embed(server, "xlmr-mean", texts, **fields)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in raised.value.details()
    refused = http().post(url, json={"model": "xlmr-mean", "input": "x", "prompt_name": "nope"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "prompt_name"
