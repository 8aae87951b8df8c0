"""Half-precision (float16) serving graphs, made from the exported float32 ones with ONNX Runtime's own
tools: its transformer optimizer's fusions for the encoder, and its float16 converter for every graph.

What stays float32: the graphs' float inputs and outputs that the serving code reads as float32 (an
embedding model's vectors, the decoder's logits, last_hidden_state), and inside the graphs what ONNX
Runtime computes in float32 anyway (LayerNormalization's statistics: stash_type; GroupQueryAttention's
and the CUDA softmax's accumulation). The cache buffers and the cross-attention K/V the encoder hands the
decoder are float16: they are the cache, and float32 there would double its memory.

T5's residual stream outgrows float16 (Flan-T5's reaches 1e5, past float16's 65,504): in a model with RMS
norms (T5's family) what writes or reads that stream stays float32, as transformers runs T5 in float16
(its `wo` kept float32, so the residual sums promote to float32): the residual adds, the norms and the
feed-forward's output projection; and the relative positions' buckets, computed in float32 as T5 does.
The attention and the feed-forward's other matrices run in float16.

A decoder whose output layer is its token table (tie_output) holds that table once: the exporter writes
the layer's weight as a transposed copy (torch folds the transpose), which on a GPU is as large again in
device memory (NLLB-200 1.3B: 0.5 GB in float16). The float32 and int8 graphs, the CPU's, keep the copy:
ONNX Runtime packs a MatMul's or Gemm's weight ahead of the runs on the CPU, so a shared table is held
twice there anyway (measured: an M2M100-418M-shaped fp32 decoder's session 1,733 MiB shared against 1,233),
and dynamic quantization takes MatMul, not Gemm.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.transformers import float16
from onnxruntime.transformers.float16 import convert_float_to_float16
from onnxruntime.transformers.optimizer import optimize_model

from modeldir.config import ModelConfig
from modeldir.external_data import data_file_name
from modeldir.files import encoder_inputs, encoder_outputs

# The residual stream's nodes, by the names the exporter gives them: a layer's own adds, its norms and the
# closing one, and the feed-forward's output projection; and the relative positions' bucket arithmetic
# (a log, whose float16 rounding would move distances across a bucket's bound).
KEPT_FLOAT32 = re.compile(
    r"/(encoder|decoder)/(layers\.\d+/(Add(_\d+)?|\w+_norm/.*|feed_forward/w_2/MatMul)|final_norm/.*|relative/.*)"
)


CONVERTED_AT_ONCE = 1 << 24  # values of a large tensor rounded to float16 at once (64 MiB of float32)


def float32_nodes(model: onnx.ModelProto, config: ModelConfig) -> list[str]:
    """The nodes kept float32 in a float16 graph: T5's residual stream and bucket arithmetic (none in other
    families)."""
    if config.norm != "rms":
        return []
    return [node.name for node in model.graph.node if KEPT_FLOAT32.fullmatch(node.name)]


def _float32_chains(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX Runtime's converter casts each kept-float32 node's output to float16 and back to float32 before
    the next kept node (once per reader): each such round trip is cut out, the next node reading the
    float32 value, and repeated casts of one value are kept once, so that a chain of kept nodes stays
    float32 from end to end (the round trip would overflow where the chain is needed)."""

    def cast_to(node: onnx.NodeProto) -> int | None:
        return next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None

    producer = {output: node for node in model.graph.node for output in node.output}
    outputs = {output.name for output in model.graph.output}  # kept by name (a norm's output: no overflow)
    shortcut = {}  # a round trip's float32 output -> the float32 value it started from
    for node in model.graph.node:
        casts_up = cast_to(node) == onnx.TensorProto.FLOAT and node.output[0] not in outputs
        before = producer.get(node.input[0]) if casts_up else None
        if before is not None and cast_to(before) == onnx.TensorProto.FLOAT16:
            shortcut[node.output[0]] = before.input[0]
    kept, casts = [], set()
    for node in model.graph.node:
        if cast_to(node) is not None and (node.output[0] in shortcut or node.output[0] in casts):
            continue
        casts.update(node.output if cast_to(node) is not None else ())
        node.input[:] = [shortcut.get(name, name) for name in node.input]
        kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def _has_data_file(path: Path) -> bool:
    return (Path(path).parent / data_file_name(Path(path).name)).exists()


def _converted(path: Path, keep: list[str], config: ModelConfig) -> onnx.ModelProto:
    """The graph at path converted to float16 by ONNX Runtime's converter, T5's residual stream float32. A
    graph whose weights are in a data file (over 1 GiB) is converted without them, then they are read in
    from the file a part at a time: ONNX Runtime's converter, given them all, held NLLB-200 1.3B's 3 GiB
    encoder several times over (24 GiB, past this machine's memory)."""
    structure = onnx.load(str(path), load_external_data=False)
    kept = float32_nodes(structure, config)
    if _has_data_file(path):
        with _shapes_from_dims():
            half = convert_float_to_float16(structure, keep_io_types=keep, node_block_list=kept)
        half = _filled(half, Path(path).parent)
    else:
        half = convert_float_to_float16(onnx.load(str(path)), keep_io_types=keep, node_block_list=kept)
    return _with_metadata(_float32_chains(half) if kept else half, structure)


@contextmanager
def _shapes_from_dims():
    """ONNX Runtime's converter reads a converted initializer's values only for the shape of its value
    info, which a tensor's dims give without reading them (they are in the data file, still float32)."""
    original = float16.make_value_info_from_tensor
    float16.make_value_info_from_tensor = lambda t: onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims)
    try:
        yield
    finally:
        float16.make_value_info_from_tensor = original


def _filled(half: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """Each initializer still in the float32 graph's data file read into the proto: in float16 where the
    converter made it so (rounded as it rounds: float16's range, a part of the tensor at a time), else as
    it is."""
    for tensor in half.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        where = {entry.key: entry.value for entry in tensor.external_data}
        offset, length = int(where.get("offset", 0)), int(where["length"])
        data = np.memmap(folder / where["location"], dtype=np.uint8, mode="r", offset=offset, shape=(length,))
        if tensor.data_type == onnx.TensorProto.FLOAT16:
            values, half_values = data.view(np.float32), np.empty(length // 4, np.float16)
            for start in range(0, values.size, CONVERTED_AT_ONCE):
                part = np.asarray(values[start : start + CONVERTED_AT_ONCE])
                half_values[start : start + CONVERTED_AT_ONCE] = float16.convert_np_to_float16(part)
            tensor.raw_data = half_values.tobytes()
        else:
            tensor.raw_data = data.tobytes()
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
    return half


def half_encoder(path: Path, config: ModelConfig) -> onnx.ModelProto:
    """The encoder with the transformer optimizer's fusions (attention, skip layer norm, gelu: fewer,
    larger kernels on CUDA), then converted to float16. T5's is converted as exported (the optimizer's
    fusions would hide its residual stream inside fused nodes), ONNX Runtime fusing at load time; so is
    one whose weights are in a data file (the optimizer would hold it several times over: 24 GiB for
    NLLB-200 1.3B's 3 GiB encoder)."""
    keep = list(encoder_outputs(config)) if config.task == "embedding" else ["last_hidden_state"]
    keep += [name for name in encoder_inputs(config) if name == "input_features"]  # the front-end's float32
    if config.norm == "rms" or _has_data_file(path):
        return _converted(path, keep, config)
    optimized = optimize_model(
        str(path), model_type="bert", num_heads=config.n_heads, hidden_size=config.d_model, opt_level=0
    )
    optimized.convert_float_to_float16(keep_io_types=keep)
    return _with_metadata(optimized.model, onnx.load(str(path), load_external_data=False))


def half_decoder(path: Path, config: ModelConfig, table_once: bool = True) -> onnx.ModelProto:
    """The decoder step in float16 (T5's residual stream float32), a tied output layer reading the token
    table (table_once; benchmarks/decoder_tables.py measures the other way); next_token (int64) and the
    logits stay as they are read."""
    half = _converted(path, ["logits"], config)
    return output_layer_reads_the_table(half) if config.tie_output and table_once else half


def output_layer_reads_the_table(model: onnx.ModelProto) -> onnx.ModelProto:
    """The MatMul whose weight is a token table's transposed copy, as a Gemm reading the table itself
    (transB), the copy dropped. The decoder's step takes the logits of each row's last position: the
    layer's input is (rows, d_model), the two dimensions Gemm takes."""
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    tables = {node.input[0] for node in model.graph.node if node.op_type == "Gather" and node.input[0] in initializers}
    readers = [name for node in model.graph.node for name in node.input]
    for index, node in enumerate(model.graph.node):
        weight = initializers.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is None or readers.count(weight.name) != 1:
            continue
        table = next((initializers[name] for name in tables if _transposed(initializers[name], weight)), None)
        if table is None:
            continue
        gemm = onnx.helper.make_node("Gemm", [node.input[0], table.name], list(node.output), node.name, transB=1)
        model.graph.node.remove(node)
        model.graph.node.insert(index, gemm)
        model.graph.initializer.remove(weight)
        return model
    raise ValueError("tie_output: no MatMul in the decoder reads a transposed copy of a token table")


def _transposed(table: onnx.TensorProto, weight: onnx.TensorProto) -> bool:
    """Whether weight holds table's values transposed (its shape first: most pairs differ there)."""
    if table.data_type != weight.data_type or list(table.dims) != list(weight.dims)[::-1]:
        return False
    return np.array_equal(onnx.numpy_helper.to_array(table).T, onnx.numpy_helper.to_array(weight))


def _with_metadata(half: onnx.ModelProto, original: onnx.ModelProto) -> onnx.ModelProto:
    props = {p.key: p.value for p in original.metadata_props}
    props["attnserve.precision"] = "fp16"
    onnx.helper.set_model_props(half, props)
    return half
