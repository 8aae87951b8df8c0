"""What a model directory's manifest says of each graph (its inputs and outputs) and of the libraries that
wrote it."""

from __future__ import annotations

import platform
from importlib import metadata

import onnx


def describe_graph(proto: onnx.ModelProto) -> dict:
    """Names, element types and shapes (symbolic axes by name) of a graph's inputs and outputs."""

    def describe(values):
        out = []
        for v in values:
            t = v.type.tensor_type
            shape = [d.dim_param or d.dim_value for d in t.shape.dim]
            out.append(
                {"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name, "shape": shape}
            )
        return out

    return {"inputs": describe(proto.graph.input), "outputs": describe(proto.graph.output)}


def library_versions() -> dict:
    versions = {"python": platform.python_version()}
    for package in (
        "attnserve",
        "torch",
        "onnx",
        "onnxruntime",
        "onnxruntime-gpu",
        "tokenizers",
        "sentencepiece",
        "safetensors",
    ):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return versions
