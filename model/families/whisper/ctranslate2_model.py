"""CTranslate2 Whisper directories, as faster-whisper uses them (model.bin, config.json, tokenizer.json), as
our Seq2SeqModel: model.bin read with numpy, its variables renamed to ours.

model.bin's layout is what CTranslate2's specs/model_spec.py (`_serialize`) writes, little-endian: a
uint32 binary version, the spec's name and a uint32 revision, a uint32 count of variables, each as its
name, a uint8 rank, that many uint32 dimensions, a uint8 type (float32, int8, int16, int32, float16,
bfloat16), a uint32 byte count and the bytes; then a uint32 count of aliases, each an alias and the name
it stands for. A string is a uint16 length, counting a closing NUL, then its bytes and the NUL.

Whisper's spec (specs/whisper_spec.py) fuses projections: a self-attention's linear_0 holds the query,
key and value rows one after another, a cross-attention's linear_1 the key and value rows; linear_2 or the
last linear is the output. Quantized weights (int8, int16) carry `<name>_scale`: the weight is the stored
integers divided by the scale (one per row for int8, one per tensor for int16)."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import torch

from model.architecture.positions import fairseq_sinusoid_table
from model.architecture.transformer import Seq2SeqModel
from model.architecture.weights import save_model_dir
from modeldir.config import ModelConfig
from modeldir.files import TOKENIZER_FILE
from modeldir.whisper_tokens import multilingual_by_vocabulary

from .importer import WhisperImportError, settings_with_tokenizer, with_whisper_settings

MODEL_FILE = "model.bin"
SPEC_NAME = "WhisperSpec"
DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, "bfloat16")
GELU = 3  # CTranslate2's Activation enum
# (their layer part, ours); the attention projections are split apart by _layer_tensors.
NORMS = {
    "self_attention/layer_norm": "self_attention_norm",
    "attention/layer_norm": "cross_attention_norm",
    "ffn/layer_norm": "feed_forward_norm",
}
FEED_FORWARD = {"ffn/linear_0": "feed_forward.w_1", "ffn/linear_1": "feed_forward.w_2"}
_LAYER = re.compile(r"^(encoder|decoder)/layer_(\d+)/(.+)/(weight|bias|gamma|beta)$")


def is_ctranslate2_whisper(source: Path) -> bool:
    path = Path(source) / MODEL_FILE
    if not path.is_file():
        return False
    with path.open("rb") as f:
        header = f.read(6)
        if len(header) < 6:
            return False
        (length,) = struct.unpack("<H", header[4:6])
        return f.read(length)[:-1] == SPEC_NAME.encode()


def read_model_bin(path: Path) -> dict[str, np.ndarray]:
    """Every variable of a CTranslate2 model.bin by name (aliases as the arrays they stand for)."""
    data = Path(path).read_bytes()
    offset = 0

    def take(fmt: str):
        nonlocal offset
        values = struct.unpack_from("<" + fmt, data, offset)
        offset += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def string() -> str:
        nonlocal offset
        length = take("H")
        text = data[offset : offset + length - 1].decode("utf-8")
        offset += length
        return text

    version = take("I")
    if version < 5:  # from version 5 on each variable states its type
        raise WhisperImportError(f"{path}: CTranslate2 binary version {version}; versions 5 and later are read")
    name = string()
    if name != SPEC_NAME:
        raise WhisperImportError(f"{path}: a {name}, not a {SPEC_NAME}")
    take("I")  # the spec's revision
    variables = {}
    for _ in range(take("I")):
        key = string()
        rank = take("B")
        shape = [take("I") for _ in range(rank)]
        dtype, size = DTYPES[take("B")], take("I")
        raw = data[offset : offset + size]
        offset += size
        if dtype == "bfloat16":  # the upper half of a float32
            array = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, dtype)
        variables[key] = array.reshape(shape)
    for _ in range(take("I")):
        alias, target = string(), string()
        variables[alias] = variables[target]
    return variables


def dequantized(variables: dict[str, np.ndarray], key: str) -> torch.Tensor:
    """A weight as float32: quantized integers divided by their scale (per row, or one for the tensor)."""
    value = variables[key]
    scale = variables.get(f"{key}_scale")
    if scale is None:
        return torch.from_numpy(value.astype(np.float32))
    scale = scale.astype(np.float32)
    if scale.ndim:
        scale = scale.reshape(-1, *([1] * (value.ndim - 1)))
    return torch.from_numpy(value.astype(np.float32) / scale)


def ctranslate2_config(variables: dict[str, np.ndarray], source: Path) -> ModelConfig:
    problems = []
    if int(variables["decoder/activation"]) != GELU:
        problems.append(f"decoder activation {int(variables['decoder/activation'])} (CTranslate2's enum), not GELU")
    if not int(variables["decoder/pre_norm"]) or int(variables["decoder/scale_embeddings"]):
        problems.append("a decoder that is not pre-norm or scales its embeddings")
    if int(variables.get("decoder/alibi", 0)):
        problems.append("ALiBi positions")
    if problems:
        raise WhisperImportError(f"{source}: not supported: " + "; ".join(problems))
    tokens = variables["decoder/embeddings/weight"]
    layers = {"encoder": 0, "decoder": 0}
    for key in variables:
        if match := _LAYER.match(key):
            layers[match[1]] = max(layers[match[1]], int(match[2]) + 1)
    conv1 = variables["encoder/conv1/weight"]
    return ModelConfig(
        task="seq2seq",
        vocab_size=tokens.shape[0],
        d_model=tokens.shape[1],
        n_heads=int(variables["decoder/num_heads"]),
        d_ff=variables["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        n_encoder_layers=layers["encoder"],
        n_decoder_layers=layers["decoder"],
        max_positions=variables["decoder/position_encodings/encodings"].shape[0],
        positions="learned",
        norm_placement="pre",
        activation="gelu",
        layer_norm_eps=1e-5,
        share_embeddings=False,
        tie_output=True,
        encoder_input="log_mel",
        n_mels=conv1.shape[1],
        max_source_positions=variables["encoder/position_encodings/encodings"].shape[0],
    )


def _layer_tensors(variables: dict, key: str, ours: str, part: str, kind: str, d_model: int) -> dict:
    """Our tensors of one of their layer tensors, fused projections split apart."""
    kind = {"gamma": "weight", "beta": "bias"}.get(kind, kind)
    if part in NORMS:
        return {f"{ours}.{NORMS[part]}.{kind}": dequantized(variables, key)}
    if part in FEED_FORWARD:
        return {f"{ours}.{FEED_FORWARD[part]}.{kind}": dequantized(variables, key)}
    attention, linear = part.split("/")
    prefix = f"{ours}.{'self_attention' if attention == 'self_attention' else 'cross_attention'}"
    value = dequantized(variables, key)
    if attention == "self_attention":
        names = {"linear_0": ("w_q", "w_k", "w_v"), "linear_1": ("w_o",)}[linear]
    else:
        names = {"linear_0": ("w_q",), "linear_1": ("w_k", "w_v"), "linear_2": ("w_o",)}[linear]
    pieces = value.split(d_model, dim=0) if len(names) > 1 else (value,)
    return {f"{prefix}.{name}.{kind}": piece.contiguous() for name, piece in zip(names, pieces)}


def ctranslate2_whisper_model(source: Path) -> Seq2SeqModel:
    """A CTranslate2 Whisper directory's weights as our model (every tensor placed, none missing)."""
    variables = read_model_bin(Path(source) / MODEL_FILE)
    config = ctranslate2_config(variables, source)
    ours = fairseq_sinusoid_table(config.max_source_positions, config.d_model, padding_idx=None)
    theirs = dequantized(variables, "encoder/position_encodings/encodings")
    if not torch.allclose(theirs, ours, atol=1e-3):  # float16 rounds the table
        raise WhisperImportError(f"{source}: the encoder's position table is not Whisper's sinusoids")
    state = {
        "decoder.embeddings.tokens.weight": dequantized(variables, "decoder/embeddings/weight"),
        "decoder.embeddings.positions.weight": dequantized(variables, "decoder/position_encodings/encodings"),
    }
    for stack in ("encoder", "decoder"):
        state[f"{stack}.final_norm.weight"] = dequantized(variables, f"{stack}/layer_norm/gamma")
        state[f"{stack}.final_norm.bias"] = dequantized(variables, f"{stack}/layer_norm/beta")
    for conv in ("conv1", "conv2"):
        for kind in ("weight", "bias"):
            state[f"encoder.embeddings.{conv}.{kind}"] = dequantized(variables, f"encoder/{conv}/{kind}")
    for key in variables:
        if (match := _LAYER.match(key)) is not None:
            stack, index, part, kind = match.groups()
            state.update(_layer_tensors(variables, key, f"{stack}.layers.{index}", part, kind, config.d_model))
    model = Seq2SeqModel(config)
    missing = set(model.state_dict()) - set(state)
    if missing:
        raise WhisperImportError(f"{source}: model.bin lacks {', '.join(sorted(missing))}")
    model.load_state_dict(state, strict=True)
    return model.eval()


def import_ctranslate2_whisper(source: Path, out_dir: Path, name: str) -> Path:
    """Convert a CTranslate2 Whisper directory into our model directory (tokenizer.json copied). Its
    config.json gives the suppressed tokens and alignment heads; the tokenizer the special tokens."""
    source = Path(source)
    tokenizer_path = source / TOKENIZER_FILE
    if not tokenizer_path.is_file():
        raise WhisperImportError(f"{source}: no tokenizer ({TOKENIZER_FILE}), which faster-whisper's directories hold")
    model = ctranslate2_whisper_model(source)
    settings_path = source / "config.json"
    settings = json.loads(settings_path.read_text()) if settings_path.is_file() else {}
    whisper = settings_with_tokenizer(
        tokenizer_path,
        model.config,
        multilingual=multilingual_by_vocabulary(model.config.vocab_size),  # CTranslate2's rule too
        suppress_ids=settings.get("suppress_ids"),
        begin_suppress_ids=settings.get("suppress_ids_begin"),
        alignment_heads=settings.get("alignment_heads"),
    )
    model = with_whisper_settings(model, whisper)
    out_dir = save_model_dir(model, name, out_dir)
    shutil.copyfile(tokenizer_path, Path(out_dir) / TOKENIZER_FILE)
    return out_dir
