"""Import a SPLADE checkpoint (sentence-transformers' SparseEncoder: a BERT masked-LM and SpladePooling, as
naver's and opensearch's SPLADE models are saved) into a model directory: the encoder as families/bert/importer.py
reads it, and BERT's MLM head (dense, activation, LayerNorm, a bias, its decoder the token table), with
SpladePooling's pooling and activation; served as a weight per vocabulary id (EmbedRequest sparse).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from model.families.bert.importer import bert_settings, rename, require_safetensors, save_encoder
from model.families.sentence_transformers import max_seq_length
from modeldir.config import ModelConfig

MLM_HEAD = {
    "cls.predictions.transform.dense": "mlm_dense",
    "cls.predictions.transform.LayerNorm": "mlm_norm",
}
HEAD = re.compile(r"^(?P<module>cls\.predictions\.transform\.(dense|LayerNorm))\.(?P<p>weight|bias)$")
TIED = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")  # the token table; the bias below


def is_splade(source: Path) -> bool:
    modules = Path(source) / "modules.json"
    return modules.exists() and any(m["type"].endswith("SpladePooling") for m in json.loads(modules.read_text()))


def splade_rename(name: str) -> str | None:
    """Our name for a BertForMaskedLM parameter (None: one we do not use)."""
    if name == "cls.predictions.bias":
        return "mlm_bias"
    if name in TIED:
        return None
    match = HEAD.match(name)
    if match:
        return f"{MLM_HEAD[match['module']]}.{match['p']}"
    return rename(name)


def splade_config(source: Path) -> ModelConfig:
    hf = json.loads((source / "config.json").read_text())
    if (hf.get("architectures") or [""])[0] != "BertForMaskedLM":
        raise ValueError(f"{source}: a SPLADE checkpoint must be a BertForMaskedLM, not {hf.get('architectures')}")
    if hf.get("tie_word_embeddings", True) is False:
        raise ValueError(f"{source}: an MLM decoder of its own (tie_word_embeddings false) is not supported")
    modules = json.loads((source / "modules.json").read_text())
    pooling_dir = next(m["path"] for m in modules if m["type"].endswith("SpladePooling"))
    pooling = json.loads((source / pooling_dir / "config.json").read_text())
    base = bert_settings(source, hf)
    return dataclasses.replace(
        base,
        sparse_head="splade",
        splade_pooling=pooling.get("pooling_strategy", "max"),
        splade_activation=pooling.get("activation_function", "relu"),
        normalize=False,
        max_input_tokens=min(max_seq_length(source) or base.max_positions, base.max_positions),
    )


def import_splade(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a SparseEncoder (SPLADE) directory into our model directory."""
    source = Path(source)
    require_safetensors(source)
    return save_encoder(source, splade_config(source), splade_rename, out_dir, name)
