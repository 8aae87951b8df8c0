"""Import BART's sequence classifier (transformers' BartForSequenceClassification: bart-large-mnli,
distilbart-mnli) as our EncoderDecoderClassifier: BART's stacks as bart/importer.py reads them, the
classification head (dense, tanh, out_proj) on the decoder's state at the last eos, the labels of id2label;
served as any classifier is, and as a zero-shot classifier where a label is entailment."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from model.architecture.encoder_decoder_classifier import EncoderDecoderClassifier
from model.families.bart.importer import FAMILY, BartImportError, bart_config
from model.families.multilingual.importer import read_json, tied_model
from model.families.tokenizer_json import require_tokenizer, save_with_tokenizer
from modeldir.config import ModelConfig

ARCHITECTURE = "BartForSequenceClassification"
HEAD = {
    "classification_head.dense.weight": "head_dense.weight",
    "classification_head.dense.bias": "head_dense.bias",
    "classification_head.out_proj.weight": "head_out.weight",
    "classification_head.out_proj.bias": "head_out.bias",
}


def is_bart_classifier(hf: dict) -> bool:
    return hf.get("model_type") == FAMILY and ARCHITECTURE in (hf.get("architectures") or ())


def bart_classifier_config(source: Path) -> ModelConfig:
    source = Path(source)
    hf = read_json(source / "config.json")
    labels = tuple(hf["id2label"][str(i)] for i in range(len(hf["id2label"]))) if "id2label" in hf else ()
    if len(labels) < 2:
        raise BartImportError(f"{source / 'config.json'}: a classifier needs id2label of at least 2 labels")
    # transformers' text-classification pipeline scores as the problem type says: several labels, one true
    # (softmax, its default), or each on its own (sigmoid).
    multi_label = hf.get("problem_type") == "multi_label_classification"
    seq2seq = bart_config(source)
    return dataclasses.replace(
        seq2seq,
        task="embedding",
        head="classifier",
        classifier_input="decoder_last_eos",
        labels=labels,
        score_activation="sigmoid" if multi_label else "softmax",
        pooling="cls",
        normalize=False,
        output_bias=False,  # the LM head's final_logits_bias: not a classifier's
        forced_bos_id=None,
        forced_eos=False,
    )


def import_bart_classifier(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a BartForSequenceClassification directory into our model directory (tokenizer.json copied)."""
    require_tokenizer(source, BartImportError, "transformers' fast tokenizer")
    model = tied_model(source, bart_classifier_config(source), BartImportError, EncoderDecoderClassifier, HEAD)
    return save_with_tokenizer(model, source, out_dir, name, BartImportError)
