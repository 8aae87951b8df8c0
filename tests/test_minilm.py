"""Oracle: all-MiniLM-L6-v2 through our importer, exporter, tokenizer and ONNX Runtime against
sentence-transformers' own encode(normalize_embeddings=True)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from modeldir.files import open_model_dir
from modeldir.tokenizer import TextTokenizer, pad_batch

from .minilm_texts import TEXTS


@pytest.fixture(scope="module")
def onnx_embeddings(minilm_dir):
    files = open_model_dir(minilm_dir)
    tokenizer = TextTokenizer(files.tokenizer, files.config.max_input_tokens)
    session = ort.InferenceSession(str(files.encoder), providers=["CPUExecutionProvider"])
    encoded = tokenizer.encode(TEXTS)
    ids, mask = pad_batch([e.ids for e in encoded], files.config.pad_id)
    _, pooled = session.run(None, {"input_ids": ids, "attention_mask": mask})
    return encoded, pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_matches_sentence_transformers(onnx_embeddings, reference_embeddings):
    _, ours = onnx_embeddings
    cosines = (ours * reference_embeddings).sum(axis=1)
    for text, cosine in zip(TEXTS, cosines):
        assert cosine >= 0.99999, f"{text[:40]!r}: cosine {cosine}"


def test_long_inputs_are_truncated_at_256_tokens(onnx_embeddings):
    encoded, _ = onnx_embeddings
    assert [len(e.ids) for e in encoded[-2:]] == [256, 256]
    assert all(e.truncated for e in encoded[-2:]) and not any(e.truncated for e in encoded[:-2])
    assert encoded[-1].ids[0] == 101 and encoded[-1].ids[-1] == 102  # [CLS] ... [SEP] kept


def test_reference_figures(onnx_embeddings):
    """Figures measured with sentence-transformers on these machines (../shared/design.md)."""
    _, ours = onnx_embeddings
    np.testing.assert_allclose(ours[0, :5], [0.00677752, 0.05905368, 0.04631271, 0.06658518, 0.05197431], atol=1e-6)
    assert float(ours[1] @ ours[2]) == pytest.approx(0.7728268, abs=1e-6)


def test_manifest_describes_the_embedding_model(minilm_dir):
    files = open_model_dir(minilm_dir)
    m = files.manifest
    assert m["task"] == "embedding" and m["config"]["pooling"] == "mean" and m["config"]["normalize"] is True
    assert m["config"]["max_input_tokens"] == 256
    outputs = {o["name"]: o["shape"] for o in m["graphs"]["encoder"]["outputs"]}
    assert outputs == {"last_hidden_state": ["batch", "sequence", 384], "embedding": ["batch", 384]}
    assert m["parity"]["encoder_max_abs_diff"] < 1e-4
