"""The model directory contract, shared by the exporter that writes it and the server that reads it:
file names, graph input/output names, the manifest, and checksum verification."""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass
from pathlib import Path

from .config import ModelConfig
from .external_data import ExternalDataError, checked_data_files

# 6: the cache_moves graph copies a self-attention row's filled positions only ((row, head, position)
# triples). 5: the decoder step's cross-attention K/V once per group of rows that share a source
# (query_slots, row_slots). (4: the decoder step's total_length, from the host; attention as fused contrib ops. 3: half-precision
# graphs beside the float32 ones; the cache graphs; next_token, logit_rows and source_lengths. 2: the
# decoder step on cache buffers.)
MANIFEST_FORMAT = "attnserve.manifest/6"
OPSET = 18
CACHE_IR_VERSION = 8  # of the cache graphs, as the exporter writes the others
MANIFEST_FILE = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
# Marian's tokenizer: a sentencepiece model per language and one vocabulary mapping pieces to ids.
MARIAN_TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
MARIAN_TARGET_VOCAB_FILE = "target_vocab.json"  # checkpoints with a target vocabulary of its own
MARIAN_KINDS = ("marian", "marian_separate_vocabs")
# M2M100's tokenizer (it has no tokenizer.json): one sentencepiece model, and vocab.json mapping its pieces.
M2M100_TOKENIZER_FILES = ("sentencepiece.bpe.model", "vocab.json")
# ByT5's tokenizer reads no file: a text's UTF-8 bytes are its ids (modeldir/byte_tokenizer.py).
BYTE_KIND = "byt5"
# tokenizers that read several files of the model directory, or none: given the directory, not tokenizer.json
DIRECTORY_KINDS = (*MARIAN_KINDS, "m2m100", BYTE_KIND)


def tokenizer_files(kind: str) -> tuple[str, ...]:
    """The files a model's tokenizer reads, by the config's `tokenizer` kind."""
    if kind == "marian_separate_vocabs":
        return (*MARIAN_TOKENIZER_FILES, MARIAN_TARGET_VOCAB_FILE)
    if kind == "m2m100":
        return M2M100_TOKENIZER_FILES
    if kind == BYTE_KIND:
        return ()
    return MARIAN_TOKENIZER_FILES if kind == "marian" else (TOKENIZER_FILE,)


WEIGHTS_FILE = "model.safetensors"
ENCODER_FILE = "onnx/encoder.onnx"
DECODER_FILE = "onnx/decoder.onnx"
# Optional: the attention-map graph, loaded only when the server serves the Attention RPC.
ATTENTION_FILE = "onnx/attention.onnx"
# A speech model's word-alignment graph (model/families/whisper/alignment_graph.py): its word timestamps.
WORD_ALIGNMENT_FILE = "onnx/word_alignment.onnx"
# A speech model's voice activity detector (Silero VAD, model/families/whisper/voice_activity.py): long
# recordings cut at their silences, their pieces decoded at once.
VOICE_ACTIVITY_FILE = "onnx/voice_activity.onnx"

# float32 graphs always; float16 (GPUs) and int8 (CPUs) ones beside them when exported with --precision.
PRECISIONS = ("fp32", "fp16", "int8")
# Each precision's graph sets, each under its own folder and manifest key. int8 has two: full-range 8-bit
# weights for CPUs whose 8-bit dot products sum into 32 bits (x86 with VNNI, Arm), and 7-bit weights
# (ONNX Runtime's reduce_range) for x86 CPUs without VNNI, whose u8 x s8 products sum pairs into 16 bits
# first (vpmaddubsw) and saturate with full-range weights: 33 and 72 of 100 random Marian outputs equal
# to float32 there, against 85 and 98 with 7 bits (docs/benchmarks.md, "8-bit").
GRAPH_SETS = {"fp32": ("fp32",), "fp16": ("fp16",), "int8": ("int8", "int8_reduced_range")}
CACHE_GRAPHS = ("cache_moves", "cache_cross", "cache_resize")  # seq2seq: see model/export/cache_graphs.py


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next((set(line.split(":", 1)[1].split()) for line in cpuinfo if line.startswith("flags")), set())
    except OSError:
        return set()


def int8_dot_products_saturate(machine: str | None = None, flags: set[str] | None = None) -> bool:
    """An x86 CPU without VNNI (AVX-512 VNNI or AVX-VNNI): where full-range int8 weights saturate. (Where
    the flags cannot be read, the 7-bit graphs, which are right everywhere.)"""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64", "i386", "i686"):
        return False
    return not ({"avx512_vnni", "avx_vnni"} & (cpu_flags() if flags is None else flags))


def graph_set_for(precision: str) -> str:
    """The graph set that serves `precision` on this CPU."""
    if precision == "int8":
        return "int8_reduced_range" if int8_dot_products_saturate() else "int8"
    return precision


def graph_files(task: str, precision: str = "fp32") -> dict[str, str]:
    """role -> file of the serving graphs of one precision's graph set (GRAPH_SETS): the encoder, and for
    seq2seq models the decoder step and the cache graphs."""
    folder = "onnx" if precision == "fp32" else f"onnx/{precision}"
    files = {"encoder": f"{folder}/encoder.onnx"}
    if task == "seq2seq":
        files["decoder"] = f"{folder}/decoder.onnx"
        files.update({role: f"{folder}/{role}.onnx" for role in CACHE_GRAPHS})
    return files


# Encoder graph: inputs (B, S) int64, right-padded; an audio encoder's log-mel frames (B, n_mels, frames)
# float32 alone, as every frame of a window is heard.
ENCODER_INPUTS = ("input_ids", "attention_mask")
AUDIO_ENCODER_INPUTS = ("input_features",)


def encoder_inputs(config: ModelConfig) -> tuple[str, ...]:
    return AUDIO_ENCODER_INPUTS if config.encoder_input == "log_mel" else ENCODER_INPUTS


def encoder_feeds(input_names: list[str], inputs, attention_mask) -> dict:
    """An encoder graph's inputs by name, from a batch as the PyTorch model takes it: token ids and their
    mask, or log-mel frames (whose mask, every frame, the graph makes itself)."""
    if tuple(input_names) == AUDIO_ENCODER_INPUTS:
        return {"input_features": inputs}
    return {"input_ids": inputs, "attention_mask": attention_mask}


def encoder_outputs(config: ModelConfig) -> tuple[str, ...]:
    """Embedding models: the pooled vector (with a classifier head: its logits), and the outputs of its
    other heads. Seq2seq: each decoder layer's cross-attention K/V of the encoder output, computed once per
    request here so that decode steps only read them."""
    if config.task == "embedding":
        return ("last_hidden_state", pooled_output(config.head), *extra_outputs(config))
    return ("last_hidden_state", *cache_names("cross", config.n_decoder_layers))


def pooled_output(head: str) -> str:
    """An embedding model's one-row-per-input output: its vector, or a classifier head's logits."""
    return "logits" if head == "classifier" else "embedding"


def extra_outputs(config: ModelConfig) -> tuple[str, ...]:
    """What an embedding model gives beside its pooled vector, from the same pass: token_weights (B, S),
    bge-m3's sparse weights; vocabulary_weights (B, vocab), SPLADE's; multi_vectors (B, S - 1, dim), bge-m3's
    ColBERT vectors; token_vectors (B, S, dim), a ColBERT-style model's, one per token padding included."""
    sparse = {"none": (), "token_weights": ("token_weights",), "splade": ("vocabulary_weights",)}[config.sparse_head]
    colbert = ("token_vectors",) if config.colbert else ()
    return sparse + (("multi_vectors",) if config.multi_vector_dim else ()) + colbert


def cache_names(prefix: str, n_layers: int) -> tuple[str, ...]:
    """prefix_key.0, prefix_value.0, prefix_key.1, ...: one K and one V (B, H, length, Dh) per layer."""
    return tuple(f"{prefix}_{kind}.{i}" for i in range(n_layers) for kind in ("key", "value"))


def decoder_inputs(n_layers: int) -> tuple[str, ...]:
    return (
        "input_ids",  # (B, T) the step's tokens; T > 1 only for a batch of one
        "past_lengths",  # (B) int32: positions each row has filled in the cache buffers
        "source_lengths",  # (G) int32: each group's source tokens (the cross buffers are right-padded)
        "logit_rows",  # (K) int64: the rows whose whole logits the step returns (sampling, beam search)
        # (1) int32: the longest row after the step, max(past_lengths) + T. GroupQueryAttention reads it on
        # the host: given from there, a step on CUDA copies nothing back to compute it and does not wait.
        "total_length",
        # The rows' groups: rows that share a source (a beam search's beams) share one row of the cross
        # buffers, and their queries are read against it as one block of W slots, W the most rows of a group.
        "query_slots",  # (G * W) int64: the row whose query sits in each slot (spare slots: any row)
        "row_slots",  # (B) int64: each row's slot, group * W + its place in the group
        *cache_names("past", n_layers),  # (B, H, L, Dh) buffers; L >= each row's length + T
        *cache_names("cross", n_layers),  # (G, H, S, Dh), S >= every source length
    )


def decoder_outputs(n_layers: int) -> tuple[str, ...]:
    # next_token (B) int64: each row's argmax of the step's last position, suppressed tokens left out;
    # logits (K, vocab) float32 of the logit_rows; present K/V: the past buffers with the step's K/V
    # written at each row's length. Bind each present output to its past input's buffer: written in place.
    return ("next_token", "logits", *cache_names("present", n_layers))


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


def read_manifest(root: Path) -> dict:
    """A model directory's manifest.json, of this format (ModelFilesError otherwise); nothing verified."""
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
    return manifest


def exported_precisions(manifest: dict) -> tuple[str, ...]:
    """The precisions and graph sets a manifest has graphs of: fp32 always, the others under their own key."""
    return tuple(s for sets in GRAPH_SETS.values() for s in sets if s == "fp32" or s in manifest)


@dataclass(frozen=True)
class ModelFiles:
    """A verified model directory: what the server loads."""

    root: Path
    name: str
    task: str
    config: ModelConfig
    manifest: dict
    tokenizer: Path  # tokenizer.json, or the directory that holds Marian's tokenizer files
    precision: str  # of the serving graphs
    graph_set: str  # the precision's graph set this CPU serves (GRAPH_SETS)
    graphs: dict[str, Path]  # role -> file: encoder; seq2seq: decoder and the cache graphs
    attention: Path | None = None  # only when asked for (always float32)
    word_alignment: Path | None = None  # a speech model's, where its export wrote one (float32)
    voice_activity: Path | None = None  # a speech model's, where its export copied one

    @property
    def encoder(self) -> Path:
        return self.graphs["encoder"]

    @property
    def decoder(self) -> Path | None:
        return self.graphs.get("decoder")


def _verify(root: Path, relative: str, manifest: dict) -> None:
    """A file the server loads: listed in the manifest, there, and of its checksum."""
    path = root / relative
    expected = manifest["sha256"].get(relative)
    if expected is None:
        raise ModelFilesError(f"{root / MANIFEST_FILE}: no checksum for {relative}")
    if not path.is_file():
        raise ModelFilesError(f"{path}: missing (listed in {MANIFEST_FILE})")
    actual = sha256_file(path)
    if actual != expected:
        raise ModelFilesError(
            f"{path}: sha256 {actual} does not match {expected} in {MANIFEST_FILE}: "
            "the file was modified or belongs to another export; export the model again"
        )


def open_model_dir(
    root: Path, attention: bool = False, precision: str = "fp32", graph_set: str | None = None
) -> ModelFiles:
    """Read manifest.json and check every file the server loads against its sha256 there: the serving
    graphs of `precision` (the graph set this CPU serves, unless `graph_set` names one), and with attention
    the attention-map graph too (an optional artifact)."""
    root = Path(root)
    manifest_path = root / MANIFEST_FILE
    manifest = read_manifest(root)
    task = manifest["task"]
    chosen = graph_set or graph_set_for(precision)
    if chosen not in GRAPH_SETS.get(precision, ()):
        raise ValueError(f"graph set {chosen!r} is not one of {precision}'s: {GRAPH_SETS.get(precision)}")
    if chosen not in exported_precisions(manifest):
        which = f" (the {precision} graphs for this CPU)" if chosen != precision else ""
        raise ModelFilesError(
            f"{manifest_path}: no {chosen} graphs{which} (exported: {', '.join(exported_precisions(manifest))}); "
            f"export them with attnserve export {root} --precision {precision}"
        )
    config = ModelConfig.from_dict(manifest["config"])
    tokenizer_kind = config.tokenizer
    graphs = graph_files(task, chosen)
    served = [*tokenizer_files(tokenizer_kind), *graphs.values()]
    if attention:
        if ATTENTION_FILE not in manifest["sha256"]:
            raise ModelFilesError(
                f"{manifest_path}: no attention-map graph ({ATTENTION_FILE}), which attention_maps needs; "
                f"export the model again (attnserve export {root}); a model whose weights exceed the 2 GiB an "
                "ONNX file holds has none"
            )
        served.append(ATTENTION_FILE)
    # Optional like the attention maps, but loaded whenever it is there: a copy of the directory made for
    # one precision (a device kit's) may leave its float32 weights out, and serves without word timestamps.
    aligned = WORD_ALIGNMENT_FILE in manifest["sha256"] and (root / WORD_ALIGNMENT_FILE).is_file()
    served += [WORD_ALIGNMENT_FILE] * aligned
    hears_silence = VOICE_ACTIVITY_FILE in manifest["sha256"]  # small, and in every copy: it must be there
    served += [VOICE_ACTIVITY_FILE] * hears_silence
    for relative in served:
        _verify(root, relative, manifest)
    # The data files a graph's weights are in (graphs over 2 GiB): inside the directory and listed, each.
    for graph in [relative for relative in served if relative.endswith(".onnx")]:
        try:
            data = checked_data_files(root, graph)
        except ExternalDataError as e:
            raise ModelFilesError(str(e)) from e
        for relative in data:
            _verify(root, relative, manifest)
    return ModelFiles(
        root=root,
        name=manifest["name"],
        task=task,
        config=config,
        manifest=manifest,
        tokenizer=root if tokenizer_kind in DIRECTORY_KINDS else root / TOKENIZER_FILE,
        precision=precision,
        graph_set=chosen,
        graphs={role: root / relative for role, relative in graphs.items()},
        attention=root / ATTENTION_FILE if attention else None,
        word_alignment=root / WORD_ALIGNMENT_FILE if aligned else None,
        voice_activity=root / VOICE_ACTIVITY_FILE if hears_silence else None,
    )
