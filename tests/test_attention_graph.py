"""The attention-map graph (onnx/attention.onnx): ONNX Runtime against PyTorch within 1e-5, rows that sum
to 1, exactly 0 at padded and future positions, and weights that are the model's own."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from model.architecture.attention import KeysValues, attention
from model.architecture.weights import load_model_dir
from model.export.attention_graph import AttentionGraph, check_weights, weight_masks
from modeldir.files import ATTENTION_FILE, attention_inputs, attention_outputs
from service.runner.sessions import SessionSettings, create_session

from .parity_configs import EMBEDDING_CONFIGS, SEQ2SEQ_CONFIGS

TOLERANCE = 1e-5
# The server's session settings (all graph optimisations): the exact zeros must survive them.
SETTINGS = SessionSettings(device="cpu", intra_op_threads=2)


class Graph:
    """A model directory's PyTorch model and attention-map session."""

    def __init__(self, model_dir):
        _, self.config, self.model = load_model_dir(model_dir)
        self.session = create_session(model_dir / ATTENTION_FILE, SETTINGS)

    def both(self, arrays):
        with torch.no_grad():
            expected = AttentionGraph(self.model)(*(torch.from_numpy(a) for a in arrays))
        expected = [e.numpy() for e in (expected if isinstance(expected, tuple) else (expected,))]
        actual = self.session.run(None, dict(zip(attention_inputs(self.config.task), arrays)))
        return actual, expected


_graphs: dict = {}


def graph(model_dir) -> Graph:
    if model_dir not in _graphs:
        _graphs[model_dir] = Graph(model_dir)
    return _graphs[model_dir]


def padded(rng: np.random.Generator, batch: int, length: int, vocab: int, first: int | None = None):
    """Right-padded ids and mask; the longest row is full, the others keep 1..length tokens."""
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[rng.integers(batch)] = length
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int64)
    ids = rng.integers(4, vocab, size=(batch, length)) * mask
    if first is not None:
        ids[:, 0] = first
    return ids.astype(np.int64), mask


@st.composite
def batches(draw, config, max_length: int = 24):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    batch = draw(st.integers(1, 4))
    arrays = list(padded(rng, batch, draw(st.integers(1, max_length)), config.vocab_size))
    if config.task == "seq2seq":
        arrays += padded(rng, batch, draw(st.integers(1, max_length)), config.vocab_size, first=config.bos_id)
    return arrays


def check(g: Graph, arrays) -> None:
    c = g.config
    actual, expected = g.both(arrays)
    names = attention_outputs(c.task)
    assert len(actual) == len(names)
    for (name, queries, keys, causal), a, e in zip(weight_masks(c.task, *arrays), actual, expected):
        layers = c.n_encoder_layers if name.startswith("encoder") else c.n_decoder_layers
        assert a.shape == (layers, queries.shape[0], c.n_heads, queries.shape[1], keys.shape[1]) == e.shape, name
        assert float(np.abs(a - e).max()) <= TOLERANCE, (name, float(np.abs(a - e).max()))
        row_error, masked = check_weights(a, queries, keys, causal)
        assert row_error <= TOLERANCE, (name, row_error)
        assert masked == 0.0, (name, masked)  # padded keys, future positions and padded queries: exactly 0
        assert check_weights(e, queries, keys, causal)[1] == 0.0  # PyTorch too
    if c.task == "seq2seq":
        real = arrays[3].astype(bool)
        assert actual[3].shape == arrays[2].shape
        assert np.array_equal(actual[3][real], expected[3][real])


@pytest.mark.parametrize("name", ["h1-d8-post", "h3-d48-pre", "h4-d96-post-4layers", *EMBEDDING_CONFIGS])
@given(data=st.data())
@settings(max_examples=10)
def test_random_configs_match_pytorch(exported, name, data):
    g = graph(exported[name].dir)
    check(g, data.draw(batches(g.config)))


def test_bundled_models_match_pytorch(minilm_dir, numbers_dir):
    rng = np.random.default_rng(1)
    minilm = graph(minilm_dir)
    check(minilm, list(padded(rng, 3, 40, minilm.config.vocab_size)))
    numbers = graph(numbers_dir)
    check(numbers, [*padded(rng, 3, 11, 24), *padded(rng, 3, 17, numbers.config.vocab_size, first=1)])


@torch.no_grad()
@pytest.mark.parametrize("name", ["emb-h2-d64-mean", "h3-d48-pre"])
def test_first_layer_weights_are_softmax_of_the_scaled_dot_products(exported, name):
    """Computed here by hand from the embeddings and W^Q, W^K of layer 0: the graph records the model's own."""
    model, config = exported[name].model, exported[name].config
    ids, mask = (torch.from_numpy(a) for a in padded(np.random.default_rng(0), 2, 9, config.vocab_size))
    targets = padded(np.random.default_rng(1), 2, 5, config.vocab_size, first=config.bos_id)
    args = (ids, mask) + (tuple(torch.from_numpy(a) for a in targets) if config.task == "seq2seq" else ())
    recorded = AttentionGraph(model)(*args)
    recorded = recorded[0] if isinstance(recorded, tuple) else recorded
    encoder = model.encoder
    x = encoder.embeddings(ids, torch.arange(ids.shape[1])[None])
    layer = encoder.layers[0]
    h = layer.branch_input(layer.self_attention_norm, x)
    attn = layer.self_attention
    q, k = attn.split_heads(attn.w_q(h)), attn.split_heads(attn.w_k(h))
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(config.d_head)
    scores = scores.masked_fill(~mask.bool()[:, None, None, :], -math.inf)
    expected = torch.softmax(scores, dim=-1) * mask[:, None, :, None]
    torch.testing.assert_close(recorded[0], expected, rtol=0, atol=1e-6)


@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 6), st.integers(1, 9), st.integers(1, 8)),
    seed=st.integers(0, 2**31),
)
def test_returning_the_weights_changes_nothing_else(shape, seed):
    batch, heads, queries, length, d_head = shape
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, queries, d_head, generator=g)
    keys, values = torch.randn(2, batch, heads, length, d_head, generator=g)
    visible = torch.rand(batch, queries, length, generator=g) > 0.4
    visible[..., 0] = True
    source = [KeysValues(keys, values, visible)]
    out, weights = attention(query, source, 0.5, return_weights=True)
    assert torch.equal(out, attention(query, source, 0.5))
    torch.testing.assert_close(out, weights @ values)
    assert weights.shape == (batch, heads, queries, length)
    assert torch.all(weights[~visible[:, None].expand_as(weights)] == 0)  # exactly, not nearly


def test_recording_is_off_after_the_graph_runs(exported):
    model = exported["h3-d48-pre"].model
    arrays = [torch.from_numpy(a) for a in padded(np.random.default_rng(0), 1, 4, 50)]
    AttentionGraph(model)(*arrays, *[torch.from_numpy(a) for a in padded(np.random.default_rng(0), 1, 3, 50, first=1)])
    modules = [m for m in model.modules() if hasattr(m, "recorded")]
    assert len(modules) == 3 + 2 * 3 and all(m.recorded is None for m in modules)


def test_the_manifest_lists_the_graph_with_its_parity(exported):
    for name in [*SEQ2SEQ_CONFIGS, *EMBEDDING_CONFIGS]:
        manifest = exported[name].files.manifest
        assert manifest["graphs"]["attention"]["file"] == ATTENTION_FILE and ATTENTION_FILE in manifest["sha256"]
        parity = manifest["parity"]
        assert parity["attention_max_abs_diff"] <= TOLERANCE and parity["attention_row_sum_max_error"] <= TOLERANCE
        assert parity["attention_masked_max"] == 0.0


@pytest.fixture(scope="module")
def marian(marian_checkpoints):
    """The random MarianMT checkpoint with an untied output, a logits bias and beam search by default."""
    return marian_checkpoints["marian-relu-h8"]


def test_marian_matches_pytorch_and_never_predicts_a_suppressed_token(marian):
    g = graph(marian.dir)
    c = g.config
    assert c.positions == "sinusoidal_split" and c.suppressed_ids == (c.pad_id,)
    rng = np.random.default_rng(3)
    check(g, [*padded(rng, 3, 12, c.vocab_size), *padded(rng, 3, 9, c.vocab_size, first=c.bos_id)])
    arrays = [*padded(rng, 2, 6, c.vocab_size), *padded(rng, 2, 40, c.vocab_size, first=c.bos_id)]
    predicted = g.both(arrays)[0][3]
    assert c.pad_id not in predicted[arrays[3].astype(bool)]


def test_marian_attention_over_grpc(marian):
    from service.grpc_api.client import Client
    from testing.server_thread import ServerThread

    server = ServerThread([marian.dir], attention_maps=True, max_new_tokens=12)
    try:
        text = "Deux cent mille trois cent quarante."
        with Client(server.target) as client:
            maps = client.attention(text)
            greedy = client.generate(text, num_beams=1)  # the model's default is beam search
            given_ = client.attention(text, target="Trois cent")
        assert maps.target_text == greedy.text and maps.target_tokens[0] == "<pad>"  # Marian starts with pad
        assert maps.source_tokens[-1] == "</s>" and maps.source_special[-1]
        assert maps.predicted_tokens[:-1] == maps.target_tokens[1:]  # greedy: each position wrote the next
        np.testing.assert_allclose(maps.weights["cross"].sum(-1), 1, atol=1e-5)
        pieces = marian.hf_tokenizer(text_target="Trois cent")["input_ids"][:-1]  # without its </s>
        assert given_.target_tokens[1:] == marian.hf_tokenizer.convert_ids_to_tokens(pieces)
    finally:
        server.close()
