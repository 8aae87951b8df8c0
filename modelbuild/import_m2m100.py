"""An M2M100 or NLLB-200 checkpoint (transformers' model_type "m2m_100": the same architecture) as our
Seq2SeqModel: its config.json read into a ModelConfig, its safetensors tensors into our parameter names.

The architecture: pre-norm residuals with a LayerNorm closing each stack, token embeddings scaled by
sqrt(d_model), one token table for encoder, decoder and output layer, no bias on the logits, and
fairseq's sinusoidal positions (modelbuild/transformer.py `fairseq_sinusoid_table`), counted from
pad_id + 1. The decoder starts from eos; the target language's code is the first token generated,
forced per request (the multilingual issue's next part, with the tokenizers).
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import safe_open

from modeldir.config import ModelConfig

from .import_marian import HF_ACTIVATIONS, MarianImportError, _token_tables
from .import_marian import rename as rename_layer
from .transformer import Seq2SeqModel

STACK_NORMS = {"model.encoder.layer_norm": "encoder.final_norm", "model.decoder.layer_norm": "decoder.final_norm"}
TABLES = {"model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
          "lm_head.weight"}  # fmt: skip


class M2M100ImportError(MarianImportError):
    """An M2M100/NLLB checkpoint this importer cannot take, with the reason."""


def m2m100_config(source: Path) -> ModelConfig:
    path = Path(source) / "config.json"
    hf = json.loads(path.read_text())
    if hf.get("model_type") != "m2m_100":
        raise M2M100ImportError(f"{path}: model_type is {hf.get('model_type')!r}, not 'm2m_100'")
    generation_path = Path(source) / "generation_config.json"
    generation = {**hf, **(json.loads(generation_path.read_text()) if generation_path.is_file() else {})}
    problems = []
    if hf.get("activation_function", "relu") not in HF_ACTIVATIONS:
        problems.append(f"activation_function {hf['activation_function']!r}")
    heads = hf["encoder_attention_heads"]
    if hf["decoder_attention_heads"] != heads or hf["decoder_ffn_dim"] != hf["encoder_ffn_dim"]:
        problems.append("different encoder and decoder widths")
    if hf.get("tie_word_embeddings", True) is False:
        problems.append("an output layer apart from the token table (tie_word_embeddings false)")
    eos = generation.get("eos_token_id", 2)
    if isinstance(eos, list):
        problems.append(f"several eos tokens {eos}")
    if problems:
        raise M2M100ImportError(f"{source}: not supported: " + "; ".join(problems))
    early_stopping = generation.get("early_stopping", False)
    pad = hf["pad_token_id"]
    return ModelConfig(
        task="seq2seq",
        vocab_size=hf["vocab_size"],
        d_model=hf["d_model"],
        n_heads=heads,
        d_ff=hf["encoder_ffn_dim"],
        n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"],
        max_positions=hf["max_position_embeddings"],
        positions="sinusoidal_fairseq",
        position_offset=pad + 1,
        norm_placement="pre",
        activation=HF_ACTIVATIONS[hf.get("activation_function", "relu")],
        layer_norm_eps=1e-5,
        scale_embeddings=bool(hf.get("scale_embedding", True)),
        tie_output=True,
        output_bias=False,
        pad_id=pad,
        bos_id=hf["decoder_start_token_id"],
        eos_id=eos,
        num_beams=int(generation.get("num_beams", 1)),
        length_penalty=float(generation.get("length_penalty", 1.0)),
        early_stopping=early_stopping if early_stopping == "never" else str(bool(early_stopping)).lower(),
    )


def rename(name: str) -> str | None:
    """Our name for a checkpoint tensor; None for the token tables (placed apart)."""
    if name in TABLES:
        return None
    stack, _, kind = name.rpartition(".")
    if stack in STACK_NORMS:
        return f"{STACK_NORMS[stack]}.{kind}"
    try:
        return rename_layer(name)
    except MarianImportError:
        raise M2M100ImportError(f"unexpected tensor in the M2M100 checkpoint: {name}") from None


def m2m100_model(source: Path) -> Seq2SeqModel:
    """The checkpoint's config and weights as our model (every tensor placed, none missing)."""
    source = Path(source)
    weights = source / "model.safetensors"
    if not weights.is_file():
        raise M2M100ImportError(f"{weights}: not found (safetensors weights only; pickled ones are never loaded)")
    config = m2m100_config(source)
    state, tables = {}, {}
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            if key in TABLES:
                tables[key] = f.get_tensor(key).float()
            elif (ours := rename(key)) is not None:
                state[ours] = f.get_tensor(key).float()
    token_tables, shared = _token_tables(tables, tie_output=True)
    if not shared:
        raise M2M100ImportError(f"{source}: the encoder's and decoder's token tables differ")
    state.update(token_tables)
    model = Seq2SeqModel(config)
    model.load_state_dict(state, strict=True)
    return model.eval()
