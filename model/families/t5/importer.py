"""T5-family checkpoints (transformers' model_type "t5": T5, T5 v1.1, Flan-T5, MADLAD-400; "mt5"; "umt5") as
our Seq2SeqModel: config.json and generation_config.json read into a ModelConfig, the safetensors tensors
into our parameter names, tokenizer.json copied as it is (ByT5's checkpoints have none: its bytes are its
tokens, modeldir/byte_tokenizer.py).

T5 as modeling_t5 computes it: pre-norm with T5's RMS norm (no mean, no bias) and one closing each stack,
no biases anywhere, scores not scaled by 1 / sqrt(d_kv), no positions in the embeddings but a relative
position bias on self-attention (one table per stack in its first layer; UMT5: one per layer; none in
cross-attention), heads of d_kv each (their total may differ from d_model), a ReLU or gated feed-forward,
one token table for encoder and decoder, an LM head of its own where the checkpoint has one, and the
decoder's output times d_model ** -0.5 where the config says (the original T5's). The decoder starts from
decoder_start_token_id (pad in T5's checkpoints; MADLAD-400's 0, whose pad is 1). MADLAD-400's target
tokens (<2de>) in the vocabulary make it a translation model: the target's token put before the source per
request, as Marian's several-target checkpoints take theirs (modeldir/languages.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from safetensors import safe_open

from model.architecture.transformer import Seq2SeqModel
from model.architecture.weights import save_model_dir
from model.families.marian.importer import generation_defaults, safetensors_file
from model.families.multilingual.importer import read_json
from model.families.tokenizer_json import require_tokenizer, save_with_tokenizer
from modeldir.byte_tokenizer import FIRST_SENTINEL
from modeldir.config import ModelConfig
from modeldir.files import BYTE_KIND, TOKENIZER_FILE

FAMILIES = ("t5", "mt5", "umt5")
# feed_forward_proj's activation -> ours: a gated GELU is transformers' gelu_new (tanh), a plain one exact
ACTIVATIONS = {("relu", False): "relu", ("relu", True): "relu", ("gelu", False): "gelu", ("gelu", True): "gelu_tanh"}
ACTIVATIONS |= {("gelu_new", gated): "gelu_tanh" for gated in (False, True)}
ACTIVATIONS |= {("silu", gated): "silu" for gated in (False, True)}

_LAYER = re.compile(r"(encoder|decoder)\.block\.(\d+)\.layer\.(\d)\.(\w+)(?:\.(\w+))?\.weight")
# (stack, sublayer number, module) -> our sublayer; then transformers' projection -> ours
SUBLAYERS = {
    ("encoder", "0", "SelfAttention"): "self_attention",
    ("encoder", "1", "DenseReluDense"): "feed_forward",
    ("decoder", "0", "SelfAttention"): "self_attention",
    ("decoder", "1", "EncDecAttention"): "cross_attention",
    ("decoder", "2", "DenseReluDense"): "feed_forward",
}
NORMS = {("encoder", "0"): "self_attention_norm", ("encoder", "1"): "feed_forward_norm"}
NORMS |= {("decoder", "0"): "self_attention_norm", ("decoder", "1"): "cross_attention_norm"}
NORMS |= {("decoder", "2"): "feed_forward_norm"}
PROJECTIONS = {
    "q": "w_q",
    "k": "w_k",
    "v": "w_v",
    "o": "w_o",
    "wi": "w_1",
    "wi_0": "w_1",
    "wi_1": "w_gate",
    "wo": "w_2",
}


# MADLAD-400's target tokens: <2de>, <2zh_Latn>, ... (the code in between as the checkpoint names it)
TARGET_TOKEN = re.compile(r"<2([A-Za-z]+(?:_[A-Za-z]+)*)>")


class T5ImportError(ValueError):
    """A T5-family checkpoint this importer cannot take, with the reason."""


def _activation(hf: dict) -> tuple[str, bool]:
    """feed_forward_proj ("relu", "gated-gelu", ...) -> (our activation, gated)."""
    proj = hf.get("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = parts[0] == "gated"
    if len(parts) > 2 or (len(parts) == 2 and not gated) or (parts[-1], gated) not in ACTIVATIONS:
        raise T5ImportError(f"feed_forward_proj {proj!r}: relu, gelu, gelu_new or silu, plain or gated")
    return ACTIVATIONS[(parts[-1], gated)], gated


def target_languages(source: Path) -> dict:
    """The ModelConfig fields of a checkpoint whose vocabulary has MADLAD-400's target tokens (<2de> put
    before the source: the target language per request); none where it has fewer than two."""
    tokenizer = read_json(Path(source) / TOKENIZER_FILE)
    vocab = tokenizer.get("model", {}).get("vocab", [])
    pieces = [p[0] for p in vocab] if isinstance(vocab, list) else sorted(vocab, key=vocab.get)
    pieces += [t["content"] for t in sorted(tokenizer.get("added_tokens", []), key=lambda t: t["id"])]
    codes = tuple(dict.fromkeys(m.group(1) for p in pieces if (m := TARGET_TOKEN.fullmatch(p))))
    if len(codes) < 2:
        return {}
    return dict(languages=codes, language_token="<2{}>", target_language="source_prefix")


def byte_tokenizer(source: Path, vocab_size: int) -> dict:
    """The ModelConfig fields of a ByT5 checkpoint (its tokenizer class ByT5Tokenizer, in config.json or
    tokenizer_config.json, and no tokenizer.json): bytes for tokens, the sentinels filling the table after
    them; none for any other checkpoint."""
    source = Path(source)
    classes = {read_json(source / name).get("tokenizer_class") for name in ("config.json", "tokenizer_config.json")}
    if "ByT5Tokenizer" not in classes or (source / TOKENIZER_FILE).is_file():
        return {}
    if vocab_size < FIRST_SENTINEL:
        raise T5ImportError(
            f"{source}: a ByT5 checkpoint of {vocab_size} tokens, fewer than its {FIRST_SENTINEL} bytes"
        )
    return dict(tokenizer=BYTE_KIND)


def read_t5_config(source: Path) -> dict:
    """config.json of a T5-family checkpoint (refused by name when it is not one)."""
    hf = read_json(Path(source) / "config.json")
    if hf.get("model_type") not in FAMILIES:
        raise T5ImportError(
            f"{Path(source) / 'config.json'}: model_type is {hf.get('model_type')!r}, not one of {', '.join(FAMILIES)}"
        )
    return hf


def encoder_fields(hf: dict) -> dict:
    """The ModelConfig fields of T5's encoder stack (and of the decoder's layers, which are alike)."""
    activation, gated = _activation(hf)
    return dict(
        vocab_size=hf["vocab_size"],
        d_model=hf["d_model"],
        d_kv=hf["d_kv"],
        n_heads=hf["num_heads"],
        d_ff=hf["d_ff"],
        n_encoder_layers=hf["num_layers"],
        max_positions=hf.get("n_positions") or 512,  # no table limits it: the length it was trained at
        positions="relative",
        relative_buckets=hf.get("relative_attention_num_buckets", 32),
        relative_max_distance=hf.get("relative_attention_max_distance", 128),
        relative_bias_per_layer=hf["model_type"] == "umt5",
        norm_placement="pre",
        norm="rms",
        layer_norm_eps=hf.get("layer_norm_epsilon", 1e-6),
        activation=activation,
        feed_forward="gated" if gated else "plain",
        linear_bias=False,
        scale_attention=False,
        pad_id=hf.get("pad_token_id", 0),
    )


def t5_config(source: Path) -> ModelConfig:
    source = Path(source)
    hf = read_t5_config(source)
    if hf.get("is_encoder_decoder", True) is False:
        raise T5ImportError(f"{source}: an encoder alone (is_encoder_decoder false): not a text-to-text model")
    generation = {**hf, **read_json(source / "generation_config.json")}
    eos = generation.get("eos_token_id", 1)
    if isinstance(eos, list):
        raise T5ImportError(f"{source}: several eos tokens {eos}")
    pad = hf.get("pad_token_id", 0)
    start = generation.get("decoder_start_token_id")
    with safe_open(str(safetensors_file(source, T5ImportError)), framework="pt") as f:
        own_head = "lm_head.weight" in f.keys()
    return ModelConfig(
        task="seq2seq",
        **encoder_fields(hf),
        n_decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"],
        tie_output=not own_head,
        rescale_output=hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True) is not False),
        bos_id=pad if start is None else start,
        eos_id=eos,
        **generation_defaults(generation),
        **(byte_tokenizer(source, hf["vocab_size"]) or target_languages(source)),
    )


def rename(name: str, config: ModelConfig) -> str | None:
    """Our parameter name for a T5 tensor; None for the stacks' own copies of the token table."""
    if name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
        return None  # transformers' views of shared.weight
    if name == "lm_head.weight":
        return name
    if name.endswith("final_layer_norm.weight"):
        return name.replace("final_layer_norm", "final_norm")
    match = _LAYER.fullmatch(name)
    if match is None:
        raise T5ImportError(f"unexpected tensor in the checkpoint: {name}")
    stack, index, sublayer, module, projection = match.groups()
    if module == "layer_norm" and (stack, sublayer) in NORMS:
        return f"{stack}.layers.{index}.{NORMS[(stack, sublayer)]}.weight"
    if projection == "relative_attention_bias" and (stack, sublayer, module) in SUBLAYERS:
        if not config.relative_bias_per_layer and index != "0":
            raise T5ImportError(f"{name}: a relative position table beyond the first layer (UMT5's layout)")
        return f"{stack}.relative.tables.{index}.weight"
    if (stack, sublayer, module) in SUBLAYERS and projection in PROJECTIONS:
        return f"{stack}.layers.{index}.{SUBLAYERS[(stack, sublayer, module)]}.{PROJECTIONS[projection]}.weight"
    raise T5ImportError(f"unexpected tensor in the checkpoint: {name}")


def t5_model(source: Path) -> Seq2SeqModel:
    """The checkpoint's config and weights as our model (every tensor placed, none missing)."""
    config = t5_config(source)
    state, theirs = {}, {}
    with safe_open(str(safetensors_file(source, T5ImportError)), framework="pt") as f:
        for key in f.keys():
            if key == "shared.weight":
                table = f.get_tensor(key).float()
                state["encoder.embeddings.tokens.weight"] = state["decoder.embeddings.tokens.weight"] = table
            elif (ours := rename(key, config)) is not None:
                state[ours], theirs[ours] = f.get_tensor(key).float(), key
    model = Seq2SeqModel(config)
    wanted = set(model.state_dict())
    if extra := sorted(theirs[name] for name in set(state) - wanted):
        raise T5ImportError(f"{source}: unexpected tensor in the checkpoint: {', '.join(extra)}")
    if missing := sorted(wanted - set(state)):
        raise T5ImportError(f"{source}: the checkpoint lacks our {', '.join(missing)}")
    model.load_state_dict(state, strict=True)
    return model.eval()


def import_t5(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a T5-family checkpoint directory into our model directory (its tokenizer.json copied; ByT5's
    bytes need none)."""
    if byte_tokenizer(source, read_json(Path(source) / "config.json").get("vocab_size", 0)):
        return save_model_dir(t5_model(source), name, out_dir)
    require_tokenizer(source, T5ImportError, "transformers' T5Tokenizer")
    return save_with_tokenizer(t5_model(source), source, out_dir, name, T5ImportError)
