"""BART checkpoints (transformers' model_type "bart": bart-base and bart-large, bart-large-cnn, distilbart)
as our Seq2SeqModel: config.json and generation_config.json read into a ModelConfig, the safetensors
tensors into our parameter names, tokenizer.json copied as it is.

BART as modeling_bart computes it: post-norm (LayerNorm after each residual sum), a LayerNorm on the
embeddings (layernorm_embedding) and none closing the stacks, learned positions counted from 2, token
embeddings scaled by sqrt(d_model) only where scale_embedding says so, one token table for encoder,
decoder and output layer, a bias on the logits (final_logits_bias). The decoder starts from
decoder_start_token_id (eos); forced_bos_token_id (bos) is the first token generated, forced.

Keys that older configs carry and today's modeling_bart ignores (normalize_before, add_final_layer_norm,
static_position_embeddings) are ignored here too: the tensors say what there is, and one that BART has
not is refused by name.
"""

from __future__ import annotations

from pathlib import Path

from model.architecture.transformer import Seq2SeqModel
from model.families.marian.importer import (
    HF_ACTIVATIONS,
    MarianImportError,
    generation_defaults,
    stack_fields,
)
from model.families.multilingual.importer import read_json, tied_model, tied_problems
from model.families.tokenizer_json import require_tokenizer, save_with_tokenizer
from modeldir.config import ModelConfig

FAMILY = "bart"


class BartImportError(MarianImportError):
    """A BART checkpoint this importer cannot take, with the reason."""


def bart_config(source: Path) -> ModelConfig:
    source = Path(source)
    hf = read_json(source / "config.json")
    if hf.get("model_type") != FAMILY:
        raise BartImportError(f"{source / 'config.json'}: model_type is {hf.get('model_type')!r}, not {FAMILY!r}")
    generation = {**hf, **read_json(source / "generation_config.json")}
    problems = tied_problems(hf, generation, "gelu")
    eos = generation.get("eos_token_id", 2)
    forced_eos = generation.get("forced_eos_token_id")
    if problems:
        raise BartImportError(f"{source}: not supported: " + "; ".join(problems))
    return ModelConfig(
        task="seq2seq",
        **stack_fields(hf),
        positions="learned",
        position_offset=2,
        norm_placement="post",
        activation=HF_ACTIVATIONS[hf.get("activation_function", "gelu")],
        layer_norm_eps=1e-5,
        embedding_norm=True,
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        tie_output=True,
        output_bias=True,
        pad_id=hf.get("pad_token_id", 1),
        bos_id=eos if generation.get("decoder_start_token_id") is None else generation["decoder_start_token_id"],
        eos_id=eos,
        forced_eos=forced_eos is not None,
        forced_bos_id=generation.get("forced_bos_token_id"),
        **generation_defaults(generation),
    )


def bart_model(source: Path) -> Seq2SeqModel:
    """The checkpoint's config and weights as our model."""
    return tied_model(source, bart_config(source), BartImportError)


def import_bart(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a BART checkpoint directory into our model directory (its tokenizer.json copied)."""
    require_tokenizer(source, BartImportError, "transformers' fast tokenizer")
    return save_with_tokenizer(bart_model(source), source, out_dir, name, BartImportError)
