"""sentence-T5 and GTR-T5 checkpoints (a sentence-transformers directory whose Transformer is a T5
encoder: T5EncoderModel's weights, mean pooling, a Dense layer without bias, Normalize) as our embedding
model: the encoder as the T5 importer reads it, the modules after it as sentence-transformers applies them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from safetensors import safe_open

from model.architecture.transformer import EmbeddingModel
from model.families.marian.importer import safetensors_file
from model.families.sentence_transformers import modules_of, pooled_settings
from model.families.tokenizer_json import require_tokenizer, save_with_tokenizer
from modeldir.config import ModelConfig

from .importer import FAMILIES, T5ImportError, encoder_fields, read_t5_config, rename


def is_sentence_t5(source: Path, hf: dict) -> bool:
    """A T5-family config.json in a sentence-transformers directory (its modules.json)."""
    return hf.get("model_type") in FAMILIES and bool(modules_of(source))


def sentence_t5_config(source: Path) -> tuple[ModelConfig, dict]:
    """The encoder's config with sentence-transformers' pooling, Dense layers, normalisation, truncation and
    prompts; and the Dense layers' parameters."""
    hf = read_t5_config(source)
    encoder = ModelConfig(task="embedding", **encoder_fields(hf), eos_id=hf.get("eos_token_id", 1))
    fields, dense = pooled_settings(source, encoder.d_model)
    return dataclasses.replace(encoder, **fields), dense


def import_sentence_t5(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a sentence-T5 or GTR-T5 directory into our model directory (its tokenizer.json copied)."""
    source = Path(source)
    if modules_of(source)[0].get("path", "") != "":
        raise T5ImportError(f"{source}: the Transformer module in a folder of its own is not supported")
    require_tokenizer(source, T5ImportError, "transformers' T5Tokenizer")
    config, state = sentence_t5_config(source)
    with safe_open(str(safetensors_file(source, T5ImportError)), framework="pt") as f:
        for key in f.keys():
            if key.startswith("decoder.") or key == "lm_head.weight":
                continue  # a whole T5's, of which sentence-transformers loads the encoder alone
            if key == "shared.weight":
                state["encoder.embeddings.tokens.weight"] = f.get_tensor(key).float()
            elif (ours := rename(key, config)) is not None:
                state[ours] = f.get_tensor(key).float()
    model = EmbeddingModel(config)
    wanted = set(model.state_dict())
    if missing := sorted(wanted - set(state)):
        raise T5ImportError(f"{source}: the checkpoint lacks our {', '.join(missing)}")
    if extra := sorted(set(state) - wanted):
        raise T5ImportError(f"{source}: unexpected tensors {', '.join(extra)}")
    model.load_state_dict(state, strict=True)
    return save_with_tokenizer(model.eval(), source, out_dir, name, T5ImportError)
