"""Reference greedy decoding through the exported graphs, one batch in lockstep.

A plain loop for checks (export parity, accuracy evaluation): every row advances one position per step,
and the present buffers a step returns are fed to the next. Serving uses the scheduler instead, which
binds the buffers so that steps write into them in place.
"""

from __future__ import annotations

import numpy as np

from .files import decoder_inputs


def greedy_decode_onnx(
    encoder,
    decoder,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    start_id: int,
    max_steps: int,
    n_layers: int,
    eos_id: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """-> tokens (B, 1 + steps) beginning with start_id, and each step's logits (B, steps, vocab).
    Stops early once every sequence has produced eos_id (if given); later tokens of a finished row are
    whatever argmax gives, for the caller to cut."""
    outputs = encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
    cross = outputs[1:]  # cross_key.0, cross_value.0, ...
    batch, heads, _, d_head = cross[0].shape
    buffers = [np.zeros((batch, heads, max_steps, d_head), dtype=np.float32) for _ in range(2 * n_layers)]
    tokens = np.full((batch, 1), start_id, dtype=np.int64)
    finished = np.zeros(batch, dtype=bool)
    step_logits = []
    names = decoder_inputs(n_layers)
    for step in range(max_steps):
        lengths = np.full(batch, step, dtype=np.int32)
        values = [tokens[:, -1:], lengths, attention_mask, *buffers, *cross]
        logits, *buffers = decoder.run(None, dict(zip(names, values)))
        step_logits.append(logits)
        next_tokens = logits.argmax(axis=-1)
        tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
        if eos_id is not None:
            finished |= next_tokens == eos_id
            if finished.all():
                break
    return tokens, np.stack(step_logits, axis=1)
