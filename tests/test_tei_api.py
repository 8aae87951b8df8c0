"""TEI's HTTP API on the HTTP port: huggingface_hub's InferenceClient (feature extraction, sentence
similarity, text classification) against the base URL as it posts to TEI, and raw requests on every route,
each giving what the gRPC door gives (TEI's scores: a sigmoid of one logit, a softmax of several); bad input
refused in TEI's shape, {"error", "error_type"}, never a 5xx, fuzzed."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import huggingface_hub.constants
import numpy as np
import pytest
from huggingface_hub import InferenceClient
from huggingface_hub.errors import HfHubHTTPError
from hypothesis import given, settings
from hypothesis import strategies as st

from model.export.model_dir import export_model_dir
from model.families.splade.importer import import_splade
from model.families.splade.random_checkpoint import random_splade_checkpoint
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http
from .json_values import JSON
from .model_cache import built

TEXTS = ["The delivery truck blocked the narrow street.", "A cat sleeps on the warm windowsill."]
NUMBERS = ["three hundred and twelve", "trois cent douze", "dreihundertzwölf", "four"]


@pytest.fixture(autouse=True)
def client_may_connect(monkeypatch):
    """conftest.py puts huggingface_hub offline (no hub is reachable here), which stops every request its
    clients make; InferenceClient here reaches only this server."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(scope="module")
def splade_dir():
    def build(root: Path) -> None:
        directory = import_splade(random_splade_checkpoint(root / "hf"), root / "splade", "splade")
        export_model_dir(directory, progress_stream=io.StringIO())

    return built("tei-splade", build, extra_sources=("tests/test_tei_api.py",)) / "splade"


@pytest.fixture(scope="module")
def server(minilm_dir, number_rankers, splade_dir):
    server = ServerThread(
        [minilm_dir, number_rankers["numbers-reranker"], number_rankers["numbers-language"], splade_dir]
    )
    yield server
    server.close()


@pytest.fixture(scope="module")
def url(server):
    return f"http://localhost:{server.server.http.port}"


def post(url: str, path: str, body: dict) -> httpx.Response:
    return http().post(f"{url}{path}", json=body, timeout=60)


def grpc_embed(server, inputs, **fields) -> pb.EmbedResponse:
    return server.stub().Embed(pb.EmbedRequest(inputs=inputs, **fields), timeout=60)


def vectors(response: pb.EmbedResponse) -> np.ndarray:
    return np.array([list(e.values) for e in response.embeddings], np.float32)


def logits(server, model: str, texts: list[str]) -> np.ndarray:
    request = pb.ClassifyRequest(model=model, inputs=texts, raw_scores=True)
    response = server.stub().Classify(request, timeout=60)
    return np.array([list(r.scores) for r in response.results])


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_inference_client_feature_extraction_at_the_base_url(server, url):
    client = InferenceClient(base_url=url)
    np.testing.assert_allclose(client.feature_extraction(TEXTS), vectors(grpc_embed(server, TEXTS)), atol=1e-6)
    one = client.feature_extraction(TEXTS[0], normalize=False, dimensions=8, truncation_direction="left")
    want = vectors(grpc_embed(server, TEXTS[:1], normalize=False))[:, :8]
    assert one.shape == (1, 8)
    np.testing.assert_allclose(one, want, atol=1e-6)
    # a route of its own, as TEI's quick tour points the client at it
    np.testing.assert_allclose(client.feature_extraction(TEXTS, model=f"{url}/embed"), client.feature_extraction(TEXTS))


def test_inference_client_sentence_similarity_and_text_classification(server, url):
    client = InferenceClient(base_url=url)
    grpc = vectors(grpc_embed(server, TEXTS + ["A cat naps in the sun."]))
    similarity = client.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:] + ["A cat naps in the sun."])
    np.testing.assert_allclose(similarity, grpc[1:] @ grpc[0], atol=1e-6)
    # the server's classifier of several labels (numbers-language), every label, best first
    labels = client.text_classification("trois cent douze")
    want = softmax(logits(server, "numbers-language", ["trois cent douze"]))[0]
    assert [x.label for x in labels] == ["fr", "en", "de", "es"][: len(labels)] and labels[0].label == "fr"
    np.testing.assert_allclose(sorted((x.score for x in labels), reverse=True), sorted(want, reverse=True), atol=1e-6)
    assert [x.label for x in client.text_classification("zwei", top_k=1)] == ["de"]


def test_inference_client_sees_tei_errors(url):
    with pytest.raises(HfHubHTTPError) as error:
        InferenceClient(base_url=url).feature_extraction("x", dimensions=999)
    assert error.value.response.status_code == 422 and "dimensions: 999; 1 to 384" in str(error.value)


def test_embed_takes_texts_and_token_ids_alike(server, url):
    ids = [list(t.ids) for t in server.stub().Tokenize(pb.TokenizeRequest(model="minilm", inputs=TEXTS)).tokenized]
    for inputs in (TEXTS, ids, [TEXTS[0], ids[1]]):
        answer = post(url, "/embed", {"inputs": inputs})
        assert answer.status_code == 200
        np.testing.assert_allclose(answer.json(), vectors(grpc_embed(server, TEXTS)), atol=1e-6)
        assert int(answer.headers["x-compute-tokens"]) == sum(len(i) for i in ids)
    single = post(url, "/embed", {"inputs": ids[0]}).json()  # one list of ids is one input, as in TEI
    assert len(single) == 1 and len(single[0]) == 384


def test_embed_sparse_and_embed_all(server, url):
    want = grpc_embed(server, TEXTS, model="splade", outputs=[pb.EMBEDDING_OUTPUT_SPARSE]).sparse_embeddings
    got = post(url, "/embed_sparse", {"inputs": TEXTS, "model": "splade"}).json()
    for g, w in zip(got, want):
        assert [x["index"] for x in g] == list(w.indices)
        np.testing.assert_allclose([x["value"] for x in g], list(w.values), atol=1e-6)
    assert post(url, "/", {"inputs": TEXTS, "model": "splade"}).json() == got  # a SPLADE model's first output
    # Unnamed, /embed_sparse takes the first model that gives sparse vectors (the default one, minilm, does not)
    assert post(url, "/embed_sparse", {"inputs": TEXTS}).json() == got
    states = grpc_embed(server, TEXTS, outputs=[pb.EMBEDDING_OUTPUT_TOKEN_EMBEDDINGS]).token_embeddings
    every = post(url, "/embed_all", {"inputs": TEXTS}).json()
    for g, w in zip(every, states):
        np.testing.assert_allclose(g, [list(v.values) for v in w.vectors], atol=1e-6)
    tokens = server.stub().Tokenize(pb.TokenizeRequest(model="minilm", inputs=TEXTS)).tokenized
    assert [len(g) for g in every] == [len(t.ids) for t in tokens] and len(every[0][0]) == 384


def test_rerank_and_predict_give_teis_scores(server, url):
    ranked = post(url, "/rerank", {"query": "312", "texts": NUMBERS, "return_text": True}).json()
    raw = (
        server.stub()
        .Rerank(pb.RerankRequest(model="numbers-reranker", query="312", documents=NUMBERS, raw_scores=True))
        .results
    )
    assert [r["index"] for r in ranked] == [r.index for r in raw]
    np.testing.assert_allclose([r["score"] for r in ranked], [1 / (1 + np.exp(-r.score)) for r in raw], atol=1e-6)
    assert [r["text"] for r in ranked] == [NUMBERS[r.index] for r in raw]
    assert "text" not in post(url, "/rerank", {"query": "312", "texts": NUMBERS}).json()[0]
    single = post(url, "/predict", {"inputs": "dreihundertzwölf"}).json()  # the classifier of several labels
    assert single[0]["label"] == "de" and [s["score"] for s in single] == sorted(
        (s["score"] for s in single), reverse=True
    )
    np.testing.assert_allclose(
        sorted(s["score"] for s in single),
        sorted(softmax(logits(server, "numbers-language", ["dreihundertzwölf"]))[0]),
        atol=1e-6,
    )
    batch = post(url, "/predict", {"inputs": [["deux"], ["312", "trois cent douze"]], "model": "numbers-reranker"})
    assert batch.status_code == 200 and len(batch.json()) == 2 and batch.json()[1][0]["label"] == "relevance"
    pair = post(
        url, "/predict", {"inputs": ["312", "trois cent douze"], "model": "numbers-reranker", "raw_scores": True}
    )
    by_rerank = [r.score for r in raw if NUMBERS[r.index] == "trois cent douze"][0]
    assert pair.json()[0]["score"] == pytest.approx(by_rerank, abs=1e-5)


def test_tokenize_decode_and_info(server, url):
    text = "Héllo wörld, 312!"
    tokens = post(url, "/tokenize", {"inputs": text}).json()[0]
    assert tokens[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    data = text.encode()
    for token in tokens[1:-1]:  # byte offsets into the UTF-8, as TEI gives them
        assert data[token["start"] : token["stop"]].decode() == token["text"] and not token["special"]
    assert [t["text"] for t in tokens[1:3]] == ["Héllo", "wörld"]
    bare = post(url, "/tokenize", {"inputs": [text], "add_special_tokens": False}).json()[0]
    assert bare == tokens[1:-1]
    ids = [t["id"] for t in tokens]
    assert post(url, "/decode", {"ids": ids}).json() == ["hello world, 312!"]
    assert post(url, "/decode", {"ids": [ids, ids[:3]], "skip_special_tokens": False}).json()[1] == "[CLS] hello world"
    info = http().get(f"{url}/info").json()
    assert info["model_id"] == "minilm" and info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert (info["max_input_length"], info["max_client_batch_size"], info["auto_truncate"]) == (256, 32, True)
    reranker = http().get(f"{url}/info", params={"model": "numbers-reranker"}).json()["model_type"]
    assert reranker == {"reranker": {"id2label": {"0": "relevance"}, "label2id": {"relevance": 0}}}


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        ("/embed", {"inputs": []}, 422, "inputs: empty; send 1 to 32 texts"),
        ("/embed", {"inputs": [[101], []]}, 422, "inputs[1]: no token ids"),
        ("/embed", {"inputs": ["a", ""]}, 422, "inputs[1]: empty text"),
        ("/embed", {"inputs": [[101, 30522]]}, 422, "inputs[0][1]: token id 30522; the model's ids are 0 to 30521"),
        ("/embed", {"inputs": 3}, 422, "inputs: not of a type it takes"),
        ("/embed", {"inputs": "x", "dimensions": 0}, 422, "dimensions: 0; 1 to 384 for model 'minilm'"),
        ("/embed", {"inputs": "x", "model": "nope"}, 404, "model: 'nope' is not served here"),
        ("/embed", {"inputs": "x " * 300, "truncate": False}, 422, "inputs[0]: more than 256 tokens"),
        ("/embed", {"inputs": "x", "truncation_direction": "Up"}, 422, "truncation_direction: Input should be"),
        ("/embed", {"inputs": "x", "prompt_name": "query"}, 422, "prompt_name: 'query' is not a prompt"),
        ("/embed_sparse", {"inputs": "x", "model": "minilm"}, 422, "outputs: model 'minilm' gives no sparse output"),
        ("/rerank", {"query": "q", "texts": []}, 422, "texts: empty; send 1 to"),
        ("/rerank", {"query": "q"}, 422, "texts: Field required"),
        ("/predict", {"inputs": ["a", "b", "c"]}, 422, "inputs: 3 texts; one text, a pair of two"),
        ("/similarity", {"inputs": {"source_sentence": "a", "sentences": []}}, 422, "inputs.sentences: empty"),
        ("/decode", {"ids": [[]]}, 422, "ids[0]: no token ids"),
        ("/tokenize", {"inputs": []}, 422, "inputs: empty; send 1 to 32 texts"),
    ],
)
def test_refusals_in_teis_shape(url, path, body, status, message):
    answer = post(url, path, body)
    assert answer.status_code == status and set(answer.json()) == {"error", "error_type"}, answer.text
    assert answer.json()["error"].startswith(message), answer.json()
    assert answer.json()["error_type"] == "Validation"


def test_a_body_over_the_limit_is_413_in_teis_shape(url):
    big = json.dumps({"inputs": ["word " * 1000] * 1000}).encode()
    answer = http().post(f"{url}/embed", content=big, headers={"content-type": "application/json"}, timeout=60)
    assert answer.status_code == 413 and answer.json()["error_type"] == "Validation"
    assert post(url, "/embed", {"inputs": "still serving"}).status_code == 200


FIELDS = st.sampled_from(
    [
        "inputs",
        "model",
        "normalize",
        "truncate",
        "truncation_direction",
        "prompt_name",
        "dimensions",
        "query",
        "texts",
        "raw_scores",
        "return_text",
        "parameters",
        "ids",
        "skip_special_tokens",
        "add_special_tokens",
    ]
)
PATHS = ["/", "/embed", "/embed_sparse", "/embed_all", "/rerank", "/predict", "/similarity", "/tokenize", "/decode"]


@settings(max_examples=400, deadline=None)
@given(path=st.sampled_from(PATHS), body=st.dictionaries(FIELDS, JSON, max_size=5))
def test_no_body_gets_a_server_error_and_the_server_serves_on(url, path, body):
    answer = post(url, path, body)
    assert answer.status_code in (200, 404, 413, 422), answer.text
    if answer.status_code != 200:
        assert set(answer.json()) == {"error", "error_type"}
    assert http().get(f"{url}/health").status_code == 200
