"""The float16 graphs against PyTorch in float32, on ONNX Runtime's CPU provider (which runs float16
GroupQueryAttention and LayerNormalization natively and casts the other float16 nodes to float32), and
served through the device-buffer runner with a float16 cache. The bars are the issue's: MiniLM cosine
>= 0.9995 on the oracle texts, the numbers model 100% exact on 2,000 numbers each way, random seq2seq
models greedy-equal to float32 on >= 98% of 100 prompts, logits within the bound stated below."""

from __future__ import annotations

import io
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from model.architecture.random_model import random_model_dir
from model.architecture.weights import load_model_dir
from model.bundled.eval_numbers import evaluate
from model.export.model_dir import export_model_dir
from model.export.parity import greedy_logits_torch
from modeldir.files import open_model_dir
from modeldir.reference_decoder import greedy_decode_onnx
from modeldir.tokenizer import TextTokenizer, pad_batch
from service.grpc_api.client import Client
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .minilm_texts import TEXTS
from .parity_configs import SEQ2SEQ_CONFIGS

# Largest |logit difference| between float16 graphs and PyTorch float32 along greedy decodes of the random
# configs below: measured 0.0017-0.0042 (their logits' standard deviation is 0.6-1.1; the numbers model's
# export measures 0.021); the bound leaves room for other machines' rounding.
LOGITS_BOUND = 0.1


def sessions(model_dir, precision: str):
    files = open_model_dir(model_dir, precision=precision)
    make = lambda path: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # noqa: E731
    return files, make(files.encoder), make(files.decoder) if files.decoder else None


def test_minilm_fp16_matches_sentence_transformers(minilm_dir, reference_embeddings):
    files, encoder, _ = sessions(minilm_dir, "fp16")
    tokenizer = TextTokenizer(files.tokenizer, files.config.max_input_tokens)
    ids, mask = pad_batch([e.ids for e in tokenizer.encode(TEXTS)], files.config.pad_id)
    (pooled,) = encoder.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
    assert pooled.dtype == np.float32  # the float16 graph keeps its float outputs float32
    ours = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    cosines = (ours * reference_embeddings).sum(axis=1)
    assert cosines.min() >= 0.9995, dict(zip(TEXTS, cosines.round(6)))
    assert files.manifest["fp16"]["parity"]["embedding_min_cosine"] >= 0.9995


def test_numbers_fp16_is_exact_on_2000_numbers_each_way(numbers_dir):
    report = evaluate(numbers_dir, count=2000, precision="fp16")
    for direction, result in report.items():
        assert result["accuracy"] == 1.0, (direction, result["errors"][:5])


@pytest.mark.slow  # exports models
@pytest.mark.parametrize("name", ["h8-d512-pre", "h4-d96-post-4layers", "h3-d48-pre"])
def test_random_seq2seq_fp16_greedy_agrees_with_fp32(tmp_path, name):
    """100 prompts of 3-30 random tokens, 16 greedy steps each through both precisions' graphs: the same
    tokens on >= 98 of them, and the float16 logits within LOGITS_BOUND of PyTorch float32 along the way."""
    config = SEQ2SEQ_CONFIGS[name]
    model_dir = random_model_dir(config, tmp_path / name, name, seed=3)
    manifest = export_model_dir(model_dir, progress_stream=io.StringIO(), reduced=("fp16",))
    rng = np.random.default_rng(5)
    prompts = [rng.integers(3, config.vocab_size, size=rng.integers(3, 31)).tolist() for _ in range(100)]
    ids = np.full((100, 30), config.pad_id, np.int64)
    mask = np.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, : len(prompt)], mask[row, : len(prompt)] = prompt, 1
    tokens = {}
    for precision in ("fp32", "fp16"):
        _, encoder, decoder = sessions(model_dir, precision)
        tokens[precision], logits = greedy_decode_onnx(
            encoder, decoder, ids, mask, start_id=config.bos_id, max_steps=16, n_layers=config.n_decoder_layers
        )
    same = sum(a == b for a, b in zip(tokens["fp32"].tolist(), tokens["fp16"].tolist()))
    assert same >= 98, same
    _, _, torch_model = load_model_dir(model_dir)
    expected = greedy_logits_torch(
        torch_model, torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(tokens["fp16"])
    ).numpy()
    assert logits.dtype == np.float32 and np.abs(logits - expected).max() <= LOGITS_BOUND
    assert manifest["fp16"]["parity"]["decoder_logits_max_abs_diff"] <= LOGITS_BOUND
    # A tied output layer reads the token table in the float16 decoder (a GPU holds it once); float32 keeps
    # the exporter's transposed copy (the CPU packs the weight apart anyway).
    tables = {precision: vocabulary_tables(model_dir, precision, config.vocab_size) for precision in ("fp32", "fp16")}
    assert tables == {"fp32": 2, "fp16": 1 if config.tie_output else 2}, tables


def vocabulary_tables(model_dir, precision: str, vocab_size: int) -> int:
    """The decoder's initializers of a vocabulary's rows or columns: its token table, its output layer's."""
    decoder = onnx.load(str(open_model_dir(model_dir, precision=precision).decoder))
    return sum(len(t.dims) == 2 and vocab_size in t.dims for t in decoder.graph.initializer)


def test_fp16_graphs_serve_through_the_device_buffer_runner(minilm_dir, numbers_dir):
    """--precision fp16 on the CPU: a float16 cache moved by the float16 cache graphs, beams included."""
    server = ServerThread([minilm_dir, numbers_dir], precision="fp16")
    try:
        models = server.engine_core.registry.models
        assert models["numbers"].scheduler.cache.memory.geometry.precision == "fp16"
        assert models["numbers"].scheduler.cache.geometry.bytes_per_value == 2
        with Client(server.target) as client:
            assert client.generate("312405").text == "three hundred and twelve thousand, four hundred and five"
            beams = client.generate("nine hundred and ninety-nine", num_beams=3, num_return_sequences=2)
            assert beams.text == "999" and len(beams.hypotheses) == 2
            streamed = "".join(m.text for m in client.generate_stream("4711"))
            assert streamed == "four thousand, seven hundred and eleven"
            vectors = client.embed(
                ["She saw the man with the telescope.", "A woman used a telescope to look at a man."]
            )
            assert float(vectors.vectors[0] @ vectors.vectors[1]) == pytest.approx(0.7728268, abs=1e-3)
        listed = {m.name: m for m in server.stub().ListModels(pb.ListModelsRequest()).models}
        assert set(listed) == {"minilm", "numbers"}
    finally:
        server.close()


@pytest.mark.slow
def test_a_precision_that_was_not_exported_is_refused_with_the_command(tmp_path):
    model_dir = random_model_dir(SEQ2SEQ_CONFIGS["h1-d8-post"], tmp_path / "m", "m")
    export_model_dir(model_dir, progress_stream=io.StringIO())
    manifest = json.loads((model_dir / "manifest.json").read_text())
    assert "fp16" not in manifest
    with pytest.raises(
        Exception, match=r"no fp16 graphs \(exported: fp32\); export them with attnserve export .* --precision fp16"
    ):
        open_model_dir(model_dir, precision="fp16")


def test_float16_graphs_are_measured_against_pytorch_in_float16(minilm_dir, numbers_dir):
    """Beside float32 PyTorch, the manifest holds the float16 graphs against PyTorch run in float16: the
    figures a GPU's float16 answers are read against."""
    minilm = json.loads((minilm_dir / "manifest.json").read_text())["fp16"]["parity_against_float16"]
    numbers = json.loads((numbers_dir / "manifest.json").read_text())["fp16"]["parity_against_float16"]
    assert 0 < minilm["encoder_max_abs_diff"] < 0.05 and set(minilm) == {"encoder_max_abs_diff"}
    assert 0 < numbers["encoder_max_abs_diff"] < 0.05 and 0 < numbers["decoder_logits_max_abs_diff"] < 0.1
    assert numbers["first_divergent_step"] is None and numbers["steps"] == 8
