"""Random MarianMT checkpoints in several shapes, built by transformers with a sentencepiece model trained
on the spot (model/families/marian/random_checkpoint.py), imported and exported, beside transformers' model of
each (model/families/marian/reference.py): for the tests that need a Marian model (conftest.py builds them)."""

from __future__ import annotations

import io
from pathlib import Path

from model.export.model_dir import export_model_dir
from model.families.marian.importer import import_marian
from model.families.marian.random_checkpoint import MarianShape, random_marian_checkpoint
from model.families.marian.reference import MarianReference

SHAPES = {
    "marian-swish-h4": MarianShape(d_model=32, heads=4, encoder_layers=2, decoder_layers=2, activation="swish"),
    "marian-gelu-h2": MarianShape(d_model=32, heads=2, encoder_layers=1, decoder_layers=3, d_ff=48, activation="gelu"),
    "marian-relu-h8": MarianShape(
        d_model=64,
        heads=8,
        encoder_layers=3,
        decoder_layers=1,
        activation="relu",
        num_beams=3,
        renormalize_logits=True,
        tied=False,
        eos_bias=11.0,
    ),
    # Source and target vocabularies of their own (tokenizer_config.json: separate_vocabs).
    "marian-separate-h4": MarianShape(
        d_model=32, heads=4, encoder_layers=2, decoder_layers=2, activation="gelu", tied=False, separate_vocabs=True
    ),
}
MAX_NEW = 24  # new tokens the tests generate


def build_checkpoint(root: Path, name: str, shape: MarianShape, seed: int) -> None:
    """transformers' random checkpoint under root/<name>-hf, imported and exported under root/<name>."""
    source = random_marian_checkpoint(root / f"{name}-hf", shape, seed=seed)
    export_model_dir(import_marian(source, root / name, name), progress_stream=io.StringIO())


class Checkpoint(MarianReference):
    """A checkpoint build_checkpoint made, with transformers' model and tokenizer of it beside ours."""

    def __init__(self, root: Path, name: str, shape: MarianShape):
        self.source, self.dir = root / f"{name}-hf", root / name
        self.name, self.shape = name, shape
        super().__init__(self.source, MAX_NEW)
