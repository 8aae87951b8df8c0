"""Graphs written to a model directory: their weights inside the .onnx file, or in one data file beside it
(ONNX external data, `<graph>.onnx.data`) where asked or where they would not fit in one protobuf (2 GiB:
NLLB-200 1.3B's and 3.3B's, M2M100 1.2B's and MADLAD-400 3B's graphs); and the data files a written graph
names, checked as the server checks them (modeldir/external_data.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import onnx

from modeldir.external_data import checked_data_files, data_file_name

PROTOBUF_LIMIT = 2 << 30  # bytes: the largest ONNX file with its weights inside it
# Weights past this go to a data file under "auto": below the limit, which the graph's own nodes and
# metadata count towards too (a float16 copy of a graph this size is half of it, and stays inside).
EXTERNAL_ABOVE = 1 << 30
ExternalData = Literal["auto", "always"]


def weight_bytes(proto: onnx.ModelProto) -> int:
    """The bytes of a graph's initializers, inside the proto or named in a data file."""
    total = 0
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            total += int(next((e.value for e in tensor.external_data if e.key == "length"), 0))
        else:
            total += tensor.ByteSize()
    return total


def write_graph(proto: onnx.ModelProto, path: Path, external_data: ExternalData = "auto") -> None:
    """Write `proto` at path: its weights in path's .data file where external_data says so (always, or
    auto: over EXTERNAL_ABOVE), else inside. A data file an earlier export left there goes first (onnx
    appends to one). Writing external data moves the weights out of `proto`: it describes the graph
    afterwards, it does not run."""
    path = Path(path)
    data = path.parent / data_file_name(path.name)
    data.unlink(missing_ok=True)
    if external_data == "always" or weight_bytes(proto) > EXTERNAL_ABOVE:
        onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name)
        if data.exists():  # (none where every tensor is small: onnx keeps those inside)
            data.chmod(path.stat().st_mode & 0o777)  # onnx makes it private; whoever reads the graph reads it
    else:
        onnx.save_model(proto, str(path))


def data_files(model_dir: Path, graphs: list[str]) -> list[str]:
    """The data files the written graphs (relative to model_dir) name, relative to model_dir: what the
    manifest lists beside them."""
    return [data for graph in graphs for data in checked_data_files(model_dir, graph)]
