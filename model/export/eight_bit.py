"""8-bit serving graphs for the CPU, made from the exported float32 ones with ONNX Runtime's dynamic
quantization: the weight MatMuls get int8 weights, scaled per output channel, and their activations are
quantized as each call runs (DynamicQuantizeMatMul: integer dot products, VNNI where the CPU has it).

Chosen per graph with figures (docs/benchmarks.md, "8-bit"): weight-only 8-bit (MatMulNBits) was slower
than dynamic quantization at every batch on this CPU, and as accurate only where dynamic quantization
also passes. An embedding model keeps its feed-forward output projections in float32: their inputs (the
activation's outputs) carry outliers that one scale per tensor cannot hold, and quantizing them took
MiniLM below the quality bars (mean cosine 0.993 on 2,000 real sentences, against 0.996 without them).
The attention score products (no weights) stay float32 everywhere; so do embeddings (Gather) and the
cache (the decoder's K/V buffers and its GroupQueryAttention are float32).
"""

from __future__ import annotations

import logging
import tempfile
from contextlib import contextmanager
from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

from modeldir.config import ModelConfig

# Our exporter names each layer's feed-forward output projection .../feed_forward/w_2/MatMul.
FEED_FORWARD_OUT = "/feed_forward/w_2/"


def weight_matmuls(model: onnx.ModelProto, keep_float: tuple[str, ...] = ()) -> list[str]:
    """Names of the MatMul nodes whose second input is a weight (an initializer), but those named in
    keep_float."""
    weights = {i.name for i in model.graph.initializer}
    return [
        n.name
        for n in model.graph.node
        if n.op_type == "MatMul" and n.input[1] in weights and not any(part in n.name for part in keep_float)
    ]


def eight_bit(source: Path, scratch: Path, config: ModelConfig, reduce_range: bool = False) -> onnx.ModelProto:
    """The graph at `source` quantized (the quantizer writes it in a folder under scratch, its weights in a
    file beside it, whatever their size: it writes no graph past 2 GiB otherwise). reduce_range: weights in
    7 bits, for x86 CPUs without VNNI (modeldir/files.py, GRAPH_SETS)."""
    model = onnx.load(str(source))
    keep = (FEED_FORWARD_OUT,) if config.task == "embedding" else ()
    with tempfile.TemporaryDirectory(dir=scratch) as folder, _quiet_root_logger():
        # (the tool suggests pre-processing, which our exported graphs do not need)
        target = Path(folder) / "int8.onnx"
        quantize_dynamic(
            model,
            target,
            nodes_to_quantize=weight_matmuls(model, keep),
            per_channel=True,
            weight_type=QuantType.QInt8,
            reduce_range=reduce_range,
            use_external_data_format=True,
        )
        written = onnx.load(str(target))
    props = {p.key: p.value for p in model.metadata_props}
    onnx.helper.set_model_props(written, {**props, "attnserve.precision": "int8"})
    return written


@contextmanager
def _quiet_root_logger():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
