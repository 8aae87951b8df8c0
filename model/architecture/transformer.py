"""The Transformer of "Attention Is All You Need": embeddings, encoder and decoder stacks, and the
two models built from them (an embedding model and an encoder-decoder)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from model.architecture.attention import CrossGroups, CrossSlots, KeysValues, MultiHeadAttention
from model.architecture.decoder_cache import ConcatCache
from model.architecture.positions import fairseq_sinusoid_table, position_table
from model.architecture.relative_positions import RelativePositionBias
from model.architecture.sublayers import ACTIVATIONS, feed_forward, norm
from modeldir.config import ModelConfig


class Embeddings(nn.Module):
    """Token embedding (optionally x sqrt(d_model)) + position encoding (+ token type 0), then an optional
    LayerNorm. With relative positions (T5) no position is added here."""

    def __init__(self, config: ModelConfig, tokens: nn.Embedding):
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
        self.offset = config.position_offset
        self.absolute = config.positions != "relative"
        if config.positions == "learned":
            self.positions = nn.Embedding(config.max_positions + self.offset, config.d_model)
        else:
            self.positions = None
        if self.absolute and self.positions is None:
            # A fixed table, rebuilt from the config: not a weight, so not saved.
            self.register_buffer("sinusoids", position_table(config), persistent=False)
        self.token_types = nn.Embedding(config.type_vocab_size, config.d_model) if config.type_vocab_size else None
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.embedding_norm else None
        self.pair_segments, self.separator = config.pair_segments, config.eos_id

    def forward(self, input_ids: Tensor, positions: Tensor) -> Tensor:
        """input_ids (B, T), positions (B or 1, T) -> (B, T, d_model)"""
        x = self.tokens(input_ids) * self.scale
        if self.offset:
            positions = positions + self.offset
        if self.absolute:
            x = x + (self.sinusoids[positions] if self.positions is None else self.positions(positions))
        if self.pair_segments:  # a pair: type 1 from the token after the first separator on
            separators = (input_ids == self.separator).long()
            types = (separators.cumsum(dim=1) - separators).clamp(max=1)  # (B, T)
            x = x + self.token_types(types)
        elif self.token_types is not None:
            x = x + self.token_types.weight[0]  # every input is a single segment
        return self.norm(x) if self.norm is not None else x


class AudioEmbeddings(nn.Module):
    """Whisper's stem: log-mel frames through two 1-D convolutions of width 3 (the second of stride 2, which
    halves the frames), each followed by GELU, then the fixed sinusoidal positions."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.conv1 = nn.Conv1d(config.n_mels, config.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(config.d_model, config.d_model, kernel_size=3, stride=2, padding=1)
        table = fairseq_sinusoid_table(config.max_source_positions, config.d_model, padding_idx=None)
        self.register_buffer("sinusoids", table, persistent=False)  # rebuilt from the config: not a weight

    def forward(self, features: Tensor) -> Tensor:
        """features (B, n_mels, frames) -> (B, frames / 2, d_model)"""
        x = nn.functional.gelu(self.conv1(features))
        x = nn.functional.gelu(self.conv2(x)).transpose(1, 2)
        return x + self.sinusoids[: x.shape[1]]


class Block(nn.Module):
    """Residual connections around sublayers: LayerNorm(x + Sublayer(x)) in the paper (post-norm),
    or x + Sublayer(LayerNorm(x)) (pre-norm)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"

    def branch_input(self, norm: nn.Module, x: Tensor) -> Tensor:
        return norm(x) if self.pre_norm else x

    def residual(self, norm: nn.Module, x: Tensor, branch: Tensor) -> Tensor:
        return x + branch if self.pre_norm else norm(x + branch)


def _attention(config: ModelConfig) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model, config.n_heads, config.d_kv, bias=config.linear_bias, scaled=config.scale_attention
    )


class EncoderLayer(Block):
    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.self_attention = _attention(config)
        self.self_attention_norm = norm(config)
        self.feed_forward = feed_forward(config)
        self.feed_forward_norm = norm(config)

    def forward(self, x: Tensor, mask: Tensor, bias: Tensor | None = None) -> Tensor:
        """x (B, S, d_model); mask (B, 1, S), True at real tokens; bias (1, H, S, S): relative positions'."""
        h = self.branch_input(self.self_attention_norm, x)
        keys, values = self.self_attention.project_kv(h)
        attended = self.self_attention(h, [KeysValues(keys, values, mask)], bias)
        x = self.residual(self.self_attention_norm, x, attended)
        h = self.branch_input(self.feed_forward_norm, x)
        return self.residual(self.feed_forward_norm, x, self.feed_forward(h))


class DecoderLayer(Block):
    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.self_attention = _attention(config)
        self.self_attention_norm = norm(config)
        self.cross_attention = _attention(config)
        self.cross_attention_norm = norm(config)
        self.feed_forward = feed_forward(config)
        self.feed_forward_norm = norm(config)

    def forward(self, x: Tensor, cache, index: int, cross: KeysValues | CrossGroups, bias: Tensor | None = None):
        """x (B, T, d_model): the step's positions. cache: where this layer (number `index`) finds the
        earlier positions' K/V and leaves the step's (decoder_cache.py). cross: the encoder output's K/V,
        per row or per group of rows (attention.py). bias: relative positions', over the cache's keys."""
        h = self.branch_input(self.self_attention_norm, x)
        x = self.residual(self.self_attention_norm, x, cache.attend(index, self.self_attention, h, bias))
        h = self.branch_input(self.cross_attention_norm, x)
        if isinstance(cross, CrossGroups):
            attended = self.cross_attention.grouped(h, cross)
        else:
            attended = self.cross_attention(h, [cross])
        x = self.residual(self.cross_attention_norm, x, attended)
        h = self.branch_input(self.feed_forward_norm, x)
        return self.residual(self.feed_forward_norm, x, self.feed_forward(h))


def _final_norm(config: ModelConfig) -> nn.Module:
    return norm(config) if config.final_norm else nn.Identity()


def _relative(config: ModelConfig, layers: int, bidirectional: bool) -> RelativePositionBias | None:
    return RelativePositionBias(config, layers, bidirectional) if config.positions == "relative" else None


class Encoder(nn.Module):
    def __init__(self, config: ModelConfig, tokens: nn.Embedding | None):
        super().__init__()
        self.audio = config.encoder_input == "log_mel"
        self.embeddings = AudioEmbeddings(config) if self.audio else Embeddings(config, tokens)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.final_norm = _final_norm(config)
        self.relative = _relative(config, config.n_encoder_layers, bidirectional=True)

    def forward(self, inputs: Tensor, attention_mask: Tensor | None) -> Tensor:
        """inputs: token ids (B, S), right-padded, or log-mel features (B, n_mels, 2S); attention_mask (B, S)
        (None: every position, as an audio window is heard whole) -> last_hidden_state (B, S, d_model)"""
        if self.audio:
            x = self.embeddings(inputs)
            if attention_mask is None:
                attention_mask = torch.ones(x.shape[:2], dtype=torch.long, device=x.device)
        else:
            positions = torch.arange(inputs.shape[1], device=inputs.device)[None]
            x = self.embeddings(inputs, positions)
        mask = attention_mask.bool()[:, None, :]  # (B, 1, S)
        buckets = None if self.relative is None else self.relative(positions, positions)
        for index, layer in enumerate(self.layers):
            x = layer(x, mask, None if buckets is None else self.relative.bias(buckets, index))
        return self.final_norm(x)


class Decoder(nn.Module):
    def __init__(self, config: ModelConfig, tokens: nn.Embedding):
        super().__init__()
        self.embeddings = Embeddings(config, tokens)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.final_norm = _final_norm(config)
        self.relative = _relative(config, config.n_decoder_layers, bidirectional=False)

    def forward(
        self, input_ids: Tensor, cache, cross: list[tuple[Tensor, Tensor]], cross_mask: Tensor | CrossSlots
    ) -> Tensor:
        """input_ids (B, T): the step's tokens, which follow the positions in `cache` (decoder_cache.py).
        cross[i]: layer i's K/V of the encoder output (B, H, S, Dh); cross_mask (B, S), 1 at real source tokens.
        Or the K/V once per group of rows (G, H, S, Dh), with cross_mask the rows' CrossSlots.
        Returns hidden states (B, T, d_model); the cache holds the step's K/V afterwards."""
        positions = cache.positions(input_ids)
        x = self.embeddings(input_ids, positions)
        buckets = None if self.relative is None else self.relative(positions, cache.key_positions(input_ids))
        for index, (layer, (cross_k, cross_v)) in enumerate(zip(self.layers, cross)):
            if isinstance(cross_mask, CrossSlots):
                source = CrossGroups(cross_k, cross_v, *cross_mask)
            else:
                source = KeysValues(cross_k, cross_v, cross_mask.bool()[:, None, :])  # mask (B, 1, S)
            x = layer(x, cache, index, source, None if buckets is None else self.relative.bias(buckets, index))
        return self.final_norm(x)


def _token_table(config: ModelConfig) -> nn.Embedding:
    table = nn.Embedding(config.vocab_size, config.d_model)
    # N(0, 1/d_model): with scaled embeddings the input has unit variance, and so do tied logits.
    nn.init.normal_(table.weight, std=config.d_model**-0.5)
    return table


class EmbeddingModel(nn.Module):
    """Encoder + pooling: one vector per input; with a classifier head, one logit per label instead."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config, _token_table(config))
        if config.head == "classifier":
            self.head_dense = nn.Linear(config.d_model, config.d_model)
            self.head_out = nn.Linear(config.d_model, len(config.labels))
        if config.sparse_head == "token_weights":
            self.sparse_linear = nn.Linear(config.d_model, 1)
        if config.sparse_head == "splade":  # BERT's MLM head: dense, activation, LayerNorm, the tied decoder
            self.mlm_dense = nn.Linear(config.d_model, config.d_model)
            self.mlm_activation = ACTIVATIONS[config.activation]()
            self.mlm_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
            self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        if config.multi_vector_dim:
            self.colbert_linear = nn.Linear(config.d_model, config.multi_vector_dim)
        if config.pooled_dense:  # sentence-transformers' Dense layers after the pooling
            widths = (config.d_model, *config.pooled_dense.dims)
            self.pooled_dense = nn.ModuleList(
                nn.Linear(i, o, bias=b) for i, o, b in zip(widths, widths[1:], config.pooled_dense.bias)
            )
        if config.colbert:  # PyLate's Dense layers
            widths = (config.d_model, *config.colbert.dims)
            self.projection = nn.ModuleList(
                nn.Linear(i, o, bias=b) for i, o, b in zip(widths, widths[1:], config.colbert.bias)
            )

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, ...]:
        """-> last_hidden_state (B, S, d_model), and embedding (B, embedding_dim): pooled (through its Dense
        layers, where it has them), not normalised; or,
        with a classifier head, logits (B, labels). Then the outputs its heads add
        (modeldir.files.extra_outputs)."""
        hidden = self.encoder(input_ids, attention_mask)
        if self.config.head == "classifier":  # the first token's state, as BERT's pooler and RoBERTa's head take it
            return hidden, self.head_out(torch.tanh(self.head_dense(hidden[:, 0])))
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, S, 1)
        if self.config.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        if self.config.pooled_dense:
            for layer, activation in zip(self.pooled_dense, self.config.pooled_dense.activations):
                pooled = torch.tanh(layer(pooled)) if activation == "tanh" else layer(pooled)
        extra = []
        if self.config.sparse_head == "token_weights":  # (B, S): padding's weight 0
            extra.append(torch.relu(self.sparse_linear(hidden)).squeeze(-1) * mask.squeeze(-1))
        if self.config.sparse_head == "splade":  # (B, vocab)
            extra.append(self.splade(hidden, mask))
        if self.config.multi_vector_dim:  # (B, S - 1, dim): every token but the first, padding's vectors 0
            vectors = self.colbert_linear(hidden[:, 1:]) * mask[:, 1:]
            extra.append(vectors / vectors.norm(dim=-1, keepdim=True).clamp(min=1e-12))
        if self.config.colbert:  # (B, S, dim): every token's, padding's too (a query's expansion tokens are kept)
            vectors = hidden
            for layer, activation in zip(self.projection, self.config.colbert.activations):
                vectors = torch.tanh(layer(vectors)) if activation == "tanh" else layer(vectors)
            extra.append(vectors / vectors.norm(dim=-1, keepdim=True).clamp(min=1e-12))
        return hidden, pooled, *extra

    def splade(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """(B, S, d_model), (B, S, 1) -> (B, vocab): SPLADE's weights, as sentence-transformers' SpladePooling
        makes them from the masked-LM logits (padding's logits zeroed first)."""
        state = self.mlm_norm(self.mlm_activation(self.mlm_dense(hidden)))
        logits = torch.matmul(state, self.encoder.embeddings.tokens.weight.t()) + self.mlm_bias
        weights = torch.log1p(torch.relu(logits * mask))
        if self.config.splade_activation == "log1p_relu":
            weights = torch.log1p(weights)
        return weights.amax(dim=1) if self.config.splade_pooling == "max" else weights.sum(dim=1)


class Seq2SeqModel(nn.Module):
    """Encoder + decoder + LM head. Generation: encode once, project_cross once, then decode step by step."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        if config.encoder_input == "log_mel":  # the encoder hears audio: only the decoder has tokens
            source_tokens, target_tokens = None, _token_table(config)
        else:
            source_tokens = _token_table(config)
            target_tokens = source_tokens if config.share_embeddings else _token_table(config)
        self.encoder = Encoder(config, source_tokens)
        self.decoder = Decoder(config, target_tokens)
        if not config.tie_output:
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.output_bias:
            self.logits_bias = nn.Parameter(torch.zeros(config.vocab_size))

    def encode(self, inputs: Tensor, attention_mask: Tensor) -> Tensor:
        return self.encoder(inputs, attention_mask)

    def project_cross(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Each decoder layer's cross-attention K/V of the encoder output: computed once per sequence."""
        return [layer.cross_attention.project_kv(memory) for layer in self.decoder.layers]

    def logits(self, hidden: Tensor) -> Tensor:
        """(..., d_model) -> (..., vocab)"""
        if self.config.rescale_output:
            hidden = hidden * self.config.d_model**-0.5
        if self.config.tie_output:
            out = torch.matmul(hidden, self.decoder.embeddings.tokens.weight.t())
        else:
            out = self.lm_head(hidden)
        return out + self.logits_bias if self.config.output_bias else out

    def decode(self, input_ids, cache, cross, cross_mask) -> Tensor:
        """One decoder step (see Decoder.forward). -> logits of the step's last position (B, vocab)."""
        return self.logits(self.decoder(input_ids, cache, cross, cross_mask)[:, -1])

    def empty_cache(self, batch: int) -> ConcatCache:
        """A cache with no positions: for a first step, or for recomputing a whole prefix."""
        c = self.config
        return ConcatCache.empty(batch, c.n_decoder_layers, c.n_heads, c.d_head, next(self.parameters()).dtype)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, target_ids: Tensor) -> Tensor:
        """Teacher forcing: logits (B, T, vocab) for every target position, for training."""
        cross = self.project_cross(self.encode(input_ids, attention_mask))
        hidden = self.decoder(target_ids, self.empty_cache(input_ids.shape[0]), cross, attention_mask)
        return self.logits(hidden)
