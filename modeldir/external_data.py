"""A graph's weights in a data file beside it (ONNX external data, for graphs over protobuf's 2 GiB): the
files a graph's tensors name, each allowed only inside the model directory (onnx's and ONNX Runtime's
path-traversal CVEs: a graph must not make the server read a file elsewhere), as the checks of
modeldir/files.py apply them. onnx is read here without the weights, which stay on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path, PurePosixPath


class ExternalDataError(ValueError):
    """A data file a graph names that the server refuses to read, with the reason."""


def data_file_name(graph: str) -> str:
    """The data file the exporter writes beside a graph: onnx/encoder.onnx -> encoder.onnx.data."""
    return PurePosixPath(graph).name + ".data"


def _tensors(graph) -> Iterator:
    """Every tensor of a graph that may carry external data: initializers, and constants in its nodes
    and their subgraphs."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for subgraph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                yield from _tensors(subgraph)


def external_locations(path: Path) -> list[str]:
    """The data files a graph's tensors name, as written in it (relative to the graph's folder), each once."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    found = []
    for tensor in _tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            found.append(location)
    return list(dict.fromkeys(found))


def checked_data_files(root: Path, graph: str) -> list[str]:
    """The data files of the graph at root/graph, as paths relative to root; ExternalDataError for one
    named by an absolute path, or that lies outside root once its links are followed."""
    root = Path(root)
    folder = (root / graph).parent
    inside = root.resolve()
    files = []
    for location in external_locations(root / graph):
        if not location or PurePosixPath(location).is_absolute() or Path(location).is_absolute():
            raise ExternalDataError(f"{root / graph}: external data at {location!r}: not a path relative to its folder")
        resolved = (folder / location).resolve()
        if not resolved.is_relative_to(inside):
            raise ExternalDataError(
                f"{root / graph}: external data at {location!r} lies outside the model directory {root}"
            )
        files.append(resolved.relative_to(inside).as_posix())
    return files
