"""Reference greedy decoding through the exported graphs, one batch in lockstep.

A plain loop for checks (export parity, accuracy evaluation): every row advances one position per step,
the present buffers a step returns are fed to the next, and every row's logits come back. Serving uses
the scheduler instead, which keeps its buffers on the device and binds them so that steps write in place.
"""

from __future__ import annotations

import numpy as np

from .files import decoder_inputs, encoder_feeds


def greedy_decode_onnx(
    encoder,
    decoder,
    inputs: np.ndarray,
    attention_mask: np.ndarray,
    *,
    start_id: int,
    max_steps: int,
    n_layers: int,
    eos_id: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """inputs, attention_mask: the encoder's batch as the PyTorch model takes it (token ids, or log-mel
    frames with a mask of every position). -> tokens (B, 1 + steps) beginning with start_id (each step's next_token: the argmax, suppressed
    tokens left out), and each step's logits (B, steps, vocab) float32. Stops early once every sequence
    has produced eos_id (if given); later tokens of a finished row are whatever comes, for the caller to
    cut. Works with the graphs of any precision: the buffers take the encoder's output type."""
    outputs = encoder.run(None, encoder_feeds([i.name for i in encoder.get_inputs()], inputs, attention_mask))
    cross = outputs[1:]  # cross_key.0, cross_value.0, ...
    batch, heads, _, d_head = cross[0].shape
    buffers = [np.zeros((batch, heads, max_steps, d_head), dtype=cross[0].dtype) for _ in range(2 * n_layers)]
    source_lengths = attention_mask.sum(axis=1).astype(np.int32)  # right-padded sources
    every_row = np.arange(batch, dtype=np.int64)
    tokens = np.full((batch, 1), start_id, dtype=np.int64)
    finished = np.zeros(batch, dtype=bool)
    step_logits = []
    names = decoder_inputs(n_layers)
    for step in range(max_steps):
        lengths = np.full(batch, step, dtype=np.int32)
        total = np.array([step + 1], np.int32)
        # A group of its own for every row: its cross K/V is its source's.
        values = [tokens[:, -1:], lengths, source_lengths, every_row, total, every_row, every_row, *buffers, *cross]
        next_tokens, logits, *buffers = decoder.run(None, dict(zip(names, values)))
        step_logits.append(logits)
        tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
        if eos_id is not None:
            finished |= next_tokens == eos_id
            if finished.all():
                break
    return tokens, np.stack(step_logits, axis=1)
