"""Import a cross-encoder or classifier checkpoint (transformers' BertForSequenceClassification or
XLMRobertaForSequenceClassification, as sentence-transformers' CrossEncoder saves it) into a model directory:
the encoder as families/bert/importer.py reads it, and the classification head on the first token's state (BERT's
pooler and classifier; RoBERTa's dense and out_proj: the same dense, tanh, linear), with the labels and the
activation CrossEncoder puts on the logits.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from model.families.bert.importer import bert_settings, rename, require_safetensors, save_encoder
from model.families.sentence_transformers import max_seq_length
from modeldir.config import ModelConfig

ARCHITECTURES = ("BertForSequenceClassification", "XLMRobertaForSequenceClassification")
HEAD_NAMES = {
    "bert.pooler.dense": "head_dense",  # BERT
    "classifier": "head_out",
    "classifier.dense": "head_dense",  # RoBERTa
    "classifier.out_proj": "head_out",
}
HEAD = re.compile(
    r"^(?P<module>bert\.pooler\.dense|classifier\.dense|classifier\.out_proj|classifier)\.(?P<p>weight|bias)$"
)
# CrossEncoder's activation_fn, as it saves it, -> ours.
ACTIVATIONS = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.Softmax": "softmax",
}


def is_cross_encoder(hf: dict) -> bool:
    """config.json names a *ForSequenceClassification architecture."""
    return any(a.endswith("ForSequenceClassification") for a in hf.get("architectures") or ())


def head_rename(name: str) -> str | None:
    """Our name for a classification checkpoint's parameter (None: one we do not use)."""
    match = HEAD.match(name)
    if match:
        return f"{HEAD_NAMES[match['module']]}.{match['p']}"
    return rename(name)


def activation_of(source: Path, labels: int) -> str:
    """The activation CrossEncoder applies: saved by sentence-transformers 4+ in
    config_sentence_transformers.json, by earlier versions in config.json; else its default (sigmoid for one
    label, none for several)."""
    for path, key in (
        (source / "config_sentence_transformers.json", None),
        (source / "config.json", "sentence_transformers"),
    ):
        found = json.loads(path.read_text()) if path.exists() else {}
        found = found.get(key, {}) if key else found
        if "activation_fn" in found:
            if found["activation_fn"] not in ACTIVATIONS:
                raise ValueError(f"{source}: activation {found['activation_fn']!r} is not supported")
            return ACTIVATIONS[found["activation_fn"]]
    return "sigmoid" if labels == 1 else "identity"


# Tokenizers that give token_type_ids unless their tokenizer_config.json says otherwise (transformers'
# defaults): with them BERT reads a pair's second text as type 1. The generic classes (PreTrainedTokenizerFast,
# TokenizersBackend) and RoBERTa's give none, and BERT then reads every token as type 0.
TOKEN_TYPE_TOKENIZERS = ("BertTokenizer", "BertTokenizerFast", "ElectraTokenizer", "ElectraTokenizerFast")


def gives_token_types(source: Path) -> bool:
    """Whether the checkpoint's tokenizer, as transformers loads it, gives token_type_ids: the
    model_input_names its tokenizer_config.json states, else its class's default (none stated: BERT's)."""
    path = source / "tokenizer_config.json"
    found = json.loads(path.read_text()) if path.exists() else {}
    if "model_input_names" in found:
        return "token_type_ids" in found["model_input_names"]
    return found.get("tokenizer_class", "BertTokenizer") in TOKEN_TYPE_TOKENIZERS


def cross_encoder_config(source: Path) -> ModelConfig:
    hf = json.loads((source / "config.json").read_text())
    architecture = (hf.get("architectures") or [""])[0]
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"{source}: architecture {architecture!r} is not supported (one of {', '.join(ARCHITECTURES)})"
        )
    labels = [hf["id2label"][str(i)] for i in range(len(hf["id2label"]))] if "id2label" in hf else ["LABEL_0"]
    base = bert_settings(source, hf)
    return dataclasses.replace(
        base,
        head="classifier",
        labels=tuple(labels),
        score_activation=activation_of(source, len(labels)),
        # BERT's second segment, where its tokenizer marks it; XLM-R has one token type.
        pair_segments=base.type_vocab_size >= 2 and gives_token_types(source),
        normalize=False,
        pooling="cls",
        max_input_tokens=min(max_seq_length(source) or base.max_positions, base.max_positions),
    )


def import_cross_encoder(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a CrossEncoder (or *ForSequenceClassification) directory into our model directory."""
    source = Path(source)
    require_safetensors(source)
    return save_encoder(source, cross_encoder_config(source), head_rename, out_dir, name)
