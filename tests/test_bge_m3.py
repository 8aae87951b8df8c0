"""bge-m3's three outputs from one pass: a random checkpoint of its layout (XLM-R, CLS pooling, FlagEmbedding's
sparse_linear.pt and colbert_linear.pt) imported, exported and served gives FlagEmbedding's dense vectors,
lexical weights and ColBERT vectors (model/families/xlm_roberta/bge_m3_reference.py) in any combination from
one call, the same as one call per output; binary and ubinary as sentence-transformers' quantize_embeddings gives them;
and what a model cannot give is refused by name."""

from __future__ import annotations

import io
import re

import grpc
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model.architecture.weights import load_model_dir
from model.export.stdlib_sentences import stdlib_sentences
from model.families.xlm_roberta.bge_m3_reference import BgeM3Reference
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

pytest.importorskip("sentence_transformers")
from .conftest import BGE_M3_COLBERT_DIM as COLBERT_DIM
from .conftest import BGE_M3_SHAPE as SHAPE

DENSE, SPARSE, MULTI = pb.EMBEDDING_OUTPUT_DENSE, pb.EMBEDDING_OUTPUT_SPARSE, pb.EMBEDDING_OUTPUT_MULTI_VECTOR
TEXTS = stdlib_sentences(10, 3, 60) + ["Hi", "Ünïcödé, 日本語のテキスト", " ".join(stdlib_sentences(4, 20, 40))]


@pytest.fixture(scope="module")
def server(bge_m3, minilm_dir):
    server = ServerThread([bge_m3[1], minilm_dir])
    yield server
    server.close()


@pytest.fixture(scope="module")
def reference(bge_m3):
    return BgeM3Reference(bge_m3[0], SHAPE.max_seq_length)


def embed(server, texts, outputs, **fields) -> pb.EmbedResponse:
    request = pb.EmbedRequest(model=fields.pop("model", "bge-m3"), inputs=texts, outputs=outputs, **fields)
    return server.stub().Embed(request, timeout=60)


def lexical(sparse: pb.SparseEmbedding) -> dict[int, float]:
    assert list(sparse.indices) == sorted(sparse.indices)
    return dict(zip(sparse.indices, sparse.values))


def assert_lexical_equal(got: dict[int, float], want: dict[int, float]) -> None:
    assert sorted(got) == sorted(want)
    np.testing.assert_allclose([got[k] for k in sorted(want)], [want[k] for k in sorted(want)], atol=1e-5)


def test_the_heads_are_imported_with_their_widths(bge_m3):
    _, config, _ = load_model_dir(bge_m3[1])
    assert (config.sparse_head, config.multi_vector_dim, config.pooling) == ("token_weights", COLBERT_DIM, "cls")


def test_three_outputs_from_one_call_equal_flagembedding(server, reference):
    dense, weights, colbert = reference.encode(TEXTS)
    response = embed(server, TEXTS, [DENSE, SPARSE, MULTI])
    np.testing.assert_allclose([e.values for e in response.embeddings], dense, atol=1e-5)
    assert len(response.sparse_embeddings) == len(response.multi_vectors) == len(TEXTS)
    for got, want in zip(response.sparse_embeddings, weights):
        assert_lexical_equal(lexical(got), want)
    for got, want in zip(response.multi_vectors, colbert):
        assert len(got.vectors) == len(want)  # every token but the first, the long text's cut at 48 - 1
        np.testing.assert_allclose([v.values for v in got.vectors], want, atol=1e-5)
    assert len(response.multi_vectors[-1].vectors) == SHAPE.max_seq_length - 1
    assert response.usage.prompt_tokens == sum(len(m) + 1 for m in colbert)


def test_one_call_gives_what_three_calls_give(server):
    together = embed(server, TEXTS[:5], [MULTI, SPARSE, DENSE])
    dense, sparse, multi = (embed(server, TEXTS[:5], [o]) for o in (DENSE, SPARSE, MULTI))
    assert not dense.sparse_embeddings and not dense.multi_vectors and not sparse.embeddings
    assert together.embeddings == dense.embeddings
    assert together.sparse_embeddings == sparse.sparse_embeddings
    assert together.multi_vectors == multi.multi_vectors


def test_binary_types_are_quantize_embeddings(server, reference):
    from sentence_transformers.util.quantization import quantize_embeddings

    dense, _, colbert = reference.encode(TEXTS[:4])
    for kind, enum, dtype in (
        ("binary", pb.EMBEDDING_TYPE_BINARY, np.int8),
        ("ubinary", pb.EMBEDDING_TYPE_UBINARY, np.uint8),
    ):
        response = embed(server, TEXTS[:4], [DENSE, MULTI], embedding_type=enum)
        got = np.array([np.frombuffer(e.packed, dtype) for e in response.embeddings])
        assert got.shape == (4, SHAPE.d_model // 8)
        np.testing.assert_array_equal(got, quantize_embeddings(dense, kind))
        for vectors, want in zip(response.multi_vectors, colbert):
            rows = np.array([np.frombuffer(v.packed, dtype) for v in vectors.vectors])
            np.testing.assert_array_equal(rows, quantize_embeddings(want, kind))


@settings(max_examples=25, deadline=None)
@given(text=st.text(min_size=1, max_size=200).filter(lambda t: t.strip() and "\x00" not in t))
def test_any_text_gives_flagembedding_lexical_weights(server, reference, text):
    _, (want,), (colbert,) = reference.encode([text])
    response = embed(server, [text], [SPARSE, MULTI])
    assert_lexical_equal(lexical(response.sparse_embeddings[0]), want)
    np.testing.assert_allclose([v.values for v in response.multi_vectors[0].vectors], colbert, atol=1e-5)


def test_listing_says_what_each_model_gives(server):
    models = {m.name: m for m in server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models}
    states = pb.EMBEDDING_OUTPUT_TOKEN_EMBEDDINGS  # every embedding model's last hidden state
    assert list(models["bge-m3"].outputs) == [DENSE, SPARSE, MULTI, states]
    assert list(models["minilm"].outputs) == [DENSE, states]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"model": "minilm", "outputs": [SPARSE]}, "outputs: model 'minilm' gives no sparse output; it gives dense"),
        ({"model": "minilm", "outputs": [MULTI]}, "gives no multi_vector output"),
        ({"outputs": [SPARSE, SPARSE]}, r"outputs: \['sparse', 'sparse'\] names an output twice"),
        ({"outputs": [7]}, "outputs: '7' is not an output; one of dense, sparse, multi_vector"),
        ({"embedding_type": 9}, "embedding_type: '9'; one of float, int8, uint8, binary, ubinary"),
    ],
)
def test_what_a_model_cannot_give_is_refused_by_name(server, fields, message):
    outputs = fields.pop("outputs", [DENSE])
    with pytest.raises(grpc.RpcError) as error:
        embed(server, ["a text"], outputs, **fields)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert re.search(message, error.value.details()), error.value.details()
    assert len(embed(server, ["still serving"], [DENSE, SPARSE]).sparse_embeddings) == 1


def test_head_files_holding_objects_are_refused(tmp_path, bge_m3):
    import shutil

    from model.families.xlm_roberta.bge_m3_heads import read_heads

    source = tmp_path / "hf"
    shutil.copytree(bge_m3[0], source)
    torch.save(
        {"weight": torch.zeros(4, 32), "bias": torch.zeros(4), "code": io.StringIO("x")}, source / "colbert_linear.pt"
    )
    with pytest.raises(ValueError, match="colbert_linear.pt: not a file of tensors only"):
        read_heads(source, 32)


def test_int8_multi_vectors_are_quantize_embeddings(server, reference):
    """Dense and multi-vectors each against their own ranges, calibrated at export on the corpus that
    quantize_embeddings is given here."""
    from sentence_transformers.util.quantization import quantize_embeddings

    from model.export.calibration import CALIBRATION_TEXTS

    calibration_dense, _, calibration_multi = reference.encode(stdlib_sentences(CALIBRATION_TEXTS, 4, 60))
    dense, _, colbert = reference.encode(TEXTS[:6])
    response = embed(server, TEXTS[:6], [DENSE, MULTI], embedding_type=pb.EMBEDDING_TYPE_INT8)
    got = np.array([np.frombuffer(e.packed, np.int8) for e in response.embeddings]).astype(np.int16)
    want = quantize_embeddings(dense, "int8", calibration_embeddings=calibration_dense).astype(np.int16)
    assert np.abs(got - want).max() <= 1 and (got == want).mean() > 0.99  # a step's edge may go either way
    rows = np.concatenate([[np.frombuffer(v.packed, np.int8) for v in m.vectors] for m in response.multi_vectors])
    ranges = np.concatenate(calibration_multi)
    want = quantize_embeddings(np.concatenate(colbert), "int8", calibration_embeddings=ranges)
    assert np.abs(rows.astype(np.int16) - want).max() <= 1 and (rows == want).mean() > 0.99
