"""The encoder and decoder graphs of a seq2seq model: sources in, cross-attention K/V out; one decoder
step over the cache's buffers, logits out."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from modeldir.files import cache_names

from .sessions import provider_of


class Seq2SeqRunner:
    """Keeps nothing between calls: the cache's buffers come in as arguments, and a step writes its keys
    and values into them in place."""

    def __init__(self, encoder: ort.InferenceSession, decoder: ort.InferenceSession, n_layers: int):
        self.encoder, self.decoder, self.n_layers = encoder, decoder, n_layers
        self.provider = provider_of(decoder)
        self.past_names = cache_names("past", n_layers)
        self.cross_names = cache_names("cross", n_layers)

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        """(B, S) twice -> each layer's cross-attention keys and values, (B, H, S, Dh), in layer order."""
        outputs = self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        return outputs[1:]

    def step(
        self,
        input_ids: np.ndarray,
        past_lengths: np.ndarray,
        encoder_attention_mask: np.ndarray,
        self_buffers: list[np.ndarray],
        cross_buffers: list[np.ndarray],
        run_options: ort.RunOptions | None = None,
    ) -> np.ndarray:
        """One decoder step for every row: -> logits (B, vocab). Each self-attention buffer (B, H, L, Dh),
        a contiguous array, is bound as both the past input and the present output of its layer, so the
        step's keys and values land in it and nothing is copied."""
        binding = self.decoder.io_binding()
        binding.bind_cpu_input("input_ids", input_ids)
        binding.bind_cpu_input("past_lengths", past_lengths)
        binding.bind_cpu_input("encoder_attention_mask", encoder_attention_mask)
        for name, buffer in zip(self.past_names, self_buffers):
            value = ort.OrtValue.ortvalue_from_numpy(buffer)  # wraps the array's memory
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(name.replace("past_", "present_"), value)
        for name, buffer in zip(self.cross_names, cross_buffers):
            binding.bind_cpu_input(name, buffer)
        binding.bind_output("logits")
        self.decoder.run_with_iobinding(binding, run_options)
        return binding.get_outputs()[-1].numpy()  # the logits only (bound last): the buffers stay put
