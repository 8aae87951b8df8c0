"""Random M2M100, NLLB-200 and mBART-50 checkpoints (model/families/multilingual/random_checkpoint.py), imported and
exported, beside transformers' model and tokenizer of each: for the tests that serve a multilingual model
(conftest.py builds them once a session)."""

from __future__ import annotations

import io
from pathlib import Path

import torch
import transformers

from model.export.model_dir import export_model_dir
from model.families.multilingual.importer import import_multilingual
from model.families.multilingual.random_checkpoint import MultilingualShape, random_multilingual_checkpoint
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
}
MAX_NEW = 16  # new tokens the tests ask for (transformers counts the forced language code as one more)


def build_checkpoint(root: Path, name: str, seed: int) -> None:
    """transformers' random checkpoint of SHAPES[name] under root/<name>-hf, imported and exported under
    root/<name>."""
    source = random_multilingual_checkpoint(root / f"{name}-hf", SHAPES[name][0], seed=seed)
    export_model_dir(import_multilingual(source, root / name, name), progress_stream=io.StringIO())


class Checkpoint:
    """A checkpoint build_checkpoint made, with transformers' model and tokenizer of it beside ours."""

    def __init__(self, root: Path, name: str):
        shape, self.targets, self.source_language = SHAPES[name]
        self.source, self.dir = root / f"{name}-hf", root / name
        self.name = name
        mbart = shape.family == "mbart50"
        model_class = (
            transformers.MBartForConditionalGeneration if mbart else transformers.M2M100ForConditionalGeneration
        )
        self.hf = model_class.from_pretrained(self.source).eval()
        self.hf_tokenizer = transformers.AutoTokenizer.from_pretrained(self.source, src_lang=self.source_language)
        self.codes = open_model_dir(self.dir).config.languages
        self.code_ids = {self.language_id(code) for code in self.codes}

    def language_id(self, code: str) -> int:
        return self.hf_tokenizer.convert_tokens_to_ids(code if "_" in code else f"__{code}__")

    def hf_n_best(self, texts: list[str], target: str, n: int = 1, **kwargs) -> list[list[tuple[list[int], float]]]:
        """Per text, transformers' n best into `target` (forced_bos_token_id): the ids after the start token
        and the language code, without eos or padding, and their scores (0.0 for greedy)."""
        batch = self.hf_tokenizer(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = self.hf.generate(
                **batch,
                forced_bos_token_id=self.language_id(target),
                max_new_tokens=MAX_NEW + 1,
                num_return_sequences=n,
                output_scores=True,
                return_dict_in_generate=True,
                **kwargs,
            )
        scores = out.sequences_scores.tolist() if n > 1 or kwargs.get("num_beams", 1) > 1 else [0.0] * len(texts)
        rows = []
        for row, score in zip(out.sequences, scores):
            assert row[1] == self.language_id(target)
            ids = [t for t in row[2:].tolist() if t != self.hf.config.pad_token_id]
            rows.append((ids[:-1] if ids and ids[-1] == self.hf.config.eos_token_id else ids, score))
        return [rows[i : i + n] for i in range(0, len(rows), n)]
