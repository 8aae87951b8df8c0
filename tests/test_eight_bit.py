"""The int8 graphs against the float32 ones, on real text: 2,000 English sentences from the docstrings of
Python's standard library (model/export/stdlib_sentences.py). The bars are the issue's: MiniLM mean cosine
>= 0.995 and minimum >= 0.98, each sentence's 10 nearest neighbours the same on average >= 0.9; the
numbers model >= 99.9% exact on 2,000 numbers each way; random Marian checkpoints greedy-equal to float32
on the share measured and stated below; and the int8 graphs served."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from model.bundled.eval_numbers import evaluate
from model.export.model_dir import export_model_dir
from model.export.stdlib_sentences import stdlib_sentences
from model.families.marian.importer import import_marian
from model.families.marian.random_checkpoint import MarianShape, random_marian_checkpoint
from modeldir.files import GRAPH_SETS, int8_dot_products_saturate, open_model_dir
from modeldir.reference_decoder import greedy_decode_onnx
from modeldir.tokenizer import load_tokenizer, pad_batch
from service.grpc_api.client import Client
from testing.server_thread import ServerThread

# Random Marian checkpoints (two of tests/test_marian.py's shapes): greedy outputs of 24 tokens on 100
# sentences, int8 against float32, through the int8 graphs this CPU serves. Measured: 92 and 96 of 100 with
# full-range weights on an AVX-512 VNNI machine; 85 and 98 with 7-bit weights on an AVX2 one without VNNI,
# where full-range weights saturate (33 and 72). Random models are fragile (their logits lie close
# together, so any rounding tips some), so the bar leaves room; it still fails the saturating kind.
MARIAN_BAR = 80


def session(path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def embeddings(model_dir, precision: str, texts: list[str], graph_set: str | None = None) -> np.ndarray:
    files = open_model_dir(model_dir, precision=precision, graph_set=graph_set)
    tokenizer = load_tokenizer("tokenizers", files.tokenizer, files.config.max_input_tokens)
    encoder = session(files.encoder)
    encoded = tokenizer.encode(texts)
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i].ids))  # batches of similar lengths
    out = np.zeros((len(texts), files.config.d_model), np.float32)
    for start in range(0, len(order), 64):
        rows = order[start : start + 64]
        ids, mask = pad_batch([encoded[i].ids for i in rows], files.config.pad_id)
        out[rows] = encoder.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def nearest(vectors: np.ndarray, k: int = 10) -> np.ndarray:
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argsort(-similarity, axis=1)[:, :k]


def test_minilm_int8_passes_the_quality_bars_on_2000_real_sentences(minilm_dir):
    texts = stdlib_sentences(2000)
    reference, ours = embeddings(minilm_dir, "fp32", texts), embeddings(minilm_dir, "int8", texts)
    cosines = (reference * ours).sum(axis=1)
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(nearest(reference), nearest(ours))])
    assert cosines.mean() >= 0.995 and cosines.min() >= 0.98 and overlap >= 0.9, (
        cosines.mean(),
        cosines.min(),
        overlap,
    )


def test_numbers_int8_is_exact_on_2000_numbers_each_way(numbers_dir):
    report = evaluate(numbers_dir, count=2000, precision="int8")
    for direction, result in report.items():
        assert result["accuracy"] >= 0.999, (direction, result["errors"][:5])


SHAPES = {
    "swish-h4": MarianShape(d_model=32, heads=4, encoder_layers=2, decoder_layers=2, activation="swish"),
    "relu-h8": MarianShape(d_model=64, heads=8, encoder_layers=3, decoder_layers=2, d_ff=128, activation="relu"),
}


@pytest.mark.slow  # exports models
@pytest.mark.parametrize("shape", list(SHAPES))
def test_random_marian_int8_greedy_agrees_with_fp32(tmp_path, shape):
    source = random_marian_checkpoint(tmp_path / "hf", SHAPES[shape], seed=4)
    ours = import_marian(source, tmp_path / shape, shape)
    export_model_dir(ours, progress_stream=io.StringIO(), reduced=("int8",))
    files = open_model_dir(ours)
    c = files.config
    tokenizer = load_tokenizer(c.tokenizer, files.tokenizer, c.max_input_tokens)
    sources = stdlib_sentences(100)
    ids, mask = pad_batch([e.ids for e in tokenizer.encode(sources)], c.pad_id)
    outputs = {}
    for precision in ("fp32", "int8"):
        files = open_model_dir(ours, precision=precision)
        outputs[precision], _ = greedy_decode_onnx(
            session(files.encoder),
            session(files.decoder),
            ids,
            mask,
            start_id=c.bos_id,
            max_steps=24,
            n_layers=c.n_decoder_layers,
        )
    same = sum(a == b for a, b in zip(outputs["fp32"].tolist(), outputs["int8"].tolist()))
    assert same >= MARIAN_BAR, same


def test_int8_comes_as_full_range_and_7_bit_weights_and_each_cpu_takes_its_own(numbers_dir):
    """Both graph sets are exported, their weights as stated; the rule picks 7 bits for x86 without VNNI."""
    widest = {}
    for graph_set in GRAPH_SETS["int8"]:
        decoder = onnx.load(str(open_model_dir(numbers_dir, precision="int8", graph_set=graph_set).decoder))
        weights = [numpy_helper.to_array(t) for t in decoder.graph.initializer if t.data_type == onnx.TensorProto.INT8]
        assert len(weights) >= 12  # every weight product of the decoder's 3 layers and its output layer
        widest[graph_set] = max(int(np.abs(w.astype(np.int32)).max()) for w in weights)
    assert widest == {"int8": 127, "int8_reduced_range": 64}
    assert int8_dot_products_saturate("x86_64", {"avx2", "fma"})
    assert not int8_dot_products_saturate("x86_64", {"avx2", "avx512f", "avx512_vnni"})
    assert not int8_dot_products_saturate("x86_64", {"avx2", "avx_vnni"})
    assert not int8_dot_products_saturate("aarch64", {"asimd"})
    expected = "int8_reduced_range" if int8_dot_products_saturate() else "int8"
    assert open_model_dir(numbers_dir, precision="int8").graph_set == expected


def test_int8_graphs_serve(minilm_dir, numbers_dir):
    server = ServerThread([minilm_dir, numbers_dir], precision="int8")
    try:
        with Client(server.target) as client:
            assert client.generate("312405").text == "three hundred and twelve thousand, four hundred and five"
            assert client.generate("nine hundred and ninety-nine", num_beams=3).text == "999"
            vectors = client.embed(
                ["She saw the man with the telescope.", "A woman used a telescope to look at a man."]
            )
            assert float(vectors.vectors[0] @ vectors.vectors[1]) == pytest.approx(0.7728268, abs=0.02)
        cache = server.engine_core.registry.models["numbers"].scheduler.cache
        assert cache.memory.dtype == np.float32 and cache.geometry.bytes_per_value == 4  # a float32 cache
    finally:
        server.close()
