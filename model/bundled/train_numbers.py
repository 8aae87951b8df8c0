"""Train the bundled "numbers" model (see numbers.py) on examples generated on the fly.

Deterministic for a seed and a thread count: the data comes from a seeded generator, the weights from a
seeded initialisation, and the number of steps is fixed (not a time budget), so a run on another machine
gives the same checkpoint, only sooner or later.
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from model.architecture.transformer import Seq2SeqModel
from model.architecture.weights import save_model_dir
from model.bundled.numbers import TrainSettings, build_tokenizer, pair, sample_number
from modeldir.config import ModelConfig
from modeldir.files import TOKENIZER_FILE


def numbers_config(settings: TrainSettings, vocab_size: int) -> ModelConfig:
    return ModelConfig(
        task="seq2seq",
        vocab_size=vocab_size,
        d_model=settings.d_model,
        n_heads=settings.n_heads,
        d_ff=settings.d_ff,
        n_encoder_layers=settings.layers,
        n_decoder_layers=settings.layers,
        max_positions=64,  # the longest sequence is 17 tokens
        max_input_tokens=32,
        positions="sinusoidal",
        norm_placement="pre",  # trains stably at a high learning rate with a short warmup
        activation="relu",
        scale_embeddings=True,
        share_embeddings=True,  # one vocabulary for both directions
        tie_output=True,
    )


def padded(rows: list[list[int]], pad_id: int = 0) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)


class NumberBatches:
    """NumberBatches of both directions, half each, grouped by target length to cut padding."""

    def __init__(
        self, tokenizer, settings: TrainSettings, rng: random.Random, group: int = 8, task_prefix: bool = False
    ):
        """task_prefix: each source starts with its task (the T5 model's)."""
        self.tokenizer, self.settings, self.rng, self.group = tokenizer, settings, rng, group
        self.task_prefix = task_prefix
        self.pending: list = []

    def __next__(self):
        if not self.pending:
            size = self.settings.batch_size * self.group
            examples = [
                pair(sample_number(self.rng, self.settings.sparse), i % 2 == 0, self.task_prefix) for i in range(size)
            ]
            sources = self.tokenizer.encode_batch([s for s, _ in examples])
            targets = self.tokenizer.encode_batch([t for _, t in examples])
            rows = sorted(zip(sources, targets), key=lambda st: len(st[1].ids))
            chunks = [rows[i : i + self.settings.batch_size] for i in range(0, size, self.settings.batch_size)]
            self.rng.shuffle(chunks)
            self.pending = chunks
        chunk = self.pending.pop()
        source = padded([s.ids for s, _ in chunk])
        target = padded([t.ids for _, t in chunk])  # ends with </s>
        decoder_input = torch.cat([torch.ones_like(target[:, :1]), target[:, :-1]], dim=1)  # <s> + shifted
        return source, (source != 0).long(), decoder_input, target


def learning_rate(step: int, settings: TrainSettings) -> float:
    """Linear warmup, then cosine decay to 5% of the peak."""
    if step < settings.warmup_steps:
        return settings.learning_rate * (step + 1) / settings.warmup_steps
    progress = (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps)
    return settings.learning_rate * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def optimizer_step(model, optimizer, loss) -> None:
    """Backward, gradients clipped to norm 1, one step: as both numbers models train."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def report_due(step: int, settings) -> bool:
    return (step + 1) % settings.report_every == 0 or step + 1 == settings.steps


def report(step: int, settings, loss_sum: float, accuracy: str, started: float, log) -> None:
    """One progress line: the mean loss since the last, the accuracy figures given, time spent and left."""
    elapsed = time.perf_counter() - started
    left = elapsed / (step + 1) * (settings.steps - step - 1)
    print(
        f"step {step + 1:>6}/{settings.steps}  loss {loss_sum / settings.report_every:.4f}  {accuracy}  "
        f"lr {learning_rate(step, settings):.2e}  elapsed {_clock(elapsed)}  left {_clock(left)}",
        file=log,
        flush=True,
    )


def train(settings: TrainSettings, out_dir: Path, name: str = "numbers", log=sys.stderr) -> Path:
    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    tokenizer = build_tokenizer()
    config = numbers_config(settings, tokenizer.get_vocab_size())
    model = Seq2SeqModel(config).train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"numbers: {n_params / 1e6:.2f} M parameters, {settings.steps} steps of {settings.batch_size}", file=log)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, betas=(0.9, 0.98), weight_decay=0.01)
    batches = NumberBatches(tokenizer, settings, rng)
    started = time.perf_counter()
    loss_sum = token_hits = tokens = sequence_hits = sequences = 0.0
    for step in range(settings.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, settings)
        source, source_mask, decoder_input, target = next(batches)
        logits = model(source, source_mask, decoder_input)  # (B, T, vocab)
        real = target != 0
        loss = F.cross_entropy(logits[real], target[real])
        optimizer_step(model, optimizer, loss)

        with torch.no_grad():
            correct = (logits.argmax(-1) == target) | ~real
            loss_sum += float(loss)
            token_hits += float(correct[real].sum())
            tokens += float(real.sum())
            sequence_hits += float(correct.all(dim=1).sum())
            sequences += target.shape[0]
        if report_due(step, settings):
            accuracy = (
                f"token acc {100 * token_hits / tokens:6.2f}%  sequence acc {100 * sequence_hits / sequences:6.2f}%"
            )
            report(step, settings, loss_sum, accuracy, started, log)
            loss_sum = token_hits = tokens = sequence_hits = sequences = 0.0

    out_dir = save_model_dir(model.eval(), name, out_dir)
    tokenizer.save(str(Path(out_dir) / TOKENIZER_FILE))
    print(f"numbers: saved to {out_dir} after {_clock(time.perf_counter() - started)}", file=log)
    return out_dir


def settings_from(**overrides) -> TrainSettings:
    return replace(TrainSettings(), **{k: v for k, v in overrides.items() if v is not None})
