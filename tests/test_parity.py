"""ONNX Runtime against PyTorch in float32: encoder outputs and decoder logits and K/V within 1e-4,
over the exported configs and hypothesis-drawn shapes, and over hypothesis-drawn configs."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model.architecture.random_model import random_model_dir
from model.export.graphs import DecoderGraph, EncoderGraph, slots_of
from model.export.model_dir import export_model_dir
from modeldir.config import ModelConfig
from modeldir.files import decoder_inputs, decoder_outputs, encoder_outputs

from .parity_configs import EMBEDDING_CONFIGS, SEQ2SEQ_CONFIGS, Exported

TOLERANCE = 1e-4


def lengths_with_padding(rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
    """Per-row real lengths in [length / 10, length]: up to 90% padding; the longest row is full."""
    lengths = rng.integers(max(1, int(np.ceil(length * 0.1))), length + 1, size=batch)
    lengths[rng.integers(batch)] = length
    return lengths


def right_padded_mask(lengths: np.ndarray, length: int) -> np.ndarray:
    return (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)


@st.composite
def encoder_batches(draw, vocab_size: int, max_length: int):
    batch = draw(st.integers(1, 16))
    length = draw(st.integers(1, max_length))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ids = rng.integers(0, vocab_size, size=(batch, length), dtype=np.int64)
    return ids, right_padded_mask(lengths_with_padding(rng, batch, length), length)


@st.composite
def decoder_steps(draw, config: ModelConfig, max_past: int = 300, max_source: int = 300, max_step: int = 16):
    """A step's inputs: ragged filled lengths in cache buffers with room to spare; the rows in groups that
    share their cross K/V, in any order. A step of several positions comes with a batch of one (as ONNX
    Runtime's GroupQueryAttention requires)."""
    c = config
    batch = draw(st.integers(1, 16))
    groups = draw(st.integers(1, batch))
    step = draw(st.integers(1, max_step)) if batch == 1 else 1
    past = draw(st.integers(0, max_past))
    source = draw(st.integers(1, max_source))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = lengths_with_padding(rng, batch, past) if past else np.zeros(batch, np.int64)
    room = past + step + draw(st.integers(0, 20))
    caches = [
        rng.standard_normal((rows, c.n_heads, length, c.d_head)).astype(np.float32)
        for rows, length in [(batch, room)] * (2 * c.n_decoder_layers) + [(groups, source)] * (2 * c.n_decoder_layers)
    ]
    group_of = rng.permutation(np.concatenate([np.arange(groups), rng.integers(0, groups, batch - groups)]))
    query_slots, row_slots = slots_of(torch.from_numpy(group_of), groups)
    logit_rows = rng.permutation(batch)[: draw(st.integers(0, batch))]  # any rows, any order, maybe none
    return [
        rng.integers(0, c.vocab_size, size=(batch, step), dtype=np.int64),
        lengths.astype(np.int32),
        lengths_with_padding(rng, groups, source).astype(np.int32),
        logit_rows.astype(np.int64),
        np.array([lengths.max() + step], np.int32),
        query_slots.numpy(),
        row_slots.numpy(),
        *caches,
    ]


def assert_close(names, actual, expected):
    assert len(actual) == len(expected) == len(names)
    for name, a, e in zip(names, actual, expected):
        e = e.numpy()
        assert a.shape == e.shape, name
        diff = float(np.abs(a - e).max()) if a.size else 0.0
        assert diff <= TOLERANCE, f"{name}: max abs diff {diff}"


def check_encoder(exported_model, ids, mask):
    c = exported_model.config
    with torch.no_grad():
        expected = EncoderGraph(exported_model.model)(torch.from_numpy(ids), torch.from_numpy(mask))
    actual = exported_model.encoder.run(None, {"input_ids": ids, "attention_mask": mask})
    assert_close(encoder_outputs(c), actual, expected)


def check_decoder(exported_model, values):
    """The logits of the asked rows, each row's argmax (a token whose logit is the largest, within the
    tolerance: near ties may go either way), and the present buffers at every filled position (beyond
    them a buffer's contents are unspecified unless it is bound as both past and present, as serving
    binds it)."""
    n = exported_model.config.n_decoder_layers
    with torch.no_grad():
        graph = DecoderGraph(exported_model.model)
        expected = list(graph(*(torch.from_numpy(v) for v in values)))
        every_row = torch.arange(values[0].shape[0])
        all_logits = graph(*(torch.from_numpy(v) for v in values[:3]), every_row, *map(torch.from_numpy, values[4:]))[1]
    actual = exported_model.decoder.run(None, dict(zip(decoder_inputs(n), values)))
    chosen = all_logits.numpy()[np.arange(len(actual[0])), actual[0]]
    assert actual[0].dtype == np.int64 and (chosen >= all_logits.numpy().max(-1) - TOLERANCE).all()
    filled = values[1][:, None, None] + values[0].shape[1]  # (B, 1, 1): each row's length after the step
    for i in range(2, len(actual)):
        positions = np.arange(actual[i].shape[2])[None, None, :] < filled  # (B, 1, L)
        actual[i] = np.where(positions[..., None], actual[i], 0)
        expected[i] = torch.where(torch.from_numpy(positions[..., None]), expected[i], 0)
    assert_close(decoder_outputs(n)[1:], actual[1:], expected[1:])


@pytest.mark.parametrize("name", [*SEQ2SEQ_CONFIGS, *EMBEDDING_CONFIGS])
@given(data=st.data())
@settings(max_examples=20)
def test_encoder_matches_pytorch(exported, name, data):
    model = exported[name]
    ids, mask = data.draw(encoder_batches(model.config.vocab_size, min(300, model.config.max_positions)))
    check_encoder(model, ids, mask)


@pytest.mark.parametrize("name", list(SEQ2SEQ_CONFIGS))
@given(data=st.data())
@settings(max_examples=20)
def test_decoder_step_matches_pytorch(exported, name, data):
    model = exported[name]
    check_decoder(model, data.draw(decoder_steps(model.config)))


@st.composite
def model_configs(draw):
    heads = draw(st.integers(1, 8))
    task = draw(st.sampled_from(["seq2seq", "embedding"]))
    return ModelConfig(
        task=task,
        vocab_size=draw(st.integers(8, 400)),
        # GroupQueryAttention (the decoder's cached self-attention) takes head sizes in multiples of 8.
        d_model=heads * (draw(st.sampled_from(range(8, 65, 8))) if task == "seq2seq" else draw(st.integers(8, 64))),
        n_heads=heads,
        d_ff=draw(st.integers(4, 256)),
        n_encoder_layers=draw(st.integers(1, 4)),
        n_decoder_layers=draw(st.integers(1, 4)) if task == "seq2seq" else 0,
        max_positions=64,
        max_input_tokens=64,
        positions=draw(st.sampled_from(["sinusoidal", "learned"])),
        norm_placement=draw(st.sampled_from(["pre", "post"])),
        activation=draw(st.sampled_from(["relu", "gelu", "gelu_tanh", "silu"])),
        embedding_norm=draw(st.booleans()),
        type_vocab_size=draw(st.sampled_from([0, 2])),
        scale_embeddings=draw(st.booleans()),
        share_embeddings=draw(st.booleans()),
        tie_output=draw(st.booleans()),
        output_bias=draw(st.booleans()),
        pooling=draw(st.sampled_from(["mean", "cls"])),
    )


@pytest.mark.slow  # exports models
@given(config=model_configs(), data=st.data())
@settings(max_examples=8)
def test_drawn_configs_export_with_parity(tmp_path_factory, config, data):
    """Each drawn config is exported, then checked on drawn shapes."""
    model_dir = random_model_dir(config, tmp_path_factory.mktemp("drawn"), "drawn")
    manifest = export_model_dir(model_dir, progress_stream=io.StringIO())
    parity = dict(manifest["parity"])
    assert parity.pop("embedding_min_cosine", 1.0) >= 1 - TOLERANCE, manifest["parity"]
    assert all(diff <= TOLERANCE for diff in parity.values()), manifest["parity"]
    drawn = Exported(model_dir)
    check_encoder(drawn, *data.draw(encoder_batches(config.vocab_size, 30)))
    if config.task == "seq2seq":
        check_decoder(drawn, data.draw(decoder_steps(config, max_past=30, max_source=30, max_step=4)))


def test_first_step_has_an_empty_past(exported):
    """Nothing filled yet (the first decode step) runs through the same graph."""
    model = exported["h3-d48-pre"]
    c = model.config
    rng = np.random.default_rng(0)
    values = [
        np.array([[c.bos_id], [c.bos_id]], dtype=np.int64),
        np.zeros(2, dtype=np.int32),
        np.array([5, 3], dtype=np.int32),
        np.array([1, 0], dtype=np.int64),
        np.array([1], dtype=np.int32),  # the longest row after the step
        np.arange(2),  # a group for each row
        np.arange(2),
        *[np.zeros((2, c.n_heads, 4, c.d_head), np.float32)] * (2 * c.n_decoder_layers),
        *[rng.standard_normal((2, c.n_heads, 5, c.d_head)).astype(np.float32) for _ in range(2 * c.n_decoder_layers)],
    ]
    check_decoder(model, values)
