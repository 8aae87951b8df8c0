"""Whisper's checkpoints (transformers' WhisperForConditionalGeneration, model_type "whisper": tiny to
large-v3, .en and multilingual, 80 or 128 mel bins) as our Seq2SeqModel: config.json read into a
ModelConfig, the safetensors tensors into our parameter names.

Whisper is pre-norm with a LayerNorm closing each stack and GELU feed-forwards. The encoder reads log-mel
frames through two 1-D convolutions (model/architecture/transformer.py `AudioEmbeddings`), its positions
a fixed sinusoid table (checked against the checkpoint's copy, not loaded); the decoder has learned
positions (448), no embedding scale, and its token table is the output layer. Its attention has no bias
on the keys: ours is loaded as zeros."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import torch
from safetensors import safe_open

from model.architecture.positions import fairseq_sinusoid_table
from model.architecture.transformer import Seq2SeqModel
from model.architecture.weights import save_model_dir
from model.families.marian.importer import (
    HF_ACTIVATIONS,
    MarianImportError,
    safetensors_file,
    stack_fields,
    stack_problems,
)
from model.families.marian.importer import rename as rename_layer
from modeldir.config import ModelConfig
from modeldir.files import TOKENIZER_FILE
from modeldir.whisper_tokens import WhisperSettings, multilingual_by_vocabulary, read_whisper_settings

ENCODER_STEM = {
    f"model.encoder.{conv}.{kind}": f"encoder.embeddings.{conv}.{kind}"
    for conv in ("conv1", "conv2")
    for kind in ("weight", "bias")
}
STACK_PARTS = {
    "model.encoder.layer_norm.weight": "encoder.final_norm.weight",
    "model.encoder.layer_norm.bias": "encoder.final_norm.bias",
    "model.decoder.layer_norm.weight": "decoder.final_norm.weight",
    "model.decoder.layer_norm.bias": "decoder.final_norm.bias",
    "model.decoder.embed_positions.weight": "decoder.embeddings.positions.weight",
    "model.decoder.embed_tokens.weight": "decoder.embeddings.tokens.weight",
    **ENCODER_STEM,
}
ENCODER_POSITIONS = "model.encoder.embed_positions.weight"
OUTPUT = "proj_out.weight"  # the decoder's token table, tied
_KEY_PROJECTION = re.compile(r"^(model\.(?:encoder|decoder)\.layers\.\d+\.(?:self_attn|encoder_attn))\.k_proj\.weight$")


class WhisperImportError(MarianImportError):
    """A Whisper checkpoint this importer cannot take, with the reason."""


def whisper_config(source: Path) -> ModelConfig:
    path = Path(source) / "config.json"
    hf = json.loads(path.read_text())
    if hf.get("model_type") != "whisper":
        raise WhisperImportError(f"{path}: model_type is {hf.get('model_type')!r}, not 'whisper'")
    problems = []
    if hf.get("activation_function", "gelu") not in HF_ACTIVATIONS:
        problems.append(f"activation_function {hf['activation_function']!r}")
    problems += stack_problems(hf)
    if hf.get("scale_embedding", False):
        problems.append("scaled embeddings (scale_embedding true)")
    if hf.get("tie_word_embeddings", True) is False:
        problems.append("an output layer apart from the token table (tie_word_embeddings false)")
    if problems:
        raise WhisperImportError(f"{source}: not supported: " + "; ".join(problems))
    return ModelConfig(
        task="seq2seq",
        **stack_fields(hf, positions="max_target_positions"),
        positions="learned",
        norm_placement="pre",
        activation=HF_ACTIVATIONS[hf.get("activation_function", "gelu")],
        layer_norm_eps=1e-5,
        share_embeddings=False,
        tie_output=True,
        encoder_input="log_mel",
        n_mels=hf["num_mel_bins"],
        max_source_positions=hf["max_source_positions"],
        pad_id=hf["pad_token_id"],
        bos_id=hf["decoder_start_token_id"],
        eos_id=hf["eos_token_id"],
    )


def rename(name: str) -> str | None:
    """Our name for a checkpoint tensor; None for the tensors read apart (the output layer, tied, and the
    encoder's position table)."""
    if name in (OUTPUT, ENCODER_POSITIONS):
        return None
    if name in STACK_PARTS:
        return STACK_PARTS[name]
    try:
        return rename_layer(name)
    except MarianImportError:
        raise WhisperImportError(f"unexpected tensor in the Whisper checkpoint: {name}") from None


def whisper_model(source: Path) -> Seq2SeqModel:
    """The checkpoint's config and weights as our model (every tensor placed, none missing)."""
    weights = safetensors_file(source, WhisperImportError)
    config = whisper_config(source)
    state = {}
    with safe_open(str(weights), framework="pt") as f:
        keys = set(f.keys())
        for key in keys:
            if (ours := rename(key)) is not None:
                state[ours] = f.get_tensor(key).float()
            if match := _KEY_PROJECTION.match(key):  # Whisper's keys have no bias
                bias_name = rename(f"{match.group(1)}.k_proj.bias")
                state.setdefault(bias_name, torch.zeros(config.d_model))
        if ENCODER_POSITIONS in keys:
            table = f.get_tensor(ENCODER_POSITIONS).float()
            ours = fairseq_sinusoid_table(config.max_source_positions, config.d_model, padding_idx=None)
            if table.shape != ours.shape or not torch.allclose(table, ours, atol=1e-6):
                raise WhisperImportError(f"{source}: the encoder's position table is not Whisper's sinusoids")
        if OUTPUT in keys and not torch.equal(f.get_tensor(OUTPUT), f.get_tensor("model.decoder.embed_tokens.weight")):
            raise WhisperImportError(f"{source}: the output layer is not the decoder's token table")
    model = Seq2SeqModel(config)
    model.load_state_dict(state, strict=True)
    return model.eval()


def default_alignment_heads(n_layers: int, n_heads: int) -> list[list[int]]:
    """OpenAI's choice where a checkpoint names none: every head of the decoder's second half."""
    return [[layer, head] for layer in range(n_layers // 2, n_layers) for head in range(n_heads)]


def whisper_settings(source: Path, config: ModelConfig) -> WhisperSettings:
    """The special tokens from the checkpoint's tokenizer.json, the suppressed tokens, alignment heads and
    whether it is multilingual from its generation_config.json (else config.json, else OpenAI's defaults)."""
    source = Path(source)
    tokenizer_path = source / TOKENIZER_FILE
    if not tokenizer_path.is_file():
        raise WhisperImportError(f"{source}: no tokenizer ({TOKENIZER_FILE})")
    hf = json.loads((source / "config.json").read_text())
    generation_path = source / "generation_config.json"
    generation = {**hf, **(json.loads(generation_path.read_text()) if generation_path.is_file() else {})}
    return settings_with_tokenizer(
        tokenizer_path,
        config,
        multilingual=generation.get("is_multilingual", multilingual_by_vocabulary(config.vocab_size)),
        suppress_ids=generation.get("suppress_tokens"),
        begin_suppress_ids=generation.get("begin_suppress_tokens"),
        alignment_heads=generation.get("alignment_heads"),
    )


def settings_with_tokenizer(
    tokenizer_path: Path, config: ModelConfig, *, multilingual: bool, suppress_ids, begin_suppress_ids, alignment_heads
) -> WhisperSettings:
    """The settings of a checkpoint's lists (None: none; alignment heads: OpenAI's default) and of its
    tokenizer.json's special tokens, which are refused by name where they are missing or out of place."""
    tokenizer = json.loads(tokenizer_path.read_text(encoding="utf-8"))
    try:
        return read_whisper_settings(
            tokenizer,
            config.vocab_size,
            multilingual=multilingual,
            suppress_ids=suppress_ids or [],
            begin_suppress_ids=begin_suppress_ids or [],
            alignment_heads=alignment_heads or default_alignment_heads(config.n_decoder_layers, config.n_heads),
        )
    except ValueError as error:
        raise WhisperImportError(f"{tokenizer_path}: {error}") from None


def with_whisper_settings(model: Seq2SeqModel, settings: WhisperSettings) -> Seq2SeqModel:
    """The model's config with its Whisper settings, its start, end and padding tokens theirs, and what it
    never generates as its suppressed ids."""
    model.config = dataclasses.replace(
        model.config,
        whisper=settings,
        bos_id=settings.start_of_transcript_id,
        eos_id=settings.end_of_text_id,
        pad_id=settings.end_of_text_id,
        suppressed_ids=settings.never_generated_ids,
    )
    return model


def import_whisper(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a transformers Whisper checkpoint directory into our model directory (tokenizer.json copied)."""
    source = Path(source)
    model = whisper_model(source)
    model = with_whisper_settings(model, whisper_settings(source, model.config))
    out_dir = save_model_dir(model, name, out_dir)
    shutil.copyfile(source / TOKENIZER_FILE, Path(out_dir) / TOKENIZER_FILE)
    return out_dir
