"""Greedy decoding through ONNX Runtime with the KV cache equals PyTorch without a cache, token for token."""

from __future__ import annotations

import numpy as np
import torch

from modeldir.reference_decoder import greedy_decode_onnx
from modeldir.tokenizer import pad_batch

STEPS = 24


@torch.no_grad()
def logits_without_cache(model, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """The decoder over the whole of `tokens` at once, no cache at all (teacher forcing, the causal mask):
    -> each position's logits (len(tokens), vocab). Greedy decoding without a cache gives `tokens` exactly
    when each position's argmax is the next token, so one pass checks every step's recomputation."""
    ids = torch.tensor([prompt])
    return model(ids, torch.ones_like(ids), torch.tensor([tokens]))[0].numpy()


def test_cached_onnx_greedy_equals_uncached_pytorch_for_50_prompts(exported):
    # Of the exported random models, this one's output depends most on the prompt.
    model = exported["h8-d512-pre"]
    c = model.config
    rng = np.random.default_rng(1234)
    prompts = [rng.integers(4, c.vocab_size, size=rng.integers(1, 41)).tolist() for _ in range(50)]

    # All 50 at once through ONNX Runtime: padded sources, one cache per sequence.
    ids, mask = pad_batch(prompts, c.pad_id)
    onnx_tokens, onnx_logits = greedy_decode_onnx(
        model.encoder, model.decoder, ids, mask, start_id=c.bos_id, max_steps=STEPS, n_layers=c.n_decoder_layers
    )

    for row, prompt in enumerate(prompts):
        tokens = onnx_tokens[row].tolist()
        logits = logits_without_cache(model.model, prompt, tokens[:-1])  # each prompt alone, unpadded
        assert tokens[0] == c.bos_id and logits.argmax(-1).tolist() == tokens[1:], f"prompt {row}"
        assert np.abs(onnx_logits[row] - logits).max() <= 1e-4, f"prompt {row}"
    # The outputs depend on the prompts: the comparison is not between constant sequences.
    assert len({tuple(t) for t in onnx_tokens.tolist()}) >= 10
