"""An encoder-decoder read whole as a sequence classifier (transformers' BartForSequenceClassification:
bart-large-mnli): the input through the encoder, the same input shifted right through the decoder, and the
classification head on the decoder's state at the last token, an eos."""

from __future__ import annotations

import torch
from torch import Tensor

from model.architecture.decoder_cache import NoCache
from model.architecture.transformer import Decoder, EmbeddingModel
from modeldir.config import ModelConfig


class EncoderDecoderClassifier(EmbeddingModel):
    """A classifier (EmbeddingModel's head_dense and head_out) with a decoder beside the encoder, one token
    table for both; served as any classifier is: ids and mask in, a logit per label out."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.decoder = Decoder(config, self.encoder.embeddings.tokens)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """input_ids (B, S), right-padded, each row ending in eos; attention_mask (B, S) -> the decoder's
        last_hidden_state (B, S, d_model), logits (B, labels)."""
        memory = self.encoder(input_ids, attention_mask)
        cross = [layer.cross_attention.project_kv(memory) for layer in self.decoder.layers]
        # transformers' shift_tokens_right: the decoder start, then the input less its last position. A
        # padded row's pad positions follow its last token, and the causal mask keeps them out of its state.
        start = torch.full_like(input_ids[:, :1], self.config.bos_id)
        shifted = torch.cat([start, input_ids[:, :-1]], dim=1)
        hidden = self.decoder(shifted, NoCache(), cross, attention_mask)
        # The last eos of a row is its last token (the tokenizer ends every input with eos, cut or not).
        last = attention_mask.long().sum(dim=1) - 1  # (B)
        state = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]  # (B, d_model)
        return hidden, self.head_out(torch.tanh(self.head_dense(state)))
