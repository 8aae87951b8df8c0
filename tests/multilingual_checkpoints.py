"""Random M2M100, NLLB-200, mBART-50 and mBART-25 checkpoints (model/families/multilingual/random_checkpoint.py), imported and
exported, beside transformers' model and tokenizer of each: for the tests that serve a multilingual model
(conftest.py builds them once a session)."""

from __future__ import annotations

import io
from pathlib import Path

from model.export.model_dir import export_model_dir
from model.families.multilingual.importer import import_multilingual
from model.families.multilingual.random_checkpoint import MultilingualShape, random_multilingual_checkpoint
from model.families.multilingual.reference import MultilingualReference
from modeldir.files import open_model_dir

# name -> (shape, the target languages the tests mix, a source language), in the checkpoint's codes
SHAPES = {
    "m2m100-h4": (
        MultilingualShape("m2m100", d_model=32, heads=4, encoder_layers=2, decoder_layers=2, activation="relu"),
        ("fr", "de", "es", "ja", "zh", "sw"),
        "en",
    ),
    "nllb-h2": (
        MultilingualShape("nllb", d_model=32, heads=2, encoder_layers=1, decoder_layers=3, d_ff=48, activation="gelu"),
        ("fra_Latn", "deu_Latn", "zho_Hant", "arb_Arab"),
        "eng_Latn",
    ),
    "mbart50-h4": (
        MultilingualShape("mbart50", d_model=32, heads=4, encoder_layers=2, decoder_layers=1, scale_embedding=False),
        ("fr_XX", "de_DE", "ja_XX"),
        "en_XX",
    ),
    "mbart25-h2": (
        MultilingualShape("mbart25", d_model=32, heads=2, encoder_layers=1, decoder_layers=2, scale_embedding=False),
        ("ro_RO", "de_DE", "fr_XX"),
        "en_XX",
    ),
}
MAX_NEW = 16  # new tokens the tests ask for (transformers counts the forced language code as one more)


def build_checkpoint(root: Path, name: str, seed: int) -> None:
    """transformers' random checkpoint of SHAPES[name] under root/<name>-hf, imported and exported under
    root/<name>."""
    source = random_multilingual_checkpoint(root / f"{name}-hf", SHAPES[name][0], seed=seed)
    export_model_dir(import_multilingual(source, root / name, name), progress_stream=io.StringIO())


class Checkpoint(MultilingualReference):
    """A checkpoint build_checkpoint made, with transformers' model and tokenizer of it beside ours."""

    def __init__(self, root: Path, name: str):
        shape, self.targets, self.source_language = SHAPES[name]
        self.source, self.dir = root / f"{name}-hf", root / name
        self.name = name
        mbart = shape.family.startswith("mbart")
        super().__init__(self.source, mbart, self.source_language, MAX_NEW, start=shape.family == "mbart25")
        self.codes = open_model_dir(self.dir).config.languages
        self.code_ids = {self.language_id(code) for code in self.codes}
