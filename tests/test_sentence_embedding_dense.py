"""Sentence embeddings with Dense layers after the pooling: sentence-T5 / GTR-T5 (a T5 encoder, mean pooling,
a Dense layer without bias, Normalize) and a LaBSE-shaped checkpoint (the first token's state, a Dense layer
with bias and tanh): random ones saved by sentence-transformers, imported by the family `attnserve import`
picks, exported and served, give sentence-transformers' own vectors of the Dense layer's width on every
embedding door; modules the server would leave out are refused by name."""

from __future__ import annotations

import io
import json
import shutil

import numpy as np
import pytest

from model.export.model_dir import export_model_dir
from model.export.stdlib_sentences import stdlib_sentences
from model.families.choice import family_of
from model.families.t5.random_checkpoint import T5Shape, random_sentence_t5_checkpoint
from model.families.t5.sentence_t5 import import_sentence_t5
from model.families.xlm_roberta.random_checkpoint import XlmRobertaShape, random_xlm_roberta_checkpoint
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http
from .slow_tests import slow_fixture

sentence_transformers = pytest.importorskip("sentence_transformers")

SENTENCE_T5 = T5Shape(d_kv=16, buckets=8, max_distance=12)  # far buckets within the 64 tokens it reads
SENTENCE_T5_DIM = 48  # the Dense layer's width, not d_model's 32
LABSE = XlmRobertaShape(pooling="cls", dense=((40, True, "tanh"),))
TEXTS = stdlib_sentences(20, 3, 80) + ["Hi", "Ünïcödé, 日本語のテキスト, ελληνικά."]


@slow_fixture(scope="module")
def dense_models(tmp_path_factory):
    """name -> the sentence-transformers reference; and one server of both models."""
    root = tmp_path_factory.mktemp("dense")
    sources = {
        "sentence-t5": random_sentence_t5_checkpoint(root / "st5-hf", SENTENCE_T5, SENTENCE_T5_DIM, seed=3),
        "labse": random_xlm_roberta_checkpoint(root / "labse-hf", LABSE, seed=4),
    }
    dirs = []
    for name, source in sources.items():
        family, _ = family_of(source)
        dirs.append(family.importer(source, root / name, name))
        export_model_dir(dirs[-1], progress_stream=io.StringIO())
    references = {name: sentence_transformers.SentenceTransformer(str(s), device="cpu") for name, s in sources.items()}
    server = ServerThread(dirs)
    yield references, sources, server
    server.close()


def test_a_sentence_t5_directory_is_taken_by_the_sentence_t5_importer(dense_models):
    _, sources, _ = dense_models
    family, kind = family_of(sources["sentence-t5"])
    assert (family.importer, kind) == (import_sentence_t5, "t5 sentence-transformers")


@pytest.mark.parametrize("name, width", [("sentence-t5", SENTENCE_T5_DIM), ("labse", 40)])
def test_vectors_equal_sentence_transformers_at_the_dense_layers_width(dense_models, name, width):
    references, _, server = dense_models
    want = references[name].encode(TEXTS, batch_size=8)
    response = server.stub().Embed(pb.EmbedRequest(model=name, inputs=TEXTS), timeout=60)
    got = np.array([list(e.values) for e in response.embeddings], np.float32)
    assert got.shape == want.shape == (len(TEXTS), width)
    np.testing.assert_allclose(got, want, atol=1e-5)
    lengths = [len(references[name].tokenizer(t)["input_ids"]) for t in TEXTS]
    assert max(lengths) > references[name].max_seq_length  # some were cut, where sentence-transformers cuts
    models = {m.name: m for m in server.stub().ListModels(pb.ListModelsRequest(), timeout=10).models}
    assert models[name].dimensions == width


def test_every_embedding_door_gives_the_same_vectors(dense_models):
    references, _, server = dense_models
    want = references["sentence-t5"].encode(TEXTS[:4])
    base = f"http://localhost:{server.server.http.port}"
    client = http()
    openai = client.post(f"{base}/v1/embeddings", json={"model": "sentence-t5", "input": TEXTS[:4]}).json()
    tei = client.post(f"{base}/embed", json={"model": "sentence-t5", "inputs": TEXTS[:4]}).json()
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [4], "data": TEXTS[:4]}]}
    kserve = client.post(f"{base}/v2/models/sentence-t5/infer", json=body).json()
    np.testing.assert_allclose([d["embedding"] for d in openai["data"]], want, atol=1e-5)
    np.testing.assert_allclose(tei, want, atol=1e-5)
    np.testing.assert_allclose(np.reshape(kserve["outputs"][0]["data"], (4, SENTENCE_T5_DIM)), want, atol=1e-5)
    cut = client.post(f"{base}/v1/embeddings", json={"model": "sentence-t5", "input": "x", "dimensions": 49})
    assert cut.status_code == 400 and "1 to 48 for model 'sentence-t5'" in cut.text


@pytest.mark.parametrize(
    "change, reason",
    [
        (
            lambda modules, source: modules.insert(
                3, {"idx": 3, "path": "", "type": "sentence_transformers.models.LayerNorm"}
            ),
            "modules Pooling, Dense, LayerNorm, Normalize after the Transformer; supported: Pooling, Dense layers, Normalize",
        ),
        (
            lambda modules, source: (source / "2_Dense" / "config.json").write_text(
                json.dumps(
                    {
                        **json.loads((source / "2_Dense" / "config.json").read_text()),
                        "module_input_name": "token_embeddings",
                    }
                )
            ),
            "a Dense layer on token_embeddings, where sentence_embedding is read",
        ),
    ],
)
def test_modules_the_server_would_leave_out_are_refused_by_name(dense_models, tmp_path, change, reason):
    _, sources, _ = dense_models
    source = tmp_path / "st5"
    shutil.copytree(sources["sentence-t5"], source)
    modules = json.loads((source / "modules.json").read_text())
    change(modules, source)
    (source / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match=reason):
        import_sentence_t5(source, tmp_path / "out", "x")
