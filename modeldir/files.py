"""The model directory contract, shared by the exporter that writes it and the server that reads it:
file names, graph input/output names, the manifest, and checksum verification."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

MANIFEST_FORMAT = "attnserve.manifest/2"  # 2: the decoder step on cache buffers (past_lengths)
MANIFEST_FILE = "manifest.json"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
# Marian's tokenizer: a sentencepiece model per language and one vocabulary mapping pieces to ids.
MARIAN_TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
MARIAN_TARGET_VOCAB_FILE = "target_vocab.json"  # checkpoints with a target vocabulary of its own
MARIAN_KINDS = ("marian", "marian_separate_vocabs")


def tokenizer_files(kind: str) -> tuple[str, ...]:
    """The files a model's tokenizer reads, by the config's `tokenizer` kind."""
    if kind == "marian_separate_vocabs":
        return (*MARIAN_TOKENIZER_FILES, MARIAN_TARGET_VOCAB_FILE)
    return MARIAN_TOKENIZER_FILES if kind == "marian" else (TOKENIZER_FILE,)


WEIGHTS_FILE = "model.safetensors"
ENCODER_FILE = "onnx/encoder.onnx"
DECODER_FILE = "onnx/decoder.onnx"
# Optional: the attention-map graph, loaded only when the server serves the Attention RPC.
ATTENTION_FILE = "onnx/attention.onnx"

# Encoder graph: inputs (B, S) int64, right-padded.
ENCODER_INPUTS = ("input_ids", "attention_mask")


def encoder_outputs(task: str, n_decoder_layers: int) -> tuple[str, ...]:
    """Embedding models: the pooled vector. Seq2seq: each decoder layer's cross-attention K/V of the encoder
    output, computed once per request here so that decode steps only read them."""
    if task == "embedding":
        return ("last_hidden_state", "embedding")
    return ("last_hidden_state", *cache_names("cross", n_decoder_layers))


def cache_names(prefix: str, n_layers: int) -> tuple[str, ...]:
    """prefix_key.0, prefix_value.0, prefix_key.1, ...: one K and one V (B, H, length, Dh) per layer."""
    return tuple(f"{prefix}_{kind}.{i}" for i in range(n_layers) for kind in ("key", "value"))


def decoder_inputs(n_layers: int) -> tuple[str, ...]:
    return (
        "input_ids",  # (B, T) the step's tokens; T > 1 only for a batch of one
        "past_lengths",  # (B) int32: positions each row has filled in the cache buffers
        "encoder_attention_mask",  # (B, S)
        *cache_names("past", n_layers),  # (B, H, L, Dh) buffers; L >= each row's length + T
        *cache_names("cross", n_layers),  # (B, H, S, Dh)
    )


def decoder_outputs(n_layers: int) -> tuple[str, ...]:
    # logits (B, vocab) of the step's last position; present K/V: the past buffers with the step's K/V
    # written at each row's length. Bind each present output to its past input's buffer: written in place.
    return ("logits", *cache_names("present", n_layers))


def attention_inputs(task: str) -> tuple[str, ...]:
    """(B, S) and, for seq2seq, (B, T) int64, right-padded: the decoder's tokens start with the start token."""
    return ENCODER_INPUTS + (("target_ids", "target_mask") if task == "seq2seq" else ())


def attention_outputs(task: str) -> tuple[str, ...]:
    """Softmax weights stacked over layers: encoder (L, B, H, S, S); seq2seq also decoder self-attention
    (L, B, H, T, T), cross-attention (L, B, H, T, S) and the argmax token at each target position (B, T).
    Weights at padded keys, future positions and padded queries are exactly 0."""
    if task == "embedding":
        return ("encoder_self_attention",)
    return ("encoder_self_attention", "decoder_self_attention", "cross_attention", "predicted_ids")


class ModelFilesError(Exception):
    """A model directory that cannot be served: missing files, a bad manifest, a checksum mismatch."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class ModelFiles:
    """A verified model directory: what the server loads."""

    root: Path
    name: str
    task: str
    config: dict  # ModelConfig fields
    manifest: dict
    tokenizer: Path  # tokenizer.json, or the directory that holds Marian's tokenizer files
    encoder: Path
    decoder: Path | None
    attention: Path | None = None  # only when asked for


def open_model_dir(root: Path, attention: bool = False) -> ModelFiles:
    """Read manifest.json and check every file the server loads against its sha256 there; with
    attention, the attention-map graph too (an optional artifact: older exports lack it)."""
    root = Path(root)
    manifest_path = root / MANIFEST_FILE
    if not manifest_path.is_file():
        raise ModelFilesError(f"{manifest_path}: missing; export the model first (attnserve export {root})")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as e:
        raise ModelFilesError(f"{manifest_path}: unreadable: {e}") from e
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ModelFilesError(
            f"{manifest_path}: format {manifest.get('format')!r}, expected {MANIFEST_FORMAT!r}; "
            f"export the model again (attnserve export {root})"
        )
    task = manifest["task"]
    tokenizer_kind = manifest["config"].get("tokenizer", "tokenizers")
    served = [*tokenizer_files(tokenizer_kind), ENCODER_FILE] + ([DECODER_FILE] if task == "seq2seq" else [])
    if attention:
        if ATTENTION_FILE not in manifest["sha256"]:
            raise ModelFilesError(
                f"{manifest_path}: no attention-map graph ({ATTENTION_FILE}), which attention_maps needs; "
                f"export the model again (attnserve export {root})"
            )
        served.append(ATTENTION_FILE)
    for relative in served:
        path = root / relative
        expected = manifest["sha256"].get(relative)
        if expected is None:
            raise ModelFilesError(f"{manifest_path}: no checksum for {relative}")
        if not path.is_file():
            raise ModelFilesError(f"{path}: missing (listed in {MANIFEST_FILE})")
        actual = sha256_file(path)
        if actual != expected:
            raise ModelFilesError(
                f"{path}: sha256 {actual} does not match {expected} in {MANIFEST_FILE}: "
                "the file was modified or belongs to another export; export the model again"
            )
    return ModelFiles(
        root=root,
        name=manifest["name"],
        task=task,
        config=manifest["config"],
        manifest=manifest,
        tokenizer=root if tokenizer_kind in MARIAN_KINDS else root / TOKENIZER_FILE,
        encoder=root / ENCODER_FILE,
        decoder=root / DECODER_FILE if task == "seq2seq" else None,
        attention=root / ATTENTION_FILE if attention else None,
    )
