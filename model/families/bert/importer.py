"""Import a BERT-family sentence-embedding checkpoint (sentence-transformers layout) into a model directory.

The source directory holds config.json (a Hugging Face BertConfig or XLMRobertaConfig), model.safetensors,
tokenizer.json, modules.json and 1_Pooling/config.json, as all-MiniLM-L6-v2 and multilingual-e5 do. BERT is
the paper's encoder with post-norm residuals, learned positions, token-type embeddings and a LayerNorm
after the embeddings. XLM-RoBERTa (multilingual-e5, bge-m3, paraphrase-multilingual) is the same encoder
with fairseq's positions, counted from padding_idx + 1 (so its longest input is max_position_embeddings -
padding_idx - 1 tokens), a single token type added to every token, and <s> ... </s> for [CLS] ... [SEP].
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from safetensors import safe_open
from tokenizers import Tokenizer

from model.architecture.transformer import EmbeddingModel
from model.architecture.weights import save_model_dir
from model.families.sentence_transformers import pooled_settings
from modeldir.config import ModelConfig
from modeldir.files import TOKENIZER_FILE

# Hugging Face BertModel name -> ours; {i} is the layer index.
BERT_NAMES = {
    "embeddings.word_embeddings.weight": "encoder.embeddings.tokens.weight",
    "embeddings.position_embeddings.weight": "encoder.embeddings.positions.weight",
    "embeddings.token_type_embeddings.weight": "encoder.embeddings.token_types.weight",
    "embeddings.LayerNorm.{p}": "encoder.embeddings.norm.{p}",
    "encoder.layer.{i}.attention.self.query.{p}": "encoder.layers.{i}.self_attention.w_q.{p}",
    "encoder.layer.{i}.attention.self.key.{p}": "encoder.layers.{i}.self_attention.w_k.{p}",
    "encoder.layer.{i}.attention.self.value.{p}": "encoder.layers.{i}.self_attention.w_v.{p}",
    "encoder.layer.{i}.attention.output.dense.{p}": "encoder.layers.{i}.self_attention.w_o.{p}",
    "encoder.layer.{i}.attention.output.LayerNorm.{p}": "encoder.layers.{i}.self_attention_norm.{p}",
    "encoder.layer.{i}.intermediate.dense.{p}": "encoder.layers.{i}.feed_forward.w_1.{p}",
    "encoder.layer.{i}.output.dense.{p}": "encoder.layers.{i}.feed_forward.w_2.{p}",
    "encoder.layer.{i}.output.LayerNorm.{p}": "encoder.layers.{i}.feed_forward_norm.{p}",
}
# Present in BERT checkpoints, not used by a sentence embedding.
IGNORED = re.compile(r"^(embeddings\.position_ids|embeddings\.token_type_ids|pooler\..*)$")
FAMILIES = ("bert", "xlm-roberta")  # config.json's model_type
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
}


def _pattern(template: str) -> re.Pattern:
    escaped = re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{p\}", r"(?P<p>weight|bias)")
    return re.compile(f"^{escaped}$")


_RULES = [(_pattern(source), target) for source, target in BERT_NAMES.items()]


def rename(bert_name: str) -> str | None:
    """Our parameter name for a BertModel parameter; None for ones a sentence embedding does not use."""
    name = bert_name.removeprefix("bert.").removeprefix("roberta.")
    # LayerNorm's parameters under TensorFlow's names, as transformers 5.3 saves BERT's (it reads both).
    name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))
    if IGNORED.match(name):
        return None
    for pattern, target in _RULES:
        match = pattern.match(name)
        if match:
            return target.format(**match.groupdict())
    raise ValueError(f"unexpected parameter in BERT checkpoint: {bert_name}")


def bert_settings(source: Path, hf: dict) -> ModelConfig:
    """The encoder as config.json describes it (BERT or XLM-RoBERTa), pooling and truncation left default."""
    family = hf.get("model_type", "bert")
    if family not in FAMILIES:
        raise ValueError(f"{source}: model_type {family!r} is not supported (one of {', '.join(FAMILIES)})")
    roberta = family == "xlm-roberta"
    # XLM-RoBERTa counts positions from padding_idx + 1: the table's first rows are never read.
    offset = hf["pad_token_id"] + 1 if roberta else 0
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{source}: position_embedding_type {hf['position_embedding_type']!r} is not supported")
    if hf["hidden_act"] not in HF_ACTIVATIONS:
        raise ValueError(f"{source}: activation {hf['hidden_act']!r} is not supported")
    tokenizer = Tokenizer.from_file(str(source / TOKENIZER_FILE))
    return ModelConfig(
        task="embedding",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        n_encoder_layers=hf["num_hidden_layers"],
        max_positions=hf["max_position_embeddings"] - offset,
        positions="learned",
        position_offset=offset,
        norm_placement="post",
        activation=HF_ACTIVATIONS[hf["hidden_act"]],
        layer_norm_eps=hf["layer_norm_eps"],
        embedding_norm=True,
        type_vocab_size=hf["type_vocab_size"],
        pad_id=hf.get("pad_token_id", 0),
        bos_id=tokenizer.token_to_id("<s>" if roberta else "[CLS]"),
        eos_id=tokenizer.token_to_id("</s>" if roberta else "[SEP]"),
    )


def bert_config(source: Path) -> tuple[ModelConfig, dict]:
    """A sentence-embedding checkpoint's config (the encoder, and sentence-transformers' pooling, Dense
    layers, normalisation, truncation and prompts) and its Dense layers' parameters."""
    hf = json.loads((source / "config.json").read_text())
    encoder = bert_settings(source, hf)
    # An unset max_input_tokens (None) is the position table's length, as ModelConfig makes it.
    fields, dense = pooled_settings(source, encoder.d_model)
    return dataclasses.replace(encoder, **fields), dense


def import_sentence_transformer(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a sentence-transformers BERT or XLM-RoBERTa checkpoint directory into our model directory,
    with bge-m3's sparse and ColBERT heads where the checkpoint has them."""
    from model.families.xlm_roberta.bge_m3_heads import read_heads

    source = Path(source)
    require_safetensors(source)
    config, dense = bert_config(source)
    fields, heads = read_heads(source, config.d_model)
    return save_encoder(source, dataclasses.replace(config, **fields), rename, out_dir, name, {**heads, **dense})


def require_safetensors(source: Path) -> None:
    """Weights are read from safetensors only: a pickle may run code when loaded."""
    weights = source / "model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"{weights} not found (pickled pytorch_model.bin checkpoints are not loaded)")


def save_encoder(source: Path, config: ModelConfig, renamed, out_dir: Path, name: str, heads=None) -> Path:
    """The checkpoint's weights (renamed(their name) -> ours, or None: unused), and the parameters of heads
    read from files of their own, in our encoder of `config`, saved with its tokenizer as a model directory."""
    model = EmbeddingModel(config)
    state = dict(heads or {})
    with safe_open(str(source / "model.safetensors"), framework="pt") as f:
        for key in f.keys():
            ours = renamed(key)
            if ours is not None:
                state[ours] = f.get_tensor(key)
    model.load_state_dict(state, strict=True)

    # Truncation and padding are the server's decision, made explicitly at load time: drop the
    # fixed padding and truncation (128) that this tokenizer.json carries.
    tokenizer = Tokenizer.from_file(str(source / TOKENIZER_FILE))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    out_dir = save_model_dir(model.eval(), name, out_dir)
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    return out_dir
