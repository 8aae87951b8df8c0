"""The modules the serving graphs are traced from, and the example inputs they are traced and measured with:
the encoder (an embedding model's vectors, or a seq2seq model's memory and every decoder layer's cross K/V)
and one decoder step as the server runs it."""

from __future__ import annotations

import torch

from model.architecture.attention import CrossSlots
from model.architecture.decoder_cache import BufferCache
from model.architecture.transformer import EmbeddingModel, Seq2SeqModel
from modeldir.config import ModelConfig


class EncoderGraph(torch.nn.Module):
    def __init__(self, model: EmbeddingModel | Seq2SeqModel):
        super().__init__()
        self.model = model

    def forward(self, inputs, attention_mask=None):
        """token ids and their mask, or an audio encoder's log-mel frames alone (modeldir.files.encoder_inputs)"""
        if isinstance(self.model, EmbeddingModel):
            return self.model(inputs, attention_mask)
        memory = self.model.encode(inputs, attention_mask)
        cross = self.model.project_cross(memory)
        return (memory, *(t for kv in cross for t in kv))


class DecoderGraph(torch.nn.Module):
    """One decoder step as the server runs it: each row's argmax (the checkpoint's suppressed tokens left
    out) for greedy rows, the whole logits only of the rows that ask (logit_rows), so that a greedy step
    moves O(rows) values off the device, not O(rows x vocabulary)."""

    def __init__(self, model: Seq2SeqModel):
        super().__init__()
        self.model = model
        self.n_layers = model.config.n_decoder_layers
        suppressed = list(model.config.suppressed_ids)
        self.register_buffer("suppression", torch.zeros(model.config.vocab_size), persistent=False)
        self.suppression[suppressed] = float("-inf")
        self.suppresses = bool(suppressed)

    def forward(
        self, input_ids, past_lengths, source_lengths, logit_rows, total_length, query_slots, row_slots, *caches
    ):
        n = self.n_layers
        cache = BufferCache(list(caches[0 : 2 * n : 2]), list(caches[1 : 2 * n : 2]), past_lengths, total_length)
        # One cross buffer row per group of rows that share a source, right-padded to the source capacity:
        # each group reads its own length, its rows' queries as one block (CrossSlots).
        cross = [(caches[2 * n + 2 * i], caches[2 * n + 2 * i + 1]) for i in range(n)]
        logits = self.model.decode(input_ids, cache, cross, CrossSlots(source_lengths, query_slots, row_slots))
        next_token = (logits + self.suppression if self.suppresses else logits).argmax(-1)
        return (next_token, logits.index_select(0, logit_rows), *(t for kv in cache.present for t in kv))


def example_encoder_inputs(config: ModelConfig, batch: int = 2, length: int = 7, seed: int = 0):
    """-> (inputs, attention_mask (B, length)): token ids (B, length), the last row padded; or log-mel
    frames (B, n_mels, 2 length) that the convolution stem halves, every position heard."""
    generator = torch.Generator().manual_seed(seed)
    if config.encoder_input == "log_mel":
        frames = torch.randn(batch, config.n_mels, 2 * length, generator=generator)
        return frames, torch.ones(batch, length, dtype=torch.long)
    ids = torch.randint(0, config.vocab_size, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, length // 2 :] = 0  # one padded row
    return ids, mask


def example_decoder_inputs(config: ModelConfig, batch: int = 3, buffer: int = 9, source: int = 7):
    """A step of `batch` rows (at least 2) in batch - 1 groups: rows 0 and 2 share group 0 (two beams of
    one search), the others a group each."""
    generator = torch.Generator().manual_seed(0)
    c = config
    groups = batch - 1

    def cache(rows, length):
        return torch.randn(rows, c.n_heads, length, c.d_head, generator=generator)

    past = torch.tensor([3, 5] + [0] * (batch - 2), dtype=torch.int32)[:batch]
    group_of = torch.tensor([0, 1, 0] + list(range(2, groups)))[:batch]
    query_slots, row_slots = slots_of(group_of, groups)
    return (
        torch.randint(0, c.vocab_size, (batch, 1), generator=generator),
        past,
        torch.tensor([source, source - 2] + [source] * (groups - 2), dtype=torch.int32)[:groups],
        torch.arange(batch - 1, -1, -1),
        (past.max() + 1).reshape(1),
        query_slots,
        row_slots,
        *(cache(batch, buffer) for _ in range(2 * c.n_decoder_layers)),
        *(cache(groups, source) for _ in range(2 * c.n_decoder_layers)),
    )


def slots_of(group_of: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's group (B) -> (query_slots (G * W), row_slots (B)) as the decoder step takes them, W the
    most rows of a group; a group's rows in row order, its spare slots pointing at row 0."""
    width = int(torch.bincount(group_of, minlength=groups).max())
    row_slots = torch.zeros(len(group_of), dtype=torch.long)
    filled = [0] * groups
    for row, group in enumerate(group_of.tolist()):
        row_slots[row] = group * width + filled[group]
        filled[group] += 1
    query_slots = torch.zeros(groups * width, dtype=torch.long)
    query_slots[row_slots] = torch.arange(len(group_of))
    return query_slots, row_slots
