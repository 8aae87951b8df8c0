"""Generate the Python gRPC code in service/grpc_api/pb from protos/ (make proto; a test checks it is current)."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

PROTOS = Path(__file__).resolve().parent
# attnserve's own API, and the KServe v2 / Open Inference Protocol service (package `inference`).
SOURCES = ["attnserve/v1/inference.proto", "inference/open_inference.proto"]


def generate(out_dir: Path) -> list[Path]:
    """Write *_pb2.py, *_pb2.pyi and *_pb2_grpc.py into out_dir, with imports made package-relative."""
    from grpc_tools import protoc

    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for source in SOURCES:
            args = ["protoc", f"-I{PROTOS}", f"--python_out={tmp}", f"--pyi_out={tmp}", f"--grpc_python_out={tmp}"]
            if protoc.main([*args, str(PROTOS / source)]) != 0:
                raise RuntimeError(f"protoc failed on {source}")
        for generated in sorted(Path(tmp).rglob("*.py*")):
            text = re.sub(
                r"^from (attnserve\.v1|inference) import ", "from . import ", generated.read_text(), flags=re.M
            )
            target = Path(out_dir) / generated.name
            target.write_text(text)
            written.append(target)
    return written


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else PROTOS.parent / "service" / "grpc_api" / "pb"
    for path in generate(out):
        print(path)
