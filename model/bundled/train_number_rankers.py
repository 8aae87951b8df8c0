"""Train the bundled cross-encoders (number_rankers.py): transformers' BertForSequenceClassification, a
reranker of one logit and a language classifier, saved by sentence-transformers' CrossEncoder so that
`attnserve import` reads them as it reads any CrossEncoder; and their accuracy on held-out examples.

Deterministic for a seed and a thread count, as the numbers models' training is: seeded data, seeded
initialisation, a fixed number of steps.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from model.bundled.number_rankers import (
    CLASSES,
    EVAL_SEED,
    SPECIALS,
    RankerSettings,
    build_tokenizer,
    classify_example,
    rerank_example,
)
from model.bundled.train_numbers import _clock, learning_rate, optimizer_step, report, report_due

MAX_LENGTH = 64  # the longest pair is about 50 tokens (digits, and German words in pieces)


def _fast_tokenizer(settings: RankerSettings):
    from transformers import PreTrainedTokenizerFast

    pad, unk, cls, sep, mask = SPECIALS
    return PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(settings),
        pad_token=pad,
        unk_token=unk,
        cls_token=cls,
        sep_token=sep,
        mask_token=mask,
        model_max_length=MAX_LENGTH,
        # No token_type_ids (this class's default): BERT reads every token as type 0, the [SEP] alone
        # parting query from document. With BERT's second segment the same 3,000 steps reach 86.5% top-1
        # held out, against 96.9% without; the importer reads which a tokenizer gives (gives_token_types).
    )


def _model(settings: RankerSettings, vocab_size: int, labels: tuple[str, ...]):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=settings.d_model,
        num_attention_heads=settings.heads,
        num_hidden_layers=settings.layers,
        intermediate_size=settings.d_ff,
        max_position_embeddings=MAX_LENGTH,
        type_vocab_size=2,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertForSequenceClassification(config)


def _rerank_batch(tokenizer, settings: RankerSettings, rng: random.Random):
    examples = [rerank_example(rng, settings.documents, settings.max_digits) for _ in range(settings.batch_size)]
    pairs = [(query, text) for query, texts, _ in examples for text in texts]
    labels = torch.zeros(len(examples), settings.documents)
    for row, (_, _, right) in enumerate(examples):
        labels[row, right] = 1.0
    return tokenizer(*zip(*pairs), padding=True, return_tensors="pt"), labels


def _classify_batch(tokenizer, settings: RankerSettings, rng: random.Random):
    examples = [classify_example(rng, settings.max_digits) for _ in range(settings.batch_size)]
    texts, labels = zip(*examples)
    return tokenizer(list(texts), padding=True, return_tensors="pt"), torch.tensor(labels)


def _losses(kind: str, logits: torch.Tensor, labels: torch.Tensor, documents: int):
    """-> (loss, right answers, examples): for the reranker, the right document scored highest."""
    if kind == "reranker":
        scores = logits.view(-1, documents)
        loss = F.binary_cross_entropy_with_logits(scores, labels)
        return loss, float((scores.argmax(1) == labels.argmax(1)).sum()), scores.shape[0]
    loss = F.cross_entropy(logits, labels)
    return loss, float((logits.argmax(1) == labels).sum()), labels.shape[0]


def train(kind: str, settings: RankerSettings, out_dir: Path, log=sys.stderr) -> Path:
    """kind: "reranker" or "classifier" -> the CrossEncoder directory written."""
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    tokenizer = _fast_tokenizer(settings)
    labels = ("relevance",) if kind == "reranker" else CLASSES
    model = _model(settings, len(tokenizer), labels).train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"number {kind}: {n_params / 1e6:.2f} M parameters, {settings.steps} steps", file=log)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, betas=(0.9, 0.98), weight_decay=0.01)
    make_batch = _rerank_batch if kind == "reranker" else _classify_batch
    started = time.perf_counter()
    loss_sum = hits = examples = 0.0
    for step in range(settings.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, settings)
        inputs, targets = make_batch(tokenizer, settings, rng)
        loss, right, count = _losses(kind, model(**inputs).logits, targets, settings.documents)
        optimizer_step(model, optimizer, loss)
        loss_sum, hits, examples = loss_sum + float(loss.detach()), hits + right, examples + count
        if report_due(step, settings):
            report(step, settings, loss_sum, f"accuracy {100 * hits / examples:6.2f}%", started, log)
            loss_sum = hits = examples = 0.0

    out_dir = Path(out_dir)
    model.eval().save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    # CrossEncoder's own files (its activation: sigmoid for relevance, softmax over the languages).
    activation = torch.nn.Sigmoid() if kind == "reranker" else torch.nn.Softmax(dim=-1)
    CrossEncoder(str(out_dir), device="cpu", max_length=MAX_LENGTH, activation_fn=activation).save(str(out_dir))
    (out_dir / "README.md").unlink(missing_ok=True)  # sentence-transformers' generated model card
    print(f"number {kind}: saved to {out_dir} after {_clock(time.perf_counter() - started)}", file=log)
    return out_dir


def evaluate(kind: str, model_dir: Path, count: int = 2000, seed: int = EVAL_SEED, settings=RankerSettings()) -> dict:
    """Held-out accuracy through CrossEncoder.predict (the served model equals it within 1e-5): the
    reranker's right document first (top-1) and its mean reciprocal rank; the classifier's right language."""
    rng = random.Random(seed)
    if kind == "reranker":
        from sentence_transformers import CrossEncoder

        model = CrossEncoder(str(model_dir), device="cpu")
        examples = [rerank_example(rng, settings.documents, settings.max_digits) for _ in range(count)]
        scores = model.predict([(q, t) for q, texts, _ in examples for t in texts], batch_size=256)
        scores = torch.as_tensor(scores).view(count, -1)
        right = torch.tensor([r for _, _, r in examples])
        ranks = (scores > scores[torch.arange(count), right].unsqueeze(1)).sum(1) + 1
        top1 = float((ranks == 1).float().mean())
        return {"examples": count, "documents": scores.shape[1], "top1": top1, "mrr": float((1 / ranks).mean())}
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    examples = [
        classify_example(rng, settings.max_digits) for _ in range(count)
    ]  # single texts: CrossEncoder.predict takes pairs
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    classifier = AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        logits = classifier(**tokenizer([t for t, _ in examples], padding=True, return_tensors="pt")).logits
    right = torch.tensor([label for _, label in examples])
    return {"examples": count, "accuracy": float((logits.argmax(1) == right).float().mean())}


# The classifier's task is easy (99.7% after 300 steps): it needs far fewer steps than the reranker's.
DEFAULT_STEPS = {"reranker": RankerSettings.steps, "classifier": 600}


def settings_from(kind: str, **overrides) -> RankerSettings:
    chosen = {k: v for k, v in overrides.items() if v is not None}
    return replace(RankerSettings(), **{"steps": DEFAULT_STEPS[kind], **chosen})
