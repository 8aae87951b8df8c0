"""A model directory on disk: config.json + model.safetensors (+ tokenizer.json), and the model class its
config names. Never pickle."""

from __future__ import annotations

import shutil
from pathlib import Path

from safetensors.torch import load_model, save_model

from model.architecture.encoder_decoder_classifier import EncoderDecoderClassifier
from model.architecture.transformer import EmbeddingModel, Seq2SeqModel
from modeldir.config import ModelConfig, load_config, save_config
from modeldir.files import TOKENIZER_FILE, WEIGHTS_FILE


def build_model(config: ModelConfig) -> EmbeddingModel | Seq2SeqModel:
    if config.task == "seq2seq":
        return Seq2SeqModel(config)
    return EncoderDecoderClassifier(config) if config.classifier_input == "decoder_last_eos" else EmbeddingModel(config)


def save_model_dir(
    model: EmbeddingModel | Seq2SeqModel, name: str, out_dir: Path, tokenizer_json: Path | None = None
) -> Path:
    """Write config.json, model.safetensors and (copied from tokenizer_json) tokenizer.json."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(model.config, out_dir, name)
    # save_model keeps one copy of tensors that several modules share (tied embeddings).
    save_model(model, str(out_dir / WEIGHTS_FILE))
    if tokenizer_json is not None and Path(tokenizer_json).resolve() != (out_dir / TOKENIZER_FILE).resolve():
        shutil.copyfile(tokenizer_json, out_dir / TOKENIZER_FILE)
    return out_dir


def load_model_dir(model_dir: Path) -> tuple[str, ModelConfig, EmbeddingModel | Seq2SeqModel]:
    """-> (name, config, model in eval mode) from a model directory."""
    name, config = load_config(model_dir)
    model = build_model(config)
    load_model(model, str(Path(model_dir) / WEIGHTS_FILE), strict=True)
    return name, config, model.eval()
