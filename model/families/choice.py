"""Which family's importer takes a checkpoint directory: the first family that claims it, the more specific
ones asked first (a ColBERT, SPLADE or cross-encoder checkpoint is a BERT too, a sentence-T5 a T5; a CTranslate2 directory is
known by its model.bin); BERT's importer takes the rest and refuses by name what it cannot read."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .bart.classifier import import_bart_classifier, is_bart_classifier
from .bart.importer import FAMILY as BART_TYPE
from .bart.importer import import_bart
from .bert.importer import import_sentence_transformer
from .colbert.importer import import_colbert, is_colbert
from .cross_encoder.importer import import_cross_encoder, is_cross_encoder
from .marian.importer import import_marian
from .multilingual.importer import FAMILIES as MULTILINGUAL_TYPES
from .multilingual.importer import import_multilingual
from .pegasus.importer import FAMILY as PEGASUS_TYPE
from .pegasus.importer import import_pegasus
from .splade.importer import import_splade, is_splade
from .t5.importer import FAMILIES as T5_TYPES
from .t5.importer import import_t5
from .t5.sentence_t5 import import_sentence_t5, is_sentence_t5
from .whisper.ctranslate2_model import import_ctranslate2_whisper, is_ctranslate2_whisper
from .whisper.importer import import_whisper


@dataclass(frozen=True, kw_only=True)
class Family:
    claims: Callable[[Path, dict], bool]  # (the checkpoint directory, its config.json) -> whether it is one
    importer: Callable[[Path, Path, str], Path]  # (source, out, name) -> our model directory
    label: str = ""  # what `attnserve import` says it found, after the checkpoint's model_type
    model_type: str = "bert"  # what it is called where its config.json has no model_type


FAMILIES = (
    Family(claims=lambda source, hf: is_colbert(source), importer=import_colbert, label="ColBERT"),
    Family(claims=lambda source, hf: is_splade(source), importer=import_splade, label="SPLADE"),
    Family(claims=lambda source, hf: is_bart_classifier(hf), importer=import_bart_classifier, label="classifier"),
    Family(claims=lambda source, hf: is_cross_encoder(hf), importer=import_cross_encoder, label="cross-encoder"),
    Family(claims=lambda source, hf: hf.get("model_type") == "marian", importer=import_marian),
    Family(claims=lambda source, hf: hf.get("model_type") in MULTILINGUAL_TYPES, importer=import_multilingual),
    Family(claims=lambda source, hf: hf.get("model_type") == BART_TYPE, importer=import_bart),
    Family(claims=lambda source, hf: hf.get("model_type") == PEGASUS_TYPE, importer=import_pegasus),
    Family(claims=is_sentence_t5, importer=import_sentence_t5, label="sentence-transformers"),
    Family(claims=lambda source, hf: hf.get("model_type") in T5_TYPES, importer=import_t5),
    Family(claims=lambda source, hf: hf.get("model_type") == "whisper", importer=import_whisper),
    Family(
        claims=lambda source, hf: is_ctranslate2_whisper(source),
        importer=import_ctranslate2_whisper,
        label="CTranslate2",
        model_type="whisper",
    ),
    Family(claims=lambda source, hf: True, importer=import_sentence_transformer),
)


def family_of(source: Path) -> tuple[Family, str]:
    """The family that imports `source`, and what it is called: its model_type and the family's label."""
    config = Path(source) / "config.json"
    hf = json.loads(config.read_text()) if config.is_file() else {}
    family = next(f for f in FAMILIES if f.claims(Path(source), hf))
    return family, " ".join(filter(None, (hf.get("model_type") or family.model_type, family.label)))
