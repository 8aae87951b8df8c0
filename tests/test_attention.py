"""Multi-head attention and the decoder's cache, in PyTorch: the properties the exported graphs rely on."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from model.architecture.attention import KeysValues, MultiHeadAttention, attention
from model.architecture.decoder_cache import BufferCache, ConcatCache
from model.architecture.random_model import random_model
from modeldir.config import ModelConfig

shapes = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 6), st.integers(1, 12), st.integers(1, 9))


def random_source(batch, heads, length, d_head, generator, visible=None):
    keys = torch.randn(batch, heads, length, d_head, generator=generator)
    values = torch.randn(batch, heads, length, d_head, generator=generator)
    if visible is None:
        visible = torch.rand(batch, 1, length, generator=generator) > 0.3
        visible[..., 0] = True  # every query sees something
    return KeysValues(keys, values, visible)


@given(shape=shapes, seed=st.integers(0, 2**31))
def test_masked_positions_get_no_weight(shape, seed):
    """Whatever a masked key or value holds, the output is the same: its weight is exactly 0."""
    batch, heads, queries, length, d_head = shape
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, queries, d_head, generator=g)
    keys, values, visible = random_source(batch, heads, length, d_head, g)
    hidden = ~visible.unsqueeze(1).transpose(-1, -2).expand(batch, heads, length, 1)
    noisy_keys = torch.where(hidden, torch.randn(keys.shape, generator=g) * 100, keys)
    noisy_values = torch.where(hidden, torch.randn(values.shape, generator=g) * 100, values)
    clean = attention(query, [KeysValues(keys, values, visible)], 0.5)
    noisy = attention(query, [KeysValues(noisy_keys, noisy_values, visible)], 0.5)
    assert torch.equal(clean, noisy)


@given(shape=shapes, seed=st.integers(0, 2**31))
def test_weights_are_a_distribution(shape, seed):
    """With values all equal to c, the output is c: the weights over visible keys sum to 1."""
    batch, heads, queries, length, d_head = shape
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, queries, d_head, generator=g)
    keys, _, visible = random_source(batch, heads, length, d_head, g)
    out = attention(query, [KeysValues(keys, torch.full(keys.shape, 3.0), visible)], 0.7)
    torch.testing.assert_close(out, torch.full(out.shape, 3.0), rtol=0, atol=1e-5)


@given(shape=shapes, split=st.integers(0, 12), seed=st.integers(0, 2**31))
def test_two_sources_equal_their_concatenation(shape, split, seed):
    """A cached past and the step's new keys attend as one sequence, without being concatenated."""
    batch, heads, queries, length, d_head = shape
    split = min(split, length)
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, queries, d_head, generator=g)
    keys, values, visible = random_source(batch, heads, length, d_head, g)
    whole = attention(query, [KeysValues(keys, values, visible)], 0.3)
    parts = [
        KeysValues(keys[:, :, :split], values[:, :, :split], visible[..., :split]),
        KeysValues(keys[:, :, split:], values[:, :, split:], visible[..., split:]),
    ]
    torch.testing.assert_close(attention(query, parts, 0.3), whole, rtol=1e-5, atol=1e-5)


def test_heads_are_split_and_merged_by_reshape():
    attn = MultiHeadAttention(d_model=12, n_heads=3)
    x = torch.arange(2 * 5 * 12, dtype=torch.float32).view(2, 5, 12)
    heads = attn.split_heads(x)
    assert heads.shape == (2, 3, 5, 4)
    assert torch.equal(heads[1, 2, 3], x[1, 3, 8:12])  # head 2 holds columns 8..11
    assert torch.equal(attn.merge_heads(heads), x)


SMALL = ModelConfig(
    task="seq2seq",
    vocab_size=50,
    d_model=32,
    n_heads=4,
    d_ff=64,
    n_encoder_layers=2,
    n_decoder_layers=2,
    max_positions=64,
    norm_placement="pre",
)


@torch.no_grad()
def test_decoder_is_causal_and_the_cache_equals_recomputing():
    model = random_model(SMALL, seed=3)
    g = torch.Generator().manual_seed(0)
    source = torch.randint(4, 50, (2, 9), generator=g)
    source_mask = torch.ones_like(source)
    source_mask[1, 6:] = 0
    cross = model.project_cross(model.encode(source, source_mask))
    target = torch.randint(4, 50, (2, 7), generator=g)
    full = model.decoder(target, model.empty_cache(2), cross, source_mask)

    # Changing later tokens does not change earlier positions.
    changed = target.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 50
    prefix = model.decoder(changed, model.empty_cache(2), cross, source_mask)
    torch.testing.assert_close(prefix[:, :4], full[:, :4])
    assert not torch.allclose(prefix[:, 4:], full[:, 4:])

    # One position at a time through either cache gives the same hidden states.
    concat = model.empty_cache(2)
    c = SMALL
    buffers = [torch.zeros(2, c.n_heads, 12, c.d_head) for _ in range(2 * c.n_decoder_layers)]
    for t in range(target.shape[1]):
        hidden = model.decoder(target[:, t : t + 1], concat, cross, source_mask)
        torch.testing.assert_close(hidden[:, 0], full[:, t], rtol=1e-5, atol=1e-5)
        past = [(torch.cat([pk, nk], 2), torch.cat([pv, nv], 2)) for (pk, pv), (nk, nv) in zip(concat.past, concat.new)]
        concat = ConcatCache(past, torch.ones(2, t + 1, dtype=torch.long))

        cache = BufferCache(buffers[0::2], buffers[1::2], torch.full((2,), t, dtype=torch.int32))
        hidden = model.decoder(target[:, t : t + 1], cache, cross, source_mask)
        torch.testing.assert_close(hidden[:, 0], full[:, t], rtol=1e-5, atol=1e-5)
        buffers = [b for kv in cache.present for b in kv]
    # The buffers hold each position's K/V where it was written, and nothing past the last one.
    for (keys, _), (concat_keys, _) in zip(cache.present, concat.past):
        torch.testing.assert_close(keys[:, :, :7], concat_keys)
        assert not keys[:, :, 7:].any()


@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=5), seed=st.integers(0, 2**31))
@torch.no_grad()
def test_buffer_cache_rows_of_different_lengths_attend_to_their_own_positions(lengths, seed):
    """A batch of rows filled to different lengths equals each row decoded alone."""
    model = random_model(SMALL, seed=1)
    c = SMALL
    g = torch.Generator().manual_seed(seed)
    batch = len(lengths)
    source = torch.randint(4, 50, (batch, 6), generator=g)
    cross = model.project_cross(model.encode(source, torch.ones_like(source)))
    buffers = [torch.randn(batch, c.n_heads, 12, c.d_head, generator=g) for _ in range(2 * c.n_decoder_layers)]
    step = torch.randint(4, 50, (batch, 1), generator=g)
    together = BufferCache(buffers[0::2], buffers[1::2], torch.tensor(lengths, dtype=torch.int32))
    logits = model.decode(step, together, cross, torch.ones_like(source))
    for row, length in enumerate(lengths):
        past = [
            (k[row : row + 1, :, :length], v[row : row + 1, :, :length]) for k, v in zip(buffers[0::2], buffers[1::2])
        ]
        alone = ConcatCache(past, torch.ones(1, length, dtype=torch.long))
        crossed = [(k[row : row + 1], v[row : row + 1]) for k, v in cross]
        expected = model.decode(step[row : row + 1], alone, crossed, torch.ones_like(source[:1]))
        torch.testing.assert_close(logits[row : row + 1], expected, rtol=1e-5, atol=1e-5)
