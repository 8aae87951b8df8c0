"""The exported graphs measured against the PyTorch model they came from: the encoder's outputs, an embedding
model's pooled vectors, and the decoder's logits at every step of a greedy decode through the KV cache
against PyTorch recomputing the prefix; for float16 graphs also against PyTorch run in float16, with the
first step where the two choose another token, so that figures from a GPU can be read against the CPU's."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch

from model.architecture.transformer import EmbeddingModel, Seq2SeqModel
from model.export.graphs import EncoderGraph, example_encoder_inputs
from modeldir.external_data import data_file_name
from modeldir.files import encoder_feeds, pooled_output


def cpu_session(path: Path):
    """A CPU session to measure with: weights not pre-packed, no memory arena. Each would hold another copy
    of the weights beside the PyTorch model (NLLB-200 1.3B's float32 graphs and model passed 24 GiB); the
    sums are the same (the kernels pack the weights as they run instead). A graph whose weights are in a
    data file runs as written, unoptimised: the CPU runs float16 matrix products in float32, and its
    optimiser would fold every weight's cast into a float32 copy of the graph (NLLB-200 1.3B's float16
    graphs again passed 24 GiB)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.enable_cpu_mem_arena = False
    if (Path(path).parent / data_file_name(Path(path).name)).exists():
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _feeds(session, inputs, mask) -> dict:
    return encoder_feeds([i.name for i in session.get_inputs()], inputs.numpy(), mask.numpy())


def measure_encoder_parity(model, path: Path) -> float:
    """Max abs difference, ONNX Runtime vs PyTorch, over all encoder outputs of a padded batch."""
    session = cpu_session(path)
    worst = 0.0
    shapes = [(1, 1), (3, 17), (4, min(64, model.config.max_positions))]
    if model.config.encoder_input == "log_mel":
        shapes.append((1, model.config.max_source_positions))  # a whole window, as served
    for seed, (batch, length) in enumerate(shapes):
        ids, mask = example_encoder_inputs(model.config, batch, length, seed)
        with torch.no_grad():
            expected = EncoderGraph(model)(ids, mask)
        actual = session.run(None, _feeds(session, ids, mask))
        worst = max(worst, *(float(np.abs(a - e.numpy()).max(initial=0.0)) for a, e in zip(actual, expected)))
    return worst


def measure_decoder_parity(model: Seq2SeqModel, encoder_path: Path, decoder_path: Path, steps: int = 8) -> float:
    """Max abs difference of logits at every step of a greedy decode: ONNX Runtime with the KV cache
    against PyTorch recomputing the whole prefix without one."""
    encoder, decoder = cpu_session(encoder_path), cpu_session(decoder_path)
    ids, mask = example_encoder_inputs(model.config, batch=3, length=11)
    tokens, onnx_logits = greedy_on_graphs(model, encoder, decoder, ids, mask, steps)
    torch_logits = greedy_logits_torch(model, ids, mask, torch.from_numpy(tokens))
    return float(np.abs(onnx_logits - torch_logits.numpy()).max())


def greedy_on_graphs(model: Seq2SeqModel, encoder, decoder, ids, mask, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """`steps` greedy steps of the exported graphs (ONNX Runtime sessions) from the model's start token: ->
    tokens (B, 1 + steps), logits (B, steps, vocab)."""
    from modeldir.reference_decoder import greedy_decode_onnx

    c = model.config
    return greedy_decode_onnx(
        encoder, decoder, ids.numpy(), mask.numpy(), start_id=c.bos_id, max_steps=steps, n_layers=c.n_decoder_layers
    )


@torch.no_grad()
def greedy_logits_torch(model: Seq2SeqModel, ids, mask, tokens) -> torch.Tensor:
    """Logits (B, steps, vocab) that PyTorch gives, without a cache, at each step of the given decode.
    tokens (B, steps + 1) starts with the decoder start token."""
    cross = model.project_cross(model.encode(ids, mask))
    steps = [
        model.decode(tokens[:, : t + 1], model.empty_cache(ids.shape[0]), cross, mask)
        for t in range(tokens.shape[1] - 1)
    ]
    return torch.stack(steps, dim=1)


def pooled_pairs(model: EmbeddingModel, path: Path):
    """(ONNX Runtime's, PyTorch's) one-row-per-input output (the pooled vector, or a classifier head's
    logits) on two example batches, float32."""
    session = cpu_session(path)
    output = pooled_output(model.config.head)
    for seed, (batch, length) in enumerate([(3, 17), (4, min(64, model.config.max_positions))]):
        ids, mask = example_encoder_inputs(model.config, batch, length, seed)
        with torch.no_grad():
            expected = model(ids, mask)[1].numpy()
        (actual,) = session.run([output], _feeds(session, ids, mask))
        yield actual, expected


def measure_embedding_cosine(model: EmbeddingModel, path: Path) -> float:
    """The least cosine similarity between ONNX Runtime's pooled embeddings and PyTorch's (float32)."""
    worst = 1.0
    for actual, expected in pooled_pairs(model, path):
        cosine = (actual * expected).sum(1) / np.linalg.norm(actual, axis=1) / np.linalg.norm(expected, axis=1)
        worst = min(worst, float(cosine.min()))
    return worst


def measure_logits(model: EmbeddingModel, path: Path) -> float:
    """The largest difference between ONNX Runtime's classifier logits and PyTorch's (float32)."""
    return max(float(np.abs(actual - expected).max()) for actual, expected in pooled_pairs(model, path))


def measure_parity(model, model_dir: Path, files: dict[str, str]) -> dict:
    """The serving graphs of one precision against PyTorch in float32."""
    parity = {"encoder_max_abs_diff": measure_encoder_parity(model, model_dir / files["encoder"])}
    if model.config.head == "classifier":
        parity["logits_max_abs_diff"] = measure_logits(model, model_dir / files["encoder"])
    elif model.config.task == "embedding":
        parity["embedding_min_cosine"] = measure_embedding_cosine(model, model_dir / files["encoder"])
    else:
        parity["decoder_logits_max_abs_diff"] = measure_decoder_parity(
            model, model_dir / files["encoder"], model_dir / files["decoder"]
        )
    return parity


@torch.no_grad()
def measure_against_half(model, model_dir: Path, files: dict[str, str], steps: int = 8) -> dict:
    """The float16 graphs against PyTorch run in float16 (both on the CPU here): the encoder outputs' largest
    difference and, for seq2seq models, a greedy decode of `steps` steps, PyTorch fed the graphs' tokens:
    the largest logit difference, and the first step at which their argmax differs in some row (None:
    none). ONNX Runtime's CPU kernels compute much of a float16 graph in float32, so these figures bound
    what CUDA, which stays in float16, may show against the CPU's."""
    half = copy.deepcopy(model).half()
    ids, mask = example_encoder_inputs(model.config, batch=3, length=11)
    encoder = cpu_session(model_dir / files["encoder"])
    actual = encoder.run(None, _feeds(encoder, ids, mask))
    half_inputs = ids.half() if ids.is_floating_point() else ids  # log-mel frames, in the model's precision
    expected = EncoderGraph(half)(half_inputs, mask)
    figures = {
        "encoder_max_abs_diff": max(
            float(np.abs(a.astype(np.float32) - e.float().numpy()).max()) for a, e in zip(actual, expected)
        )
    }
    if model.config.task == "seq2seq":
        decoder = cpu_session(model_dir / files["decoder"])
        tokens, graph_logits = greedy_on_graphs(model, encoder, decoder, ids, mask, steps)
        torch_logits = greedy_logits_torch(half, half_inputs, mask, torch.from_numpy(tokens)).float().numpy()
        differs = (graph_logits.argmax(-1) != torch_logits.argmax(-1)).any(axis=0)  # (steps,)
        figures["decoder_logits_max_abs_diff"] = float(np.abs(graph_logits - torch_logits).max())
        figures["first_divergent_step"] = int(differs.argmax()) if differs.any() else None
        figures["steps"] = steps
    return figures
