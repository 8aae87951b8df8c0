"""One decoder layer's cross-attention, from the attention-map graph cut down at load to what that layer
needs (no later layer, no vocabulary projection, no other maps): a batch of sources and targets in, each
one's weights out. It places a translation's tags (tag alignment) where the Attention RPC is off."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx.helper
import onnx.utils

from modeldir.files import attention_inputs

log = logging.getLogger(__name__)
CROSS_OUTPUT = "cross_attention"  # the full graph's stacked cross-attention, (layers, batch, heads, T, S)


def alignment_layer(decoder_layers: int) -> int:
    """The last but one, where an unsupervised Transformer's attention agrees best with human alignments
    (Garg et al. 2019, "Jointly Learning to Align and Translate with Transformer Models")."""
    return max(decoder_layers - 2, 0)


def layer_output(graph: onnx.ModelProto, layer: int) -> str | None:
    """The tensor the export stacked as `layer`'s cross-attention (the Concat under the output, through
    the mask's Mul): (1, batch, heads, T, S). None where the graph is not laid out so."""
    made_by = {output: node for node in graph.graph.node for output in node.output}
    node = made_by.get(CROSS_OUTPUT)
    while node is not None and node.op_type != "Concat":
        node = made_by.get(node.input[0])
    if node is None or layer >= len(node.input):
        return None
    return node.input[layer]


def cut_graph(path, layer: int) -> tuple[bytes, bool]:
    """The attention-map graph cut down to `layer`'s cross-attention -> (its bytes, whether it was cut:
    else the whole graph, whose output stacks every layer)."""
    graph = onnx.load(str(path))
    output = layer_output(graph, layer)
    if output is None:
        log.warning("%s: no layer output found to cut the graph at; running it whole for tag alignment", path)
        return graph.SerializeToString(), False
    if output not in {v.name for v in graph.graph.value_info}:  # the extractor types its outputs from these
        graph.graph.value_info.append(onnx.helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, None))
    inputs = [i.name for i in graph.graph.input]
    cut = onnx.utils.Extractor(graph).extract_model(inputs, [output])
    return cut.SerializeToString(), True


class CrossAttentionRunner:
    """Keeps nothing between calls. session: of cut_graph's bytes (cut: at the layer every item names), or
    of the whole attention-map graph."""

    def __init__(self, session, cut: bool, task: str = "seq2seq"):
        self.session, self.cut, self.task = session, cut, task
        self.inputs = [i.name for i in session.get_inputs()]

    def run_batch(self, items: list[tuple[list[int], list[int], int]]) -> list[np.ndarray]:
        """Several inputs at once, each (source ids, target ids, layer), padded on the right under their
        masks: -> each one's cross-attention at the layer, heads averaged, (target, source)."""
        arrays = {}
        for names, rows in zip(
            (attention_inputs(self.task)[:2], attention_inputs(self.task)[2:]),
            ([item[0] for item in items], [item[1] for item in items]),
        ):
            width = max(len(row) for row in rows)
            ids, mask = np.zeros((len(rows), width), np.int64), np.zeros((len(rows), width), np.int64)
            for i, row in enumerate(rows):
                ids[i, : len(row)], mask[i, : len(row)] = row, 1
            arrays.update(zip(names, (ids, mask)))
        feeds = {name: arrays[name] for name in self.inputs}  # a cut graph may take fewer inputs
        (cross,) = self.session.run(None if self.cut else [CROSS_OUTPUT], feeds)
        out = []
        for b, (source, target, layer) in enumerate(items):
            weights = cross[0 if self.cut else layer, b, :, : len(target), : len(source)]
            out.append(weights.mean(axis=0))
        return out
