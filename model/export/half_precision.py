"""Half-precision (float16) serving graphs, made from the exported float32 ones with ONNX Runtime's own
tools: its transformer optimizer's fusions for the encoder, and its float16 converter for every graph.

What stays float32: the graphs' float inputs and outputs that the serving code reads as float32 (an
embedding model's vectors, the decoder's logits, last_hidden_state), and inside the graphs what ONNX
Runtime computes in float32 anyway (LayerNormalization's statistics: stash_type; GroupQueryAttention's
and the CUDA softmax's accumulation). The cache buffers and the cross-attention K/V the encoder hands the
decoder are float16: they are the cache, and float32 there would double its memory.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnxruntime.transformers.float16 import convert_float_to_float16
from onnxruntime.transformers.optimizer import optimize_model

from modeldir.config import ModelConfig
from modeldir.files import encoder_inputs, encoder_outputs


def half_encoder(path: Path, config: ModelConfig) -> onnx.ModelProto:
    """The encoder with the transformer optimizer's fusions (attention, skip layer norm, gelu: fewer,
    larger kernels on CUDA), then converted to float16."""
    optimized = optimize_model(
        str(path), model_type="bert", num_heads=config.n_heads, hidden_size=config.d_model, opt_level=0
    )
    keep = list(encoder_outputs(config)) if config.task == "embedding" else ["last_hidden_state"]
    keep += [name for name in encoder_inputs(config) if name == "input_features"]  # the front-end's float32
    optimized.convert_float_to_float16(keep_io_types=keep)
    return _with_metadata(optimized.model, onnx.load(str(path)))


def half_decoder(path: Path) -> onnx.ModelProto:
    """The decoder step in float16; next_token (int64) and the logits stay as they are read."""
    model = onnx.load(str(path))
    half = convert_float_to_float16(model, keep_io_types=["logits"])
    return _with_metadata(half, model)


def _with_metadata(half: onnx.ModelProto, original: onnx.ModelProto) -> onnx.ModelProto:
    props = {p.key: p.value for p in original.metadata_props}
    props["attnserve.precision"] = "fp16"
    onnx.helper.set_model_props(half, props)
    return half
