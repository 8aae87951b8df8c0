"""ColBERT-style models as PyLate saves them: random checkpoints made by PyLate itself (conftest's
COLBERT_SHAPES: BERT with PyLate's one Dense layer; a stack of two with a bias and tanh whose queries attend
to their expansion tokens; XLM-RoBERTa without query expansion), imported, exported and served, give
PyLate's ColBERT.encode vectors within 1e-5 for queries ([Q], padded with [MASK] to the query length) and
documents ([D], punctuation dropped), over-long and hypothesis-drawn texts included; input_type says which a
text is, and every door refuses what such a model cannot give."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.architecture.weights import load_model_dir
from model.export.stdlib_sentences import stdlib_sentences
from model.families.colbert.importer import import_colbert
from service.grpc_api.pb import inference_pb2 as pb
from testing.colbert_reference import PylateProcess
from testing.server_thread import ServerThread

from .conftest import COLBERT_SHAPES
from .http_client import http
from .waits import wait_until

SHAPES = COLBERT_SHAPES
# Punctuation (the skiplist), an over-long text, a text of punctuation only (no vectors kept), words
# outside the vocabulary.
TEXTS = stdlib_sentences(6, 3, 40) + ["Hi!", "a, b; c. (d)", " ".join(stdlib_sentences(4, 20, 40)), "?!", "ŋæ ð"]
ROLES = {"query": pb.EmbedRequest(input_type="search_query"), "document": pb.EmbedRequest(input_type="search_document")}


@pytest.fixture(scope="module")
def server(colbert_models):
    server = ServerThread([directory for _, directory in colbert_models.values()])
    yield server
    server.close()


@pytest.fixture(scope="module")
def pylate():
    process = PylateProcess()
    yield process
    process.close()


def served_vectors(server, name: str, texts: list[str], role: str, **fields) -> list[np.ndarray]:
    request = pb.EmbedRequest(model=name, inputs=texts, **fields)
    request.MergeFrom(ROLES[role])
    response = server.stub().Embed(request, timeout=60)
    assert not response.embeddings and not response.sparse_embeddings
    return [np.array([list(v.values) for v in m.vectors], np.float32) for m in response.multi_vectors]


def assert_equal_vectors(got: list[np.ndarray], want: list[np.ndarray], dim: int) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = w.reshape(-1, dim)
        assert g.reshape(-1, dim).shape == w.shape
        np.testing.assert_allclose(g.reshape(-1, dim), w, atol=1e-5)


def test_the_settings_are_pylates(colbert_models):
    source, directory = colbert_models["colbert"]
    colbert = load_model_dir(directory)[1].colbert
    tokens = {t["content"]: t["id"] for t in json.loads((source / "tokenizer.json").read_text())["added_tokens"]}
    assert (colbert.query_prefix_id, colbert.document_prefix_id) == (tokens["[Q] "], tokens["[D] "])
    assert (colbert.query_length, colbert.document_length, colbert.expansion_id) == (16, 40, tokens["[MASK]"])
    assert (colbert.dims, colbert.bias, colbert.query_expansion, colbert.attend_to_expansion) == (
        (24,),
        (False,),
        True,
        False,
    )
    assert len(colbert.skiplist_ids) == 32  # string.punctuation, PyLate's default
    stack = load_model_dir(colbert_models["colbert-stack"][1])[1].colbert
    assert (stack.dims, stack.bias, stack.activations, stack.attend_to_expansion) == (
        (40, 16),
        (True, False),
        ("tanh", "identity"),
        True,
    )


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", SHAPES)
def test_vectors_equal_pylates(server, pylate, colbert_models, name, role):
    source, directory = colbert_models[name]
    dim = load_model_dir(directory)[1].colbert.dim
    got = served_vectors(server, name, TEXTS, role)
    assert_equal_vectors(got, pylate.encode(source, TEXTS, role), dim)
    query_length = SHAPES[name]["query_length"]
    if role == "query" and SHAPES[name].get("do_query_expansion", True):  # the expansion tokens' vectors kept
        assert {len(g) for g in got} == {query_length}
    elif role == "query":
        assert max(len(g) for g in got) == query_length and min(len(g) for g in got) < query_length
    else:  # documents: cut at the document length, punctuation dropped (WordPiece's "?!": [CLS] [D] [SEP] left)
        assert max(len(g) for g in got) <= SHAPES[name]["document_length"]
        assert (
            len(got[-2]) == 3 or SHAPES[name].get("family") == "xlm-roberta"
        )  # sentencepiece's "▁?!" is no skiplist word


@settings(max_examples=20, deadline=None)
@given(
    text=st.text(min_size=1, max_size=160).filter(lambda t: t.strip() and "\x00" not in t),
    role=st.sampled_from(sorted(ROLES)),
)
def test_any_text_gives_pylates_vectors(server, pylate, colbert_models, text, role):
    source, _ = colbert_models["colbert"]
    assert_equal_vectors(served_vectors(server, "colbert", [text], role), pylate.encode(source, [text], role), 24)


def test_queries_and_documents_batched_together_give_what_each_gives_alone(server, pylate, colbert_models):
    """A query's expansion tokens are masked keys in its own row only: calls queued while the model is
    busy run in one batch of queries and documents, and each gets PyLate's vectors."""
    source, _ = colbert_models["colbert"]
    calls = [(TEXTS[i : i + 2], role) for i in range(0, 8, 2) for role in ROLES]
    release = server.hold_model_thread()
    batches = batcher(server).batches_run
    stub, futures = server.stub(), []
    for texts, role in calls:
        request = pb.EmbedRequest(model="colbert", inputs=texts)
        request.MergeFrom(ROLES[role])
        futures.append(stub.Embed.future(request, timeout=60))
    queued = lambda: len(batcher(server).waiting) + len(batcher(server).running)  # noqa: E731
    wait_until(lambda: server.call_and_wait(queued) == 16, what="all 16 texts queued or in the held batch")
    release.set()
    for (texts, role), future in zip(calls, futures):
        got = [np.array([list(v.values) for v in m.vectors], np.float32) for m in future.result().multi_vectors]
        assert_equal_vectors(got, pylate.encode(source, texts, role), 24)
    assert batcher(server).batches_run - batches < len(calls)  # some calls shared a batch


def batcher(server):
    return server.engine_core.registry.models["colbert"].batcher


def test_typed_vectors(server):
    floats = served_vectors(server, "colbert", TEXTS[:3], "document")
    request = pb.EmbedRequest(model="colbert", inputs=TEXTS[:3], embedding_type=pb.EMBEDDING_TYPE_UBINARY)
    request.MergeFrom(ROLES["document"])
    response = server.stub().Embed(request, timeout=60)
    for f, m in zip(floats, response.multi_vectors):
        assert [v.packed for v in m.vectors] == [bytes(row) for row in np.packbits(f > 0, axis=-1)]
    request.embedding_type = pb.EMBEDDING_TYPE_INT8  # calibrated at export on documents
    response = server.stub().Embed(request, timeout=60)
    assert all(len(v.packed) == 24 for m in response.multi_vectors for v in m.vectors)


def test_input_type_is_needed_and_dense_is_not_given(server):
    models = {m.name: m for m in server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models}
    assert list(models["colbert"].outputs) == [pb.EMBEDDING_OUTPUT_MULTI_VECTOR, pb.EMBEDDING_OUTPUT_TOKEN_EMBEDDINGS]
    refusals = {
        "input_type: model 'colbert' embeds queries and documents apart: search_query or search_document, "
        "none is given": pb.EmbedRequest(model="colbert", inputs=["a"]),
        "input_type: model 'colbert' embeds queries and documents apart: search_query or search_document, "
        "not 'clustering'": pb.EmbedRequest(model="colbert", inputs=["a"], input_type="clustering"),
        "outputs: model 'colbert' gives no dense output; it gives multi_vector, token_embeddings": pb.EmbedRequest(
            model="colbert", inputs=["a"], input_type="search_query", outputs=[pb.EMBEDDING_OUTPUT_DENSE]
        ),
        "inputs[0]: more than 15 tokens, the most model 'colbert' takes in a query; shorten it or set truncate "
        "to true": pb.EmbedRequest(model="colbert", inputs=[TEXTS[8]], input_type="search_query", truncate=False),
    }
    for details, request in refusals.items():
        with pytest.raises(grpc.RpcError) as error:
            server.stub().Embed(request, timeout=30)
        assert (error.value.code(), error.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, details)
    answer = http().post(
        f"http://127.0.0.1:{server.server.http.port}/v1/embeddings",
        json={"model": "colbert", "input": ["a"]},
        timeout=30,
    )
    assert answer.status_code == 400 and "gives no dense output; it gives multi_vector" in answer.text, answer.text


def _edited(source, tmp_path, path: str, **changes):
    copy = shutil.copytree(source, tmp_path / "edited")
    found = json.loads((copy / path).read_text())
    (copy / path).write_text(json.dumps(found | changes))
    return copy


@pytest.mark.parametrize(
    "path, changes, message",
    [
        ("1_Dense/config.json", {"use_residual": True}, "a Dense layer with use_residual is not supported"),
        ("1_Dense/config.json", {"activation_function": "torch.nn.modules.activation.ReLU"}, "activation"),
        ("config_sentence_transformers.json", {"query_prefix": "[query]"}, "the query prefix '[query]' is not a token"),
        ("config_sentence_transformers.json", {"document_length": 200}, "length 200 exceeds the encoder's 80"),
    ],
)
def test_the_importer_refuses_what_it_cannot_serve(colbert_models, tmp_path, path, changes, message):
    source = _edited(colbert_models["colbert"][0], tmp_path, path, **changes)
    with pytest.raises(ValueError, match=re.escape(message)):
        import_colbert(source, tmp_path / "out", "x")


def test_the_cli_imports_it(colbert_models, tmp_path):
    source = colbert_models["colbert"][0]
    done = subprocess.run(
        [sys.executable, "-m", "cli", "import", str(source), str(tmp_path / "c"), "--name", "c"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "(bert ColBERT) as 'c'" in done.stdout, done.stderr
    assert load_model_dir(tmp_path / "c")[1].colbert.dims == (24,)
