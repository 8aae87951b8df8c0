"""Pegasus checkpoints (transformers' model_type "pegasus": pegasus-large, pegasus-xsum,
pegasus-cnn_dailymail) as our Seq2SeqModel: config.json and generation_config.json read into a
ModelConfig, the safetensors tensors into our parameter names, tokenizer.json copied as it is.

Pegasus as modeling_pegasus computes it: BART's layout made pre-norm, a LayerNorm closing each stack and
none on the embeddings, token embeddings x sqrt(d_model) where scale_embedding says so (every published
checkpoint), Marian's sinusoidal positions (sines, then cosines) counted from 0, one token table for
encoder, decoder and output layer, a bias on the logits (final_logits_bias). The decoder starts from the
pad token (decoder_start_token_id 0) and ends at eos (1), forced last; the checkpoint's beam defaults
(pegasus-xsum: 8 beams, length penalty 0.6) are a request's defaults.
"""

from __future__ import annotations

import re
from pathlib import Path

from safetensors import safe_open

from model.architecture.transformer import Seq2SeqModel
from model.families.marian.importer import (
    HF_ACTIVATIONS,
    MarianImportError,
    check_sinusoid_positions,
    generation_defaults,
    safetensors_file,
    stack_fields,
)
from model.families.multilingual.importer import read_json, tied_model, tied_problems
from model.families.tokenizer_json import require_tokenizer, save_with_tokenizer
from modeldir.config import ModelConfig

FAMILY = "pegasus"
POSITIONS = re.compile(r"^model\.(encoder|decoder)\.embed_positions\.weight$")


class PegasusImportError(MarianImportError):
    """A Pegasus checkpoint this importer cannot take, with the reason."""


def pegasus_config(source: Path) -> ModelConfig:
    source = Path(source)
    hf = read_json(source / "config.json")
    if hf.get("model_type") != FAMILY:
        raise PegasusImportError(f"{source / 'config.json'}: model_type is {hf.get('model_type')!r}, not {FAMILY!r}")
    generation = {**hf, **read_json(source / "generation_config.json")}
    problems = tied_problems(hf, generation, "gelu")
    if problems:
        raise PegasusImportError(f"{source}: not supported: " + "; ".join(problems))
    eos, pad = generation.get("eos_token_id", 1), hf.get("pad_token_id", 0)
    start = generation.get("decoder_start_token_id")
    return ModelConfig(
        task="seq2seq",
        **stack_fields(hf),
        positions="sinusoidal_split",
        norm_placement="pre",
        activation=HF_ACTIVATIONS[hf.get("activation_function", "gelu")],
        layer_norm_eps=1e-5,
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        tie_output=True,
        output_bias=True,
        pad_id=pad,
        bos_id=pad if start is None else start,
        eos_id=eos,
        forced_eos=generation.get("forced_eos_token_id") is not None,
        **generation_defaults(generation),
    )


def pegasus_model(source: Path) -> Seq2SeqModel:
    """The checkpoint's config and weights as our model; a stored position table must be the sinusoid the
    config makes (ours is computed, not stored)."""
    positions = {}
    with safe_open(str(safetensors_file(source, PegasusImportError)), framework="pt") as f:
        for key in filter(POSITIONS.match, f.keys()):
            check_sinusoid_positions(key, f.get_tensor(key), PegasusImportError)
            positions[key] = None
    return tied_model(source, pegasus_config(source), PegasusImportError, head=positions)


def import_pegasus(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a Pegasus checkpoint directory into our model directory (its tokenizer.json copied)."""
    require_tokenizer(source, PegasusImportError, "transformers' fast tokenizer")
    return save_with_tokenizer(pegasus_model(source), source, out_dir, name, PegasusImportError)
