"""openai-whisper, the reference for word timestamps: its own Whisper module (whisper/model.py) holding the
weights of an attnserve model directory, with the directory's alignment heads, and its timing.py's
add_word_timestamps run on one window as its transcribe() runs it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

# attnserve's names of a layer's parts -> openai-whisper's.
PARTS = {
    "self_attention.w_q": "attn.query",
    "self_attention.w_k": "attn.key",
    "self_attention.w_v": "attn.value",
    "self_attention.w_o": "attn.out",
    "self_attention_norm": "attn_ln",
    "cross_attention.w_q": "cross_attn.query",
    "cross_attention.w_k": "cross_attn.key",
    "cross_attention.w_v": "cross_attn.value",
    "cross_attention.w_o": "cross_attn.out",
    "cross_attention_norm": "cross_attn_ln",
    "feed_forward.w_1": "mlp.0",
    "feed_forward.w_2": "mlp.2",
    "feed_forward_norm": "mlp_ln",
}
WHOLE = {
    "encoder.embeddings.conv1": "encoder.conv1",
    "encoder.embeddings.conv2": "encoder.conv2",
    "encoder.final_norm": "encoder.ln_post",
    "decoder.embeddings.tokens": "decoder.token_embedding",
    "decoder.final_norm": "decoder.ln",
}


def openai_name(name: str) -> str:
    if name == "decoder.embeddings.positions.weight":
        return "decoder.positional_embedding"
    for ours, theirs in WHOLE.items():
        if name.startswith(ours + "."):
            return theirs + name[len(ours) :]
    stack, _, index, rest = name.split(".", 3)
    part, _, kind = rest.rpartition(".")
    return f"{stack}.blocks.{index}.{PARTS[part]}.{kind}"


def openai_model(model_dir: Path):
    """The directory's weights in openai-whisper's Whisper, float32, its alignment heads set."""
    from whisper.model import ModelDimensions, Whisper

    config = json.loads((model_dir / "config.json").read_text())["model"]
    heads, layers = config["n_heads"], config["n_decoder_layers"]
    dims = ModelDimensions(
        n_mels=config["n_mels"],
        n_audio_ctx=config["max_source_positions"],
        n_audio_state=config["d_model"],
        n_audio_head=heads,
        n_audio_layer=config["n_encoder_layers"],
        n_vocab=config["vocab_size"],
        n_text_ctx=config["max_positions"],
        n_text_state=config["d_model"],
        n_text_head=heads,
        n_text_layer=layers,
    )
    model = Whisper(dims)
    weights = load_file(model_dir / "model.safetensors")
    state = {}
    for name, tensor in weights.items():
        if name.endswith("self_attention.w_k.bias") or name.endswith("cross_attention.w_k.bias"):
            assert not tensor.any(), f"{name}: Whisper's keys have no bias"
            continue
        state[openai_name(name)] = tensor
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) == {"encoder.positional_embedding"}, (missing, unexpected)
    chosen = torch.zeros(layers, heads, dtype=torch.bool)
    for layer, head in config["whisper"]["alignment_heads"]:
        chosen[layer, head] = True
    model.register_buffer("alignment_heads", chosen.to_sparse(), persistent=False)
    return model.eval()


def words_by_openai(model, window: np.ndarray, frames: int, segments: list[dict], last_speech: float) -> list[dict]:
    """add_word_timestamps on one window's segments (seek, start, end, tokens), for English: the segments
    with their words, and their edges as it moves them."""
    from whisper.timing import add_word_timestamps
    from whisper.tokenizer import get_tokenizer

    tokenizer = get_tokenizer(False)
    segments = [dict(s) for s in segments]
    mel = torch.from_numpy(window)
    add_word_timestamps(
        segments=segments,
        model=model,
        tokenizer=tokenizer,
        mel=mel,
        num_frames=frames,
        last_speech_timestamp=last_speech,
    )
    return segments
