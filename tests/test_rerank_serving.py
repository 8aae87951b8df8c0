"""Rerank and Classify on a real server, with random cross-encoders built by transformers and saved by
CrossEncoder: scores equal CrossEncoder.predict within 1e-5 (over-long pairs included) on gRPC, on
/v1/rerank and on KServe v2; documents ranked best first, ties in their order, top_n; bad input refused by
name on every door."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.export.stdlib_sentences import stdlib_sentences
from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import open_inference_pb2 as oip
from service.grpc_api.pb import open_inference_pb2_grpc as oip_grpc
from testing.server_thread import ServerThread

from .http_client import http

sentence_transformers = pytest.importorskip("sentence_transformers")
QUERY = "How does the module parse its command line arguments?"


@pytest.fixture(scope="module")
def server(cross_encoders, minilm_dir):
    dirs = [minilm_dir] + [directory for _, directory in cross_encoders.values()]
    server = ServerThread(dirs, rerank_max_documents=40)
    yield server
    server.close()


@pytest.fixture(scope="module")
def references(cross_encoders):
    return {
        name: sentence_transformers.CrossEncoder(str(source), device="cpu")
        for name, (source, _) in cross_encoders.items()
    }


def logits_of(reference, texts: list[str]) -> np.ndarray:
    """The classifier's logits of single texts, by transformers (CrossEncoder.predict takes pairs)."""
    import torch

    batch = reference.tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        return reference.model(**batch).logits.numpy()


def documents(count: int = 16) -> list[str]:
    return stdlib_sentences(count, 3, 50) + [" ".join(stdlib_sentences(5, 20, 40))]  # the last is over-long


def rerank(server, **fields) -> pb.RerankResponse:
    return server.stub().Rerank(pb.RerankRequest(**fields), timeout=60)


@pytest.mark.parametrize("name", ["bert-reranker", "xlmr-reranker"])
def test_rerank_equals_cross_encoder_predict_best_first(server, references, name):
    docs = documents()
    want = references[name].predict([(QUERY, d) for d in docs])
    response = rerank(server, model=name, query=QUERY, documents=docs, return_documents=True)
    assert [r.index for r in response.results] == sorted(range(len(docs)), key=lambda i: (-want[i], i))
    np.testing.assert_allclose([r.score for r in response.results], sorted(want, reverse=True), atol=1e-5)
    assert all(r.document == docs[r.index] for r in response.results)
    assert response.prompt_tokens > 0 and response.model == name


def test_top_n_raw_scores_and_ties(server, references):
    docs = documents()
    full = rerank(server, model="bert-reranker", query=QUERY, documents=docs)
    top = rerank(server, model="bert-reranker", query=QUERY, documents=docs, top_n=3)
    assert list(top.results) == list(full.results[:3]) and all(r.document == "" for r in top.results)
    raw = rerank(server, model="bert-reranker", query=QUERY, documents=docs, raw_scores=True)
    logits = {r.index: r.score for r in raw.results}
    np.testing.assert_allclose(
        [1 / (1 + np.exp(-logits[r.index])) for r in full.results], [r.score for r in full.results], atol=1e-6
    )
    same = rerank(server, model="bert-reranker", query=QUERY, documents=["the same text"] * 4 + [docs[0]])
    tied = [r.index for r in same.results if r.index < 4]
    assert tied == [0, 1, 2, 3]  # equal scores keep the documents' order
    many = rerank(server, model="bert-reranker", query=QUERY, documents=docs, top_n=1000)
    assert len(many.results) == len(docs)


@settings(max_examples=25, deadline=None)
@given(
    query=st.text(min_size=1, max_size=60).filter(str.strip),
    docs=st.lists(st.text(min_size=1, max_size=200).filter(str.strip), min_size=1, max_size=6),
)
def test_any_query_and_documents_score_as_cross_encoder_does(server, references, query, docs):
    docs = [d for d in docs if "\x00" not in d] or ["a document"]
    query = query.replace("\x00", "") or "a query"
    want = references["xlmr-reranker"].predict([(query, d) for d in docs])
    response = rerank(server, model="xlmr-reranker", query=query, documents=docs)
    got = {r.index: r.score for r in response.results}
    np.testing.assert_allclose([got[i] for i in range(len(docs))], want, atol=1e-5)


def test_only_the_document_is_cut_when_asked(server, references):
    long_doc = " ".join(stdlib_sentences(6, 20, 40))
    tokenizer = references["bert-reranker"].tokenizer
    ids = tokenizer([QUERY], [long_doc], truncation="only_second", max_length=64, return_tensors="pt")
    with_torch = references["bert-reranker"].model(**ids).logits[0, 0].item()
    response = rerank(
        server,
        model="bert-reranker",
        query=QUERY,
        documents=[long_doc],
        raw_scores=True,
        truncation=pb.PAIR_TRUNCATION_ONLY_DOCUMENT,
    )
    assert response.results[0].score == pytest.approx(with_torch, abs=1e-5)


def test_classify_gives_every_labels_score(server, references):
    texts = stdlib_sentences(5, 3, 30)
    response = server.stub().Classify(pb.ClassifyRequest(model="bert-classifier", inputs=texts), timeout=60)
    assert list(response.labels) == ["negative", "neutral", "positive"]
    want = logits_of(references["bert-classifier"], texts)  # single texts: no second segment
    np.testing.assert_allclose([list(r.scores) for r in response.results], want, atol=1e-5)
    assert [r.label for r in response.results] == [response.labels[int(np.argmax(w))] for w in want]
    models = {m.name: m for m in server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models}
    assert models["bert-classifier"].task == pb.TASK_CLASSIFICATION and list(models["bert-reranker"].labels) == [
        "LABEL_0"
    ]


def test_v1_rerank_in_cohere_and_jina_shape(server, references):
    docs = documents(6)
    url = f"http://localhost:{server.server.http.port}/v1/rerank"
    body = {
        "model": "bert-reranker",
        "query": QUERY,
        "documents": [{"text": d} for d in docs],
        "top_n": 4,
        "return_documents": True,
    }
    answer = http().post(url, json=body, timeout=60).json()
    grpc_answer = rerank(server, model="bert-reranker", query=QUERY, documents=docs, top_n=4)
    assert [r["index"] for r in answer["results"]] == [r.index for r in grpc_answer.results]
    np.testing.assert_allclose(
        [r["relevance_score"] for r in answer["results"]], [r.score for r in grpc_answer.results], atol=1e-6
    )
    assert answer["results"][0]["document"] == {"text": docs[answer["results"][0]["index"]]}
    assert answer["model"] == "bert-reranker" and answer["usage"]["total_tokens"] > 0
    plain = http().post(url, json={"query": QUERY, "documents": docs}, timeout=60).json()  # the default model
    assert "document" not in plain["results"][0] and len(plain["results"]) == len(docs)


def test_kserve_scores_a_classifier(server, references):
    stub = oip_grpc.GRPCInferenceServiceStub(server.channel())
    texts = stdlib_sentences(3, 3, 20)
    request = oip.ModelInferRequest(model_name="bert-classifier")
    tensor = request.inputs.add(name="text", datatype="BYTES", shape=[len(texts)])
    tensor.contents.bytes_contents.extend(t.encode() for t in texts)
    response = stub.ModelInfer(request, timeout=60)
    (scores,) = [o for o in response.outputs if o.name == "scores"]
    raw = response.raw_output_contents
    got = np.frombuffer(raw[0], "<f4") if raw else np.array(scores.contents.fp32_contents)
    got = got.reshape(scores.shape)
    np.testing.assert_allclose(got, logits_of(references["bert-classifier"], texts), atol=1e-5)


def test_bad_input_is_refused_by_name_on_every_door(server):
    cases = [
        (dict(model="bert-reranker", query="", documents=["x"]), "query: empty text"),
        (dict(model="bert-reranker", query="q", documents=[]), "documents: empty; send 1 to 40 documents"),
        (
            dict(model="bert-reranker", query="q", documents=["x"] * 41),
            "41 documents; at most 40 per call (rerank_max_documents)",
        ),
        (dict(model="bert-reranker", query="q", documents=["x", ""]), "documents[1]: empty text"),
        (dict(model="bert-reranker", query="q", documents=["x"], top_n=0), "top_n: 0; at least 1"),
        (dict(model="bert-classifier", query="q", documents=["x"]), "is a classifier of 3 labels"),
        (
            dict(model="minilm", query="q", documents=["x"]),
            "'minilm' is an embedding model; Rerank needs one of task 'classification'",
        ),
        (
            dict(model="bert-reranker", query="q " * 80, documents=["x"], truncation=pb.PAIR_TRUNCATION_ONLY_DOCUMENT),
            "query: too long to leave room",
        ),
    ]
    for fields, message in cases:
        with pytest.raises(grpc.RpcError) as raised:
            rerank(server, **fields)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in raised.value.details(), (
            raised.value.details()
        )
    url = f"http://localhost:{server.server.http.port}/v1/rerank"
    for body, param in [
        ({"query": "q", "documents": []}, "documents"),
        ({"documents": ["x"]}, "query"),
        ({"query": "q", "documents": ["x"], "max_chunks_per_doc": 2}, "max_chunks_per_doc"),
        ({"query": "q", "documents": [{"txt": "x"}]}, "documents[0]"),
    ]:
        response = http().post(url, json=body)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
    with pytest.raises(grpc.RpcError) as raised:
        server.stub().Embed(pb.EmbedRequest(model="bert-reranker", inputs=["x"]), timeout=10)
    assert "classification model" in raised.value.details()
