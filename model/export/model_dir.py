"""Export a model directory to ONNX: onnx/encoder.onnx, onnx/decoder.onnx (seq2seq), the attention-map
graph onnx/attention.onnx (attention_graph.py; served only on request) and manifest.json.

The encoder graph runs once per request. For seq2seq models it also returns every decoder layer's
cross-attention K/V, so decode steps never project the encoder output again. The decoder graph is one
step: the step's tokens, each row's filled length, the self-attention K/V buffers of every layer
(nothing filled on the first step) and the cross K/V in; the last position's logits and the buffers
with the step's K/V written in out. Its masked self-attention is ONNX Runtime's GroupQueryAttention
(decoder_cache.py): bound to the same buffers as input and output, a step writes in place and reads only
the filled positions.

The exporter is torch's TorchScript-based one (dynamo=False): it exports in a fraction of a second where
the dynamo exporter takes seconds, which matters for the parity suite's many configs, and ONNX Runtime's
transformer optimizer recognises its attention pattern. Both write byte-identical files for the same
weights (checked by the tests).
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import onnx
import torch

from model.architecture.transformer import Seq2SeqModel
from model.architecture.weights import load_model_dir
from model.export.attention_graph import export_attention, measure_attention_parity
from model.export.cache_graphs import CACHE_GRAPHS
from model.export.calibration import calibration_ranges
from model.export.eight_bit import eight_bit
from model.export.graph_writing import EXTERNAL_ABOVE, PROTOBUF_LIMIT, ExternalData, data_files, write_graph
from model.export.graphs import DecoderGraph, EncoderGraph, example_decoder_inputs, example_encoder_inputs
from model.export.half_precision import half_decoder, half_encoder
from model.export.manifest_entries import describe_graph, library_versions
from model.export.parity import cpu_session, measure_against_half, measure_parity
from model.families.whisper.alignment_graph import export_word_alignment, measure_word_alignment_parity
from model.families.whisper.voice_activity import copy_voice_activity
from modeldir.config import CONFIG_FILE, ModelConfig
from modeldir.files import (
    ATTENTION_FILE,
    GRAPH_SETS,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    OPSET,
    VOICE_ACTIVITY_FILE,
    WEIGHTS_FILE,
    WORD_ALIGNMENT_FILE,
    decoder_inputs,
    decoder_outputs,
    encoder_inputs,
    encoder_outputs,
    extra_outputs,
    graph_files,
    pooled_output,
    sha256_file,
    tokenizer_files,
)

REDUCED_PRECISIONS = ("fp16", "int8")  # written beside the float32 graphs when asked for
# Raised when the exporter starts writing something optional that an earlier export lacks and the server
# still serves without (1: the int8 ranges of embedding types; 2: a speech model's word-alignment graph;
# 3: its voice activity detector; 4: a float16 decoder's tied output layer reading the token table, held
# once): `attnserve build` exports such a model again.
EXPORT_REVISION = 4


class Progress:
    """One line per export step on stderr, with its time."""

    def __init__(self, title: str, total: int, stream=sys.stderr):
        self.title, self.total, self.done, self.stream = title, total, 0, stream

    @contextmanager
    def step(self, what: str):
        self.done += 1
        print(f"[{self.title} {self.done}/{self.total}] {what} ...", end="", file=self.stream, flush=True)
        start = time.perf_counter()
        yield
        print(f" {time.perf_counter() - start:.1f} s", file=self.stream, flush=True)


def _to_onnx(
    module,
    args,
    input_names,
    output_names,
    dynamic_axes,
    name: str,
    graph: str,
    config: ModelConfig,
    custom_opsets: dict | None = None,
    scratch: Path | None = None,
):
    """The traced graph with attnserve's metadata. scratch: a folder for torch to write it in, with its
    weights in files beside it where they pass protobuf's 2 GiB (torch writes those only to a path);
    None: in memory."""
    if scratch is None:
        buffer = io.BytesIO()
        _trace(module, args, buffer, input_names, output_names, dynamic_axes, custom_opsets)
        proto = onnx.load_from_string(buffer.getvalue())
        onnx.checker.check_model(proto)
    else:
        with tempfile.TemporaryDirectory(dir=scratch) as folder:
            written = Path(folder) / f"{graph}.onnx"
            _trace(module, args, str(written), input_names, output_names, dynamic_axes, custom_opsets)
            onnx.checker.check_model(str(written))  # by path: a proto past 2 GiB cannot be checked in memory
            proto = onnx.load(str(written))  # its weights read in from torch's files
    metadata_props = {
        "attnserve.name": name,
        "attnserve.graph": graph,
        "attnserve.config": json.dumps(config.to_dict(), sort_keys=True),
    }
    onnx.helper.set_model_props(proto, metadata_props)
    return proto


def _trace(module, args, target, input_names, output_names, dynamic_axes, custom_opsets) -> None:
    with warnings.catch_warnings():
        # The TorchScript exporter announces its deprecation; tracer warnings are about Python ints that
        # are constants by construction (head counts, sizes).
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            target,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            dynamo=False,
            do_constant_folding=True,
            custom_opsets=custom_opsets,
            autograd_inlining=False,
        )


def export_encoder(model, name: str, scratch: Path | None = None) -> onnx.ModelProto:
    config = model.config
    inputs, outputs = encoder_inputs(config), encoder_outputs(config)
    audio = config.encoder_input == "log_mel"
    axes = {n: {0: "batch", 2: "frames"} if audio else {0: "batch", 1: "sequence"} for n in inputs}
    axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
    if config.task == "embedding":
        axes[pooled_output(config.head)] = {0: "batch"}
        axes.update({n: {0: "batch", 1: "tokens"} for n in extra_outputs(config)})
    else:
        axes.update({n: {0: "batch", 2: "sequence"} for n in outputs[1:]})
    args = example_encoder_inputs(config)[: len(inputs)]
    return _to_onnx(
        EncoderGraph(model), args, inputs, outputs, axes, name, "encoder", config, {"com.microsoft": 1}, scratch
    )


def export_decoder(model: Seq2SeqModel, name: str, scratch: Path | None = None) -> onnx.ModelProto:
    n = model.config.n_decoder_layers
    inputs, outputs = decoder_inputs(n), decoder_outputs(n)
    axes = {
        "input_ids": {0: "batch", 1: "step"},
        "past_lengths": {0: "batch"},
        "source_lengths": {0: "groups"},
        "logit_rows": {0: "logit_rows"},
        "query_slots": {0: "slots"},
        "row_slots": {0: "batch"},
        "next_token": {0: "batch"},
        "logits": {0: "logit_rows"},
    }
    buffers = [name_ for name_ in inputs + outputs if name_.startswith(("past_key", "past_value", "present_"))]
    axes.update({name_: {0: "batch", 2: "buffer"} for name_ in buffers})
    axes.update({name_: {0: "groups", 2: "source"} for name_ in inputs if name_.startswith("cross_")})
    args = example_decoder_inputs(model.config)
    return _to_onnx(
        DecoderGraph(model), args, inputs, outputs, axes, name, "decoder", model.config, {"com.microsoft": 1}, scratch
    )


def float32_bytes(module) -> int:
    return sum(p.numel() * 4 for p in module.parameters())


def graph_bytes(model) -> dict[str, int]:
    """About the float32 weights each graph holds: a stack's own, and in the decoder the output layer as
    one more table (a tied one too: the graph holds it apart); the attention-map graph holds them all."""
    if model.config.task == "embedding":  # one graph: the whole model (a classifier's decoder too)
        whole = float32_bytes(model)
        return {"encoder": whole, "attention": whole}
    sizes = {"encoder": float32_bytes(model.encoder)}
    if getattr(model, "decoder", None) is not None:
        output = model.lm_head if not model.config.tie_output else model.decoder.embeddings.tokens
        sizes["decoder"] = float32_bytes(model.decoder) + float32_bytes(output)
    sizes["attention"] = sum(sizes.values())
    return sizes


def export_model_dir(
    model_dir: Path, progress_stream=sys.stderr, reduced: tuple[str, ...] = (), external_data: ExternalData = "auto"
) -> dict:
    """Export model_dir (config.json, model.safetensors, the tokenizer's files) in place: the float32
    graphs, and copies of the serving graphs in each precision of `reduced` (fp16: for GPUs; int8: for
    CPUs). external_data: where graphs keep their weights (graph_writing.py: "auto" puts those of a graph
    over 1 GiB in a data file beside it, "always" every graph's). Returns the manifest."""
    model_dir = Path(model_dir)
    started = time.perf_counter()
    unknown = sorted(set(reduced) - set(REDUCED_PRECISIONS))
    if unknown:
        raise ValueError(f"precision {', '.join(unknown)}: one of {', '.join(REDUCED_PRECISIONS)} (float32 always)")
    with torch.no_grad():
        name, config, model = load_model_dir(model_dir)
        seq2seq = config.task == "seq2seq"
        files = graph_files(config.task)
        sets = [graph_set for precision in reduced for graph_set in GRAPH_SETS[precision]]
        calibrated = config.task == "embedding" and config.head == "none" and config.sparse_head != "splade"
        audio = config.encoder_input == "log_mel"
        steps = (5 if seq2seq else 4) + audio + calibrated + 2 * len(sets)
        progress = Progress(f"export {name}", steps, progress_stream)
        (model_dir / "onnx").mkdir(exist_ok=True)
        graphs = {}
        sizes = graph_bytes(model)
        # torch writes a graph past protobuf's limit only to a path, with its weights in files beside it
        scratch = {
            r: model_dir / "onnx" if external_data == "always" or sizes[r] > EXTERNAL_ABOVE else None for r in sizes
        }
        with progress.step(f"encoder -> {files['encoder']}"):
            graphs["encoder"] = export_encoder(model, name, scratch["encoder"])
        if seq2seq:
            with progress.step(f"decoder and cache graphs -> {files['decoder']}, ..."):
                graphs["decoder"] = export_decoder(model, name, scratch["decoder"])
                graphs.update({role: make(config.n_decoder_layers, "fp32") for role, make in CACHE_GRAPHS.items()})
        for role, proto in graphs.items():
            write_graph(proto, model_dir / files[role], external_data)
        attention = None  # the optional attention-map graph holds the whole model: none over the limit
        whole = sizes["attention"]
        # An audio encoder's maps (every head over 1,500 frames, squared) are not drawn: ~200 MB a window.
        fits = whole <= PROTOBUF_LIMIT and config.encoder_input == "tokens"
        skipped = (
            f"attention maps: none, the whole model's {whole / 2**30:.2f} GiB exceed what an ONNX file holds"
            if config.encoder_input == "tokens"
            else "attention maps: none for an audio encoder"
        )
        with progress.step(f"attention maps -> {ATTENTION_FILE}" if fits else skipped):
            if fits:
                attention = export_attention(model, name, _to_onnx)
                onnx.save_model(attention, model_dir / ATTENTION_FILE)
        # A speech model's: its word timestamps, and the detector that cuts long recordings at their silences.
        word_alignment = voice_activity = None
        if audio:
            with progress.step(f"word alignment, voice activity -> {WORD_ALIGNMENT_FILE}, {VOICE_ACTIVITY_FILE}"):
                if whole <= PROTOBUF_LIMIT:
                    word_alignment = export_word_alignment(model, name, _to_onnx)
                    onnx.save_model(word_alignment, model_dir / WORD_ALIGNMENT_FILE)
                voice_activity = copy_voice_activity(model_dir)
        with progress.step("parity, ONNX Runtime vs PyTorch (float32)"):
            parity = measure_parity(model, model_dir, files)
            if attention is not None:
                parity.update(measure_attention_parity(model, cpu_session(model_dir / ATTENTION_FILE)))
            if word_alignment is not None:
                session = cpu_session(model_dir / WORD_ALIGNMENT_FILE)
                parity.update(measure_word_alignment_parity(model, session))
        calibration = {}
        if calibrated:
            with progress.step("int8 ranges of the vectors over a calibration corpus"):
                calibration = {"int8_ranges": calibration_ranges(model, model_dir)}
        copies = {}
        for graph_set in sets:
            copy_files = graph_files(config.task, graph_set)
            with progress.step(f"{graph_set} graphs -> {Path(copy_files['encoder']).parent}/"):
                copy_graphs = reduced_graphs(model_dir, files, copy_files, config, graph_set, external_data)
            with progress.step(f"parity, ONNX Runtime {graph_set} vs PyTorch (float32)"):
                described_copy = {
                    role: {"file": copy_files[role], **describe_graph(g)} for role, g in copy_graphs.items()
                }
                copies[graph_set] = {"graphs": described_copy, "parity": measure_parity(model, model_dir, copy_files)}
                if graph_set == "fp16":
                    copies[graph_set]["parity_against_float16"] = measure_against_half(model, model_dir, copy_files)
        with progress.step("checksums and manifest"):
            tokenizer = tokenizer_files(config.tokenizer)
            optional = [ATTENTION_FILE] if attention is not None else []
            optional += [WORD_ALIGNMENT_FILE] if word_alignment is not None else []
            optional += [VOICE_ACTIVITY_FILE] if voice_activity is not None else []
            written = [*files.values(), *optional] + [f for c in copies.values() for f in _files_of(c)]
            written += data_files(model_dir, [f for f in written if f.endswith(".onnx")])  # weights beside graphs
            checksums = {a: sha256_file(model_dir / a) for a in [CONFIG_FILE, WEIGHTS_FILE, *tokenizer, *written]}
            described = {role: {"file": files[role], **describe_graph(proto)} for role, proto in graphs.items()}
            if attention is not None:
                described["attention"] = {"file": ATTENTION_FILE, **describe_graph(attention)}
            if word_alignment is not None:
                described["word_alignment"] = {"file": WORD_ALIGNMENT_FILE, **describe_graph(word_alignment)}
            if voice_activity is not None:
                described["voice_activity"] = {
                    **voice_activity,
                    **describe_graph(onnx.load(model_dir / VOICE_ACTIVITY_FILE)),
                }
            manifest = {
                "format": MANIFEST_FORMAT,
                "name": name,
                "task": config.task,
                "config": config.to_dict(),
                "opset": OPSET,
                "graphs": described,
                "sha256": checksums,
                "parity": parity,
                **copies,
                **calibration,
                "export_revision": EXPORT_REVISION,
                "versions": library_versions(),
                "export_seconds": round(time.perf_counter() - started, 2),
            }
            (model_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _files_of(copy: dict) -> list[str]:
    return [graph["file"] for graph in copy["graphs"].values()]


def reduced_graphs(
    model_dir: Path, files: dict, copy_files: dict, config: ModelConfig, graph_set: str, external_data: ExternalData
) -> dict:
    """The serving graphs of a graph set (fp16, int8, int8_reduced_range), made from the float32 ones and
    written: role -> graph. The cache graphs move the cache's values, float16 with float16 graphs, float32
    with int8 ones."""
    (model_dir / copy_files["encoder"]).parent.mkdir(parents=True, exist_ok=True)
    graphs = {}
    for role in ("encoder", "decoder") if config.task == "seq2seq" else ("encoder",):
        source, target = model_dir / files[role], model_dir / copy_files[role]
        if graph_set.startswith("int8"):
            graphs[role] = eight_bit(source, target.parent, config, reduce_range=graph_set == "int8_reduced_range")
        else:
            graphs[role] = half_encoder(source, config) if role == "encoder" else half_decoder(source, config)
    if config.task == "seq2seq":
        cache = "fp16" if graph_set == "fp16" else "fp32"
        graphs.update({role: make(config.n_decoder_layers, cache) for role, make in CACHE_GRAPHS.items()})
    for role, proto in graphs.items():
        write_graph(proto, model_dir / copy_files[role], external_data)
    return graphs
