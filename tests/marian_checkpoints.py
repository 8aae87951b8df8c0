"""Random MarianMT checkpoints in several shapes, built by transformers with a sentencepiece model trained
on the spot (model/families/marian/random_checkpoint.py), imported and exported: for the tests that need a Marian model
(conftest.py builds them once a session)."""

from __future__ import annotations

import io
from pathlib import Path

import torch
import transformers

from model.export.model_dir import export_model_dir
from model.families.marian.importer import import_marian
from model.families.marian.random_checkpoint import MarianShape, random_marian_checkpoint

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


class Checkpoint:
    """A checkpoint build_checkpoint made, with transformers' model and tokenizer of it beside ours."""

    def __init__(self, root: Path, name: str, shape: MarianShape):
        self.source, self.dir = root / f"{name}-hf", root / name
        self.name, self.shape = name, shape
        self.hf = transformers.MarianMTModel.from_pretrained(self.source).eval()
        self.hf_tokenizer = transformers.MarianTokenizer.from_pretrained(self.source)

    def hf_generate(self, texts: list[str], **kwargs) -> list[list[int]]:
        """transformers' output ids after the start token, without the padding of shorter rows."""
        batch = self.hf_tokenizer(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = self.hf.generate(**batch, max_new_tokens=MAX_NEW, **kwargs)
        return [self._unpadded(row) for row in out]

    def hf_n_best(self, texts: list[str], n: int, **kwargs) -> list[list[tuple[list[int], float]]]:
        """Per text, transformers' n best beam-search hypotheses (ids as hf_generate) with their scores."""
        batch = self.hf_tokenizer(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = self.hf.generate(
                **batch,
                max_new_tokens=MAX_NEW,
                num_return_sequences=n,
                output_scores=True,
                return_dict_in_generate=True,
                **kwargs,
            )
        hypotheses = [(self._unpadded(row), float(score)) for row, score in zip(out.sequences, out.sequences_scores)]
        return [hypotheses[i : i + n] for i in range(0, len(hypotheses), n)]

    def _unpadded(self, row: torch.Tensor) -> list[int]:
        pad = self.hf.config.pad_token_id
        return [t for t in row[1:].tolist() if t != pad]


def without_eos(ids: list[int], eos: int = 0) -> list[int]:
    """transformers' ids of a generation or a target text, without the eos that ours leave out."""
    return ids[:-1] if ids and ids[-1] == eos else ids
