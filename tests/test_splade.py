"""SPLADE (sentence-transformers' SparseEncoder: a BERT masked-LM and SpladePooling): random checkpoints of
both poolings and activations, saved as released SPLADE checkpoints are and as sentence-transformers 6 saves
a new one, imported, exported and served, give SparseEncoder.encode's weights per
vocabulary id within 1e-5, over-long and hypothesis-drawn texts included; the model has no dense output,
and says so on every door."""

from __future__ import annotations

import io
from pathlib import Path

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.architecture.weights import load_model_dir
from model.export.model_dir import export_model_dir
from model.export.stdlib_sentences import stdlib_sentences
from model.families.splade.importer import import_splade
from model.families.splade.random_checkpoint import random_splade_checkpoint
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http
from .model_cache import built
from .slow_tests import slow_fixture

sentence_transformers = pytest.importorskip("sentence_transformers")
# name -> (pooling, activation, saved as sentence-transformers 6 saves a new one)
SHAPES = {
    "splade-max": ("max", "relu", False),
    "splade-sum": ("sum", "log1p_relu", False),
    "splade-fill-mask": ("max", "relu", True),
}
TEXTS = stdlib_sentences(8, 3, 40) + ["Hi", " ".join(stdlib_sentences(4, 20, 40))]  # the last is over-long


@slow_fixture(scope="module")
def checkpoints():
    def build(root: Path) -> None:
        for seed, (name, (pooling, activation, fill_mask)) in enumerate(SHAPES.items()):
            source = random_splade_checkpoint(root / f"{name}-hf", pooling, activation, seed=seed, fill_mask=fill_mask)
            export_model_dir(import_splade(source, root / name, name), progress_stream=io.StringIO())

    root = built("splade", build, extra_sources=("tests/test_splade.py",))
    return {name: (root / f"{name}-hf" / "model", root / name) for name in SHAPES}  # the checkpoint's model/


@pytest.fixture(scope="module")
def server(checkpoints):
    server = ServerThread([directory for _, directory in checkpoints.values()])
    yield server
    server.close()


@pytest.fixture(scope="module")
def references(checkpoints):
    return {name: sentence_transformers.SparseEncoder(str(s), device="cpu") for name, (s, _) in checkpoints.items()}


def dense_of(response: pb.EmbedResponse, vocabulary: int) -> np.ndarray:
    out = np.zeros((len(response.sparse_embeddings), vocabulary), np.float32)
    for row, sparse in enumerate(response.sparse_embeddings):
        assert list(sparse.indices) == sorted(sparse.indices) and min(sparse.values) > 0
        out[row, list(sparse.indices)] = sparse.values
    return out


def test_the_head_and_pooling_are_imported(checkpoints):
    for name, (pooling, activation, _) in SHAPES.items():
        _, config, _ = load_model_dir(checkpoints[name][1])
        assert (config.sparse_head, config.splade_pooling, config.splade_activation) == ("splade", pooling, activation)


@pytest.mark.parametrize("name", SHAPES)
def test_weights_equal_sparse_encoder(server, references, name):
    want = references[name].encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
    response = server.stub().Embed(pb.EmbedRequest(model=name, inputs=TEXTS), timeout=60)  # sparse by default
    got = dense_of(response, want.shape[1])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)  # sums over 64 positions reach 40
    assert (want > 0).sum(axis=1).min() > 0 and not response.embeddings


@settings(max_examples=25, deadline=None)
@given(text=st.text(min_size=1, max_size=200).filter(lambda t: t.strip() and "\x00" not in t))
def test_any_text_gives_sparse_encoder_weights(server, references, text):
    want = references["splade-max"].encode([text], convert_to_tensor=True).to_dense().numpy()
    request = pb.EmbedRequest(model="splade-max", inputs=[text], outputs=[pb.EMBEDDING_OUTPUT_SPARSE])
    np.testing.assert_allclose(dense_of(server.stub().Embed(request, timeout=60), want.shape[1]), want, atol=1e-5)


def test_no_dense_output_on_any_door(server):
    models = {m.name: m for m in server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models}
    assert list(models["splade-max"].outputs) == [pb.EMBEDDING_OUTPUT_SPARSE, pb.EMBEDDING_OUTPUT_TOKEN_EMBEDDINGS]
    with pytest.raises(grpc.RpcError) as error:
        request = pb.EmbedRequest(model="splade-max", inputs=["a"], outputs=[pb.EMBEDDING_OUTPUT_DENSE])
        server.stub().Embed(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        error.value.details() == "outputs: model 'splade-max' gives no dense output; it gives sparse, token_embeddings"
    )
    answer = http().post(
        f"http://127.0.0.1:{server.server.http.port}/v1/embeddings",
        json={"model": "splade-max", "input": ["a"]},
        timeout=30,
    )
    assert answer.status_code == 400 and "gives no dense output; it gives sparse" in answer.text, answer.text


def test_the_cli_imports_it(checkpoints, tmp_path):
    import subprocess
    import sys

    source = checkpoints["splade-max"][0]
    done = subprocess.run(
        [sys.executable, "-m", "cli", "import", str(source), str(tmp_path / "s"), "--name", "s"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "(bert SPLADE) as 's'" in done.stdout, done.stderr
    assert load_model_dir(tmp_path / "s")[1].sparse_head == "splade"


def test_embedding_types_leave_sparse_weights_as_they_are(server):
    """int8 and the bit types are of dense vectors and multi-vectors: a SPLADE model's weights stay float."""
    plain = server.stub().Embed(pb.EmbedRequest(model="splade-max", inputs=TEXTS[:3]), timeout=60)
    typed = pb.EmbedRequest(model="splade-max", inputs=TEXTS[:3], embedding_type=pb.EMBEDDING_TYPE_INT8)
    assert server.stub().Embed(typed, timeout=60).sparse_embeddings == plain.sparse_embeddings
