"""Random Whisper checkpoints in Hugging Face's layout, for tests and benchmarks: no checkpoint can be
downloaded here, so transformers builds a WhisperForConditionalGeneration of the shape asked for with
random weights and saves it as it saves any. Needs transformers (the dev extra)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

LAYER_GAIN = 3.0  # weights larger than transformers' init (std 0.02), so that the logits differ enough to test


@dataclass(frozen=True)
class WhisperShape:
    d_model: int = 64
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 128
    n_mels: int = 80
    vocab_size: int = 512
    max_target_positions: int = 448


def random_whisper_checkpoint(out_dir: Path, shape: WhisperShape = WhisperShape(), seed: int = 0) -> Path:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(seed)
    config = WhisperConfig(
        vocab_size=shape.vocab_size,
        num_mel_bins=shape.n_mels,
        d_model=shape.d_model,
        encoder_attention_heads=shape.heads,
        decoder_attention_heads=shape.heads,
        encoder_layers=shape.encoder_layers,
        decoder_layers=shape.decoder_layers,
        encoder_ffn_dim=shape.d_ff,
        decoder_ffn_dim=shape.d_ff,
        max_source_positions=1500,
        max_target_positions=shape.max_target_positions,
        pad_token_id=shape.vocab_size - 1,
        bos_token_id=shape.vocab_size - 2,
        eos_token_id=shape.vocab_size - 2,
        decoder_start_token_id=shape.vocab_size - 3,
    )
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" in name and "encoder" in name:
                continue  # Whisper's fixed sinusoids
            if parameter.ndim > 1:
                parameter.mul_(LAYER_GAIN)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.1)
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir
