"""The multilingual families' checkpoints as our Seq2SeqModel: M2M100 and NLLB-200 (transformers'
model_type "m2m_100": the same architecture) and mBART-50 ("mbart"); config.json read into a
ModelConfig, the safetensors tensors into our parameter names.

Both are pre-norm with a LayerNorm closing each stack and one token table for encoder, decoder and
output layer. M2M100/NLLB: token embeddings scaled by sqrt(d_model), no bias on the logits, fairseq's
sinusoidal positions (modelbuild/transformer.py `fairseq_sinusoid_table`) counted from pad_id + 1.
mBART: learned positions counted from 2, a LayerNorm on the embeddings (layernorm_embedding), a bias on
the logits (final_logits_bias). The decoder starts from eos; the target language's code is the first
token generated, forced per request (the multilingual issue's next part, with the tokenizers).
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import safe_open

from modeldir.config import ModelConfig

from .import_marian import (
    HF_ACTIVATIONS,
    MarianImportError,
    _token_tables,
    generation_defaults,
    stack_fields,
    stack_problems,
)
from .import_marian import rename as rename_layer
from .transformer import Seq2SeqModel

# Per stack: its closing LayerNorm, and mBART's embedding LayerNorm and learned positions.
STACK_PARTS = {
    f"model.{stack}.{theirs}": f"{stack}.{ours}"
    for stack in ("encoder", "decoder")
    for theirs, ours in (
        ("layer_norm", "final_norm"),
        ("layernorm_embedding", "embeddings.norm"),
        ("embed_positions", "embeddings.positions"),
    )
}
FAMILIES = ("m2m_100", "mbart")
TABLES = {
    "model.shared.weight",
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
}


class MultilingualImportError(MarianImportError):
    """An M2M100, NLLB or mBART checkpoint this importer cannot take, with the reason."""


def multilingual_config(source: Path) -> ModelConfig:
    path = Path(source) / "config.json"
    hf = json.loads(path.read_text())
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise MultilingualImportError(f"{path}: model_type is {family!r}, not one of {', '.join(FAMILIES)}")
    generation_path = Path(source) / "generation_config.json"
    generation = {**hf, **(json.loads(generation_path.read_text()) if generation_path.is_file() else {})}
    problems = []
    if hf.get("activation_function", "relu") not in HF_ACTIVATIONS:
        problems.append(f"activation_function {hf['activation_function']!r}")
    problems += stack_problems(hf)
    if hf.get("tie_word_embeddings", True) is False:
        problems.append("an output layer apart from the token table (tie_word_embeddings false)")
    eos = generation.get("eos_token_id", 2)
    if isinstance(eos, list):
        problems.append(f"several eos tokens {eos}")
    forced = generation.get("forced_eos_token_id")
    if forced not in (None, eos):
        problems.append(f"forced_eos_token_id {forced} that is not eos {eos}")
    if problems:
        raise MultilingualImportError(f"{source}: not supported: " + "; ".join(problems))
    pad, mbart = hf["pad_token_id"], family == "mbart"
    return ModelConfig(
        task="seq2seq",
        **stack_fields(hf),
        positions="learned" if mbart else "sinusoidal_fairseq",
        position_offset=2 if mbart else pad + 1,  # mBART's offset is 2 whatever its pad token
        norm_placement="pre",
        activation=HF_ACTIVATIONS[hf.get("activation_function", "relu")],
        layer_norm_eps=1e-5,
        embedding_norm=mbart,
        scale_embeddings=bool(hf.get("scale_embedding", not mbart)),
        tie_output=True,
        output_bias=mbart,
        pad_id=pad,
        bos_id=hf.get("decoder_start_token_id") or eos,  # mBART-50's config leaves it to generation: eos
        eos_id=eos,
        forced_eos=forced is not None,
        **generation_defaults(generation),
    )


def rename(name: str) -> str | None:
    """Our name for a checkpoint tensor; None for the token tables (placed apart)."""
    if name in TABLES:
        return None
    stack, _, kind = name.rpartition(".")
    if stack in STACK_PARTS:
        return f"{STACK_PARTS[stack]}.{kind}"
    try:
        return rename_layer(name)
    except MarianImportError:
        raise MultilingualImportError(f"unexpected tensor in the checkpoint: {name}") from None


def multilingual_model(source: Path) -> Seq2SeqModel:
    """The checkpoint's config and weights as our model (every tensor placed, none missing)."""
    source = Path(source)
    weights = source / "model.safetensors"
    if not weights.is_file():
        raise MultilingualImportError(f"{weights}: not found (safetensors weights only; pickled ones are never loaded)")
    config = multilingual_config(source)
    state, tables = {}, {}
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            if key in TABLES:
                tables[key] = f.get_tensor(key).float()
            elif (ours := rename(key)) is not None:
                tensor = f.get_tensor(key).float()
                state[ours] = tensor.reshape(-1) if ours == "logits_bias" else tensor  # (1, vocab) in mBART
    token_tables, shared = _token_tables(tables, tie_output=True)
    if not shared:
        raise MultilingualImportError(f"{source}: the encoder's and decoder's token tables differ")
    state.update(token_tables)
    model = Seq2SeqModel(config)
    model.load_state_dict(state, strict=True)
    return model.eval()
