"""The cache graphs of a seq2seq model: three tiny ONNX graphs that the server runs on the device its
cache lives on, so that no cache row ever goes through the host (docs/kv_cache.md, "On the device").

- moves: the filled positions of self-attention rows, and whole cross-attention rows, copied to other
  rows (a sequence that leaves makes room for the last row's; a beam takes its parent's row). GatherND
  or Gather, then ScatterND.
- cross: the encoder's cross-attention K/V of a batch of sources written into their sequences' rows,
  padded to the buffers' source capacity. Gather, Pad, ScatterND.
- resize: the cross buffers' running rows laid out anew for another source capacity. Pad (negative pads
  cut: a smaller capacity once the longest sources have left).

Every cache buffer of moves and cross is bound as the graph's input and as its output at once: ScatterND
then skips its copy of the input (ONNX Runtime checks the pointers, on the CPU and on CUDA) and writes
only the scattered rows, in place.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from modeldir.files import CACHE_IR_VERSION, OPSET, cache_names

DTYPES = {"fp32": TensorProto.FLOAT, "fp16": TensorProto.FLOAT16}


def _buffer(name: str, dtype: int, length: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, ["rows", "heads", length, "d_head"])


def _index(name: str, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT64, shape)


def _model(nodes, name: str, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=CACHE_IR_VERSION)
    onnx.checker.check_model(model)
    return model


def moves_graph(n_layers: int, precision: str) -> onnx.ModelProto:
    """Inputs: self_from and self_to (P, 3), the (row, head, position) of each self-attention position
    copied, from and to: only the filled ones, so that a copy costs what a row holds, not its width (a
    beam's row early in a 256-token row holds a few); cross_from (Q) and cross_to (Q, 1), whole rows of
    the cross buffers (P or Q may be 0); every buffer. Outputs: the buffers, moved."""
    dtype = DTYPES[precision]
    nodes, inputs, outputs = [], [_index("self_from", ["p", 3]), _index("self_to", ["p", 3])], []
    inputs += [_index("cross_from", ["q"]), _index("cross_to", ["q", 1])]
    for kind, length in (("self", "target"), ("cross", "source")):
        for name in cache_names(kind, n_layers):
            picked = f"{name}/picked"
            if kind == "self":
                nodes.append(helper.make_node("GatherND", [name, "self_from"], [picked]))
            else:
                nodes.append(helper.make_node("Gather", [name, "cross_from"], [picked], axis=0))
            nodes.append(helper.make_node("ScatterND", [name, f"{kind}_to", picked], [f"moved_{name}"]))
            inputs.append(_buffer(name, dtype, length))
            outputs.append(_buffer(f"moved_{name}", dtype, length))
    return _model(nodes, "cache_moves", inputs, outputs)


def cross_graph(n_layers: int, precision: str) -> onnx.ModelProto:
    """Inputs: rows (R, 1) to write, sources (R) the batch item of the encoder output each row takes
    (several rows take the same source for a beam search), the cross buffers (N, H, C, Dh), and the
    encoder's encoded_key.i / encoded_value.i (B, H, S, Dh), S <= C. Outputs: the cross buffers."""
    dtype = DTYPES[precision]
    zeros = helper.make_tensor("six_zeros", TensorProto.INT64, [6], [0] * 6)
    zero = helper.make_tensor("one_zero", TensorProto.INT64, [1], [0])
    nodes, outputs = [], []
    inputs = [_index("rows", ["r", 1]), _index("sources", ["r"])]
    for name, encoded in zip(cache_names("cross", n_layers), cache_names("encoded", n_layers)):
        inputs += [_buffer(name, dtype, "capacity"), _buffer(encoded, dtype, "source")]
        # Pad along the source axis from the encoder's length to the buffer's capacity.
        nodes += [
            helper.make_node("Shape", [name], [f"{name}/capacity"], start=2, end=3),
            helper.make_node("Shape", [encoded], [f"{name}/length"], start=2, end=3),
            helper.make_node("Sub", [f"{name}/capacity", f"{name}/length"], [f"{name}/missing"]),
            helper.make_node("Concat", ["six_zeros", f"{name}/missing", "one_zero"], [f"{name}/pads"], axis=0),
            helper.make_node("Gather", [encoded, "sources"], [f"{name}/picked"], axis=0),
            helper.make_node("Pad", [f"{name}/picked", f"{name}/pads"], [f"{name}/padded"]),
            helper.make_node("ScatterND", [name, "rows", f"{name}/padded"], [f"written_{name}"]),
        ]
        outputs.append(_buffer(f"written_{name}", dtype, "capacity"))
    return _model(nodes, "cache_cross", inputs, outputs, [zeros, zero])


def resize_graph(n_layers: int, precision: str) -> onnx.ModelProto:
    """Inputs: capacity (1) the new source capacity, and the running rows of the cross buffers (N, H, C, Dh),
    each row's source within both. Outputs: resized_cross_key.i ... (N, H, capacity, Dh), bound to the new
    buffers."""
    dtype = DTYPES[precision]
    zeros = helper.make_tensor("six_zeros", TensorProto.INT64, [6], [0] * 6)
    zero = helper.make_tensor("one_zero", TensorProto.INT64, [1], [0])
    nodes, inputs, outputs = [], [_index("capacity", [1])], []
    for name in cache_names("cross", n_layers):
        nodes += [
            helper.make_node("Shape", [name], [f"{name}/old"], start=2, end=3),
            helper.make_node("Sub", ["capacity", f"{name}/old"], [f"{name}/missing"]),
            helper.make_node("Concat", ["six_zeros", f"{name}/missing", "one_zero"], [f"{name}/pads"], axis=0),
            helper.make_node("Pad", [name, f"{name}/pads"], [f"resized_{name}"]),
        ]
        inputs.append(_buffer(name, dtype, "old"))
        outputs.append(_buffer(f"resized_{name}", dtype, "capacity"))
    return _model(nodes, "cache_resize", inputs, outputs, [zeros, zero])


CACHE_GRAPHS = {"cache_moves": moves_graph, "cache_cross": cross_graph, "cache_resize": resize_graph}
