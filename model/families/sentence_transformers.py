"""What a sentence-transformers directory says after its Transformer module, as ModelConfig fields and the
parameters of its Dense layers: pooling, Dense layers, normalisation, truncation and prompts, read as
sentence-transformers (and PyLate, whose ColBERT stacks are Dense layers too) apply them."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from modeldir.config import PooledDense

# The packages whose modules these are: a module's kind is its class name (sentence-transformers 6 moved
# them: sentence_transformers.models.Dense is sentence_transformers.base.modules.dense.Dense there).
PACKAGES = ("sentence_transformers", "pylate")
# Dense's activation_function, as it is saved, -> ours.
ACTIVATIONS = {"torch.nn.modules.linear.Identity": "identity", "torch.nn.modules.activation.Tanh": "tanh"}


def kind_of(module: dict) -> str:
    """A module's class name (Transformer, Pooling, Dense, Normalize, ...), its package's name before it
    where the package is not one of ours to read."""
    package, name = module["type"].split(".", 1)[0], module["type"].rsplit(".", 1)[-1]
    return name if package in PACKAGES else module["type"]


def modules_of(source: Path) -> list[dict]:
    """modules.json's modules in their order (none where the directory has no modules.json)."""
    path = Path(source) / "modules.json"
    return sorted(json.loads(path.read_text()), key=lambda m: m.get("idx", 0)) if path.exists() else []


def dense_layers(
    source: Path, modules: list[dict], width: int, prefix: str, reads: str | None = None
) -> tuple[dict, dict[str, torch.Tensor]]:
    """Dense modules taking `width` features -> (their widths, biases and activations; their parameters as
    {prefix}.{index}.weight and .bias). reads: the input each must name where it names one
    (sentence_embedding: the pooled vector; None: not asked, as PyLate applies its to every token)."""
    dims, bias, activations, state = [], [], [], {}
    for index, module in enumerate(modules):
        where = Path(source) / module["path"]
        if kind_of(module) != "Dense":
            raise ValueError(f"{where}: a {module['type']} after the encoder is not supported (Dense layers only)")
        config = json.loads((where / "config.json").read_text())
        if config.get("use_residual"):
            raise ValueError(f"{where}: a Dense layer with use_residual is not supported")
        if reads and config.get("module_input_name", reads) != reads:
            raise ValueError(f"{where}: a Dense layer on {config['module_input_name']}, where {reads} is read")
        activation = config.get("activation_function", "torch.nn.modules.linear.Identity")
        if activation not in ACTIVATIONS:
            raise ValueError(f"{where}: activation {activation!r} is not supported (one of {', '.join(ACTIVATIONS)})")
        if config["in_features"] != width:
            raise ValueError(f"{where}: takes {config['in_features']} features, the layer before gives {width}")
        weights = where / "model.safetensors"
        if not weights.exists():
            raise FileNotFoundError(f"{weights} not found (pickled pytorch_model.bin files are not loaded)")
        found = load_file(str(weights))
        if set(found) != {"linear.weight"} | ({"linear.bias"} if config["bias"] else set()):
            raise ValueError(f"{weights}: expected a linear layer's weight (and bias), found {sorted(found)}")
        state.update({f"{prefix}.{index}.{name.removeprefix('linear.')}": t for name, t in found.items()})
        dims.append(config["out_features"])
        bias.append(bool(config["bias"]))
        activations.append(ACTIVATIONS[activation])
        width = config["out_features"]
    return {"dims": tuple(dims), "bias": tuple(bias), "activations": tuple(activations)}, state


def _pooling_mode(source: Path, module: dict) -> str:
    pooling = json.loads((Path(source) / module["path"] / "config.json").read_text())
    # sentence-transformers 5 writes "pooling_mode"; earlier versions a flag per mode.
    mode = pooling.get("pooling_mode")
    if mode is None:
        flags = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}
        mode = next((mode for mode, flag in flags.items() if pooling.get(flag)), None)
    if mode not in ("mean", "cls"):
        raise ValueError(f"{source}: unsupported pooling {pooling}")
    if pooling.get("include_prompt", True) is False:
        raise ValueError(f"{source}: pooling without the prompt's tokens (include_prompt false) is not supported")
    return mode


def pooled_settings(source: Path, d_model: int) -> tuple[dict, dict[str, torch.Tensor]]:
    """The modules after the Transformer (Pooling, then Dense layers, then Normalize), truncation and
    prompts -> (ModelConfig fields; the Dense layers' parameters, as pooled_dense.{index}.*). A module of
    another kind is refused by name: leaving it out would serve other vectors than the checkpoint's."""
    source = Path(source)
    after = modules_of(source)[1:]
    kinds = [kind_of(m) for m in after]
    if not kinds or kinds[0] != "Pooling":
        raise ValueError(f"{source}: modules.json has no Pooling module after its Transformer")
    dense = [m for m, kind in zip(after, kinds) if kind == "Dense"]
    expected = ["Pooling", *["Dense"] * len(dense), *["Normalize"] * ("Normalize" in kinds)]
    if kinds != expected:
        raise ValueError(
            f"{source}: modules {', '.join(kinds)} after the Transformer; supported: Pooling, Dense layers, Normalize"
        )
    fields, state = dense_layers(source, dense, d_model, "pooled_dense", "sentence_embedding")
    settings = {
        "pooling": _pooling_mode(source, after[0]),
        "normalize": "Normalize" in kinds,
        "pooled_dense": PooledDense(**fields) if dense else None,
        "max_input_tokens": max_seq_length(source),
    }
    return settings | prompts_of(source), state


def prompts_of(source: Path) -> dict:
    """config_sentence_transformers.json's prompts and the default one's name (empty prompts dropped)."""
    path = Path(source) / "config_sentence_transformers.json"
    found = json.loads(path.read_text()) if path.exists() else {}
    prompts = tuple((name, text) for name, text in (found.get("prompts") or {}).items() if text)
    default = found.get("default_prompt_name")
    return {"prompts": prompts, "default_prompt_name": default if default in dict(prompts) else None}


def max_seq_length(source: Path) -> int | None:
    """sentence-transformers' truncation: sentence_bert_config.json's max_seq_length (before version 6),
    else the tokenizer's model_max_length, where it states one (None: the position table's length)."""
    settings = Path(source) / "sentence_bert_config.json"
    if settings.exists() and "max_seq_length" in (found := json.loads(settings.read_text())):
        return found["max_seq_length"]
    tokenizer_config = Path(source) / "tokenizer_config.json"
    if tokenizer_config.exists():
        length = json.loads(tokenizer_config.read_text()).get("model_max_length")
        if isinstance(length, int) and length < 1_000_000:  # transformers writes 1e30 for "no limit"
            return length
    return None
