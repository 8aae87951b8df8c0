"""Train the bundled multilingual numbers model (multilingual_numbers.py): transformers' M2M100 (NLLB-200's
architecture) on examples generated on the fly, saved as a Hugging Face checkpoint that `attnserve import`
reads as it reads NLLB-200's.

Deterministic for a seed and a thread count, as the English numbers model's training is: seeded data,
seeded initialisation, a fixed number of steps.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from model.bundled.multilingual_numbers import MultilingualTrainSettings, build_tokenizer, sample_examples
from model.bundled.train_numbers import _clock, learning_rate, optimizer_step, padded, report, report_due

PAD, EOS = 1, 2
MAX_POSITIONS = 64  # the longest sequence is 16 tokens with its codes


def hf_config(settings: MultilingualTrainSettings, vocab_size: int):
    from transformers import M2M100Config

    return M2M100Config(
        vocab_size=vocab_size,
        d_model=settings.d_model,
        encoder_layers=settings.layers,
        decoder_layers=settings.layers,
        encoder_attention_heads=settings.heads,
        decoder_attention_heads=settings.heads,
        encoder_ffn_dim=settings.d_ff,
        decoder_ffn_dim=settings.d_ff,
        activation_function="relu",
        scale_embedding=True,
        max_position_embeddings=MAX_POSITIONS,
        pad_token_id=PAD,
        bos_token_id=0,
        eos_token_id=EOS,
        decoder_start_token_id=EOS,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        layerdrop=0.0,
    )


class MultilingualBatches:
    """MultilingualBatches of every direction in turn, grouped by target length to cut padding: source ids framed as
    NLLB frames them ([code] text </s>), labels [target code] text </s>, decoder inputs </s> + labels."""

    def __init__(self, tokenizer, settings: MultilingualTrainSettings, rng: random.Random, group: int = 8):
        self.tokenizer, self.settings, self.rng, self.group = tokenizer, settings, rng, group
        self.pending: list = []

    def _ids(self, code: str, text: str) -> list[int]:
        return [self.tokenizer.convert_tokens_to_ids(code), *self.tokenizer.encode(text, add_special_tokens=False), EOS]

    def __next__(self):
        if not self.pending:
            size = self.settings.batch_size * self.group
            examples = sample_examples(self.rng, size, self.settings.sparse)
            rows = sorted(((self._ids(s, a), self._ids(t, b)) for s, t, a, b in examples), key=lambda r: len(r[1]))
            chunks = [rows[i : i + self.settings.batch_size] for i in range(0, size, self.settings.batch_size)]
            self.rng.shuffle(chunks)
            self.pending = chunks
        chunk = self.pending.pop()
        source = padded([s for s, _ in chunk], PAD)
        labels = padded([t for _, t in chunk], PAD)
        decoder_input = torch.cat([torch.full_like(labels[:, :1], EOS), labels[:, :-1]], dim=1)
        return source, (source != PAD).long(), decoder_input, labels


def train(settings: MultilingualTrainSettings, out_dir: Path, log=sys.stderr) -> Path:
    from transformers import GenerationConfig, M2M100ForConditionalGeneration

    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    tokenizer = build_tokenizer(settings)
    model = M2M100ForConditionalGeneration(hf_config(settings, len(tokenizer))).train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"numbers (multilingual): {n_params / 1e6:.2f} M parameters, {settings.steps} steps", file=log)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, betas=(0.9, 0.98), weight_decay=0.01)
    batches = MultilingualBatches(tokenizer, settings, rng)
    started = time.perf_counter()
    loss_sum = hits = sequences = 0.0
    for step in range(settings.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, settings)
        source, mask, decoder_input, labels = next(batches)
        logits = model(input_ids=source, attention_mask=mask, decoder_input_ids=decoder_input).logits
        real = labels != PAD
        loss = F.cross_entropy(logits[real], labels[real])
        optimizer_step(model, optimizer, loss)
        with torch.no_grad():
            loss_sum += float(loss)
            # Without the target's code (column 0): the decoder cannot know it (it is forced when served); the
            # loss counts it still, at no cost to the rest.
            hits += float(((logits.argmax(-1) == labels) | ~real)[:, 1:].all(dim=1).sum())
            sequences += labels.shape[0]
        if report_due(step, settings):
            report(step, settings, loss_sum, f"sequence acc {100 * hits / sequences:6.2f}%", started, log)
            loss_sum = hits = sequences = 0.0
    model.generation_config = GenerationConfig(
        decoder_start_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD, bos_token_id=0, num_beams=1
    )
    out_dir = Path(out_dir)
    model.eval().save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    print(f"numbers (multilingual): saved to {out_dir} after {_clock(time.perf_counter() - started)}", file=log)
    return out_dir


def settings_from(**overrides) -> MultilingualTrainSettings:
    return replace(MultilingualTrainSettings(), **{k: v for k, v in overrides.items() if v is not None})
