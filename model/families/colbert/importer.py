"""Import a ColBERT-style checkpoint as PyLate saves one (a sentence-transformers directory: a BERT or
XLM-RoBERTa Transformer, then one or more Dense layers, and config_sentence_transformers.json's query and
document settings) into a model directory: the encoder as families/bert/importer.py reads it, the projection stack,
and the settings resolved to token ids as PyLate resolves them (modeldir/late_interaction.py)."""

from __future__ import annotations

import dataclasses
import json
import string
from pathlib import Path

from tokenizers import Tokenizer

from model.families.bert.importer import bert_settings, rename, require_safetensors, save_encoder
from model.families.sentence_transformers import dense_layers, kind_of, modules_of, prompts_of
from modeldir.files import TOKENIZER_FILE
from modeldir.late_interaction import ColbertSettings

# PyLate's defaults for what config_sentence_transformers.json leaves out.
DEFAULTS = {
    "query_prefix": "[Q] ",
    "document_prefix": "[D] ",
    "query_length": 32,
    "document_length": 180,
    "do_query_expansion": True,
    "attend_to_expansion_tokens": False,
    "skiplist_words": list(string.punctuation),
}


def is_colbert(source: Path) -> bool:
    source = Path(source)
    settings = source / "config_sentence_transformers.json"
    saved_by_pylate = settings.exists() and json.loads(settings.read_text()).get("model_type") == "ColBERT"
    return saved_by_pylate or any(m["type"].startswith("pylate.") for m in modules_of(source))


def _token_id(tokenizer: Tokenizer, token: str, unk_id: int | None) -> int | None:
    """As transformers' convert_tokens_to_ids: an unknown token is the unknown token's id."""
    found = tokenizer.token_to_id(token)
    return unk_id if found is None else found


def _special(tokenizer_config: dict, name: str) -> str | None:
    token = tokenizer_config.get(name)
    return token.get("content") if isinstance(token, dict) else token


def colbert_settings(encoder_dir: Path, found: dict, projection: dict) -> ColbertSettings:
    """config_sentence_transformers.json's settings (PyLate's defaults for those it lacks), with the
    tokenizer's ids for the markers, the expansion token and the skiplist."""
    settings = DEFAULTS | {k: v for k, v in found.items() if k in DEFAULTS and v is not None}
    tokenizer = Tokenizer.from_file(str(encoder_dir / TOKENIZER_FILE))
    path = encoder_dir / "tokenizer_config.json"
    tokenizer_config = json.loads(path.read_text()) if path.exists() else {}
    unk = _special(tokenizer_config, "unk_token")
    unk_id = tokenizer.token_to_id(unk) if unk else None
    prefix_ids = {}
    for role in ("query", "document"):
        prefix = settings[f"{role}_prefix"]
        prefix_ids[role] = tokenizer.token_to_id(prefix) if prefix else None
        if prefix and prefix_ids[role] is None:  # PyLate would add it with an untrained embedding
            raise ValueError(f"{encoder_dir}: the {role} prefix {prefix!r} is not a token of its tokenizer")
    # PyLate pads queries with the mask token, else the end-of-sequence token, else the padding token.
    expansion = next(
        (t for t in map(lambda n: _special(tokenizer_config, n), ("mask_token", "eos_token", "pad_token")) if t), None
    )
    if expansion is None or tokenizer.token_to_id(expansion) is None:
        raise ValueError(f"{encoder_dir}: its tokenizer has no mask, end or padding token to expand queries with")
    return ColbertSettings(
        **projection,
        query_prefix_id=prefix_ids["query"],
        document_prefix_id=prefix_ids["document"],
        query_length=settings["query_length"],
        document_length=settings["document_length"],
        query_expansion=bool(settings["do_query_expansion"]),
        attend_to_expansion=bool(settings["attend_to_expansion_tokens"]) and bool(settings["do_query_expansion"]),
        expansion_id=tokenizer.token_to_id(expansion),
        skiplist_ids=tuple(_token_id(tokenizer, word, unk_id) for word in settings["skiplist_words"]),
    )


def import_colbert(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a PyLate ColBERT directory into our model directory."""
    source = Path(source)
    modules = modules_of(source)
    if not modules or kind_of(modules[0]) != "Transformer":
        raise ValueError(f"{source}: a ColBERT model's first module must be a sentence-transformers Transformer")
    encoder_dir = source / modules[0]["path"]
    require_safetensors(encoder_dir)
    hf = json.loads((encoder_dir / "config.json").read_text())
    encoder = bert_settings(encoder_dir, hf)
    projection, state = dense_layers(source, modules[1:], encoder.d_model, "projection")
    if not projection["dims"]:
        raise ValueError(f"{source}: no Dense layer after the encoder: not a ColBERT model")
    path = source / "config_sentence_transformers.json"
    found = json.loads(path.read_text()) if path.exists() else {}
    colbert = colbert_settings(encoder_dir, found, projection)
    longest = max(colbert.query_length, colbert.document_length)
    if longest > encoder.max_positions:
        raise ValueError(f"{source}: query or document length {longest} exceeds the encoder's {encoder.max_positions}")
    config = dataclasses.replace(encoder, colbert=colbert, max_input_tokens=longest, **prompts_of(source))
    return save_encoder(encoder_dir, config, rename, out_dir, name, state)
