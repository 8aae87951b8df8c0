"""What a tied decoder's output layer costs held apart from the token table or reading it: the float16 graph's
bytes (what a GPU loads) each way, and each way's resident memory in a CPU session of the float32 and float16
graphs (the CPU's runtime packs the layer's weight ahead of the runs), each session in a fresh process.

    .venv/bin/python -m benchmarks.decoder_tables build/bench/m2m100-418m/attnserve

(the multilingual bench's model: `python -m benchmarks.multilingual_bench --build-only`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

from model.export.graph_writing import write_graph
from model.export.half_precision import half_decoder, output_layer_reads_the_table
from modeldir.external_data import data_file_name
from modeldir.files import open_model_dir

from .machine import describe, print_machine

RESIDENT = """
import sys, onnxruntime as ort
options = ort.SessionOptions()
options.intra_op_num_threads = 2
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
print(int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024)
"""


def resident_bytes(graph: Path) -> int:
    """A fresh process's resident memory once a CPU session of the graph is made."""
    out = subprocess.run([sys.executable, "-c", RESIDENT, str(graph)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def forms(source: Path, config):
    """(precision, how the output layer holds its weight, the graph; None: the exported file itself), each
    graph made when its turn comes (NLLB-sized ones are gigabytes)."""
    yield "fp32", "a transposed copy", None
    yield "fp32", "reading the table", output_layer_reads_the_table(onnx.load(str(source)))
    yield "fp16", "a transposed copy", half_decoder(source, config, table_once=False)
    yield "fp16", "reading the table", half_decoder(source, config)


def graph_bytes(graph: Path) -> int:
    """The graph's file and its data file beside it."""
    data = graph.parent / data_file_name(graph.name)
    return graph.stat().st_size + (data.stat().st_size if data.exists() else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path, help="an exported seq2seq model with a tied output layer")
    args = parser.parse_args()
    files = open_model_dir(args.model_dir)
    if not files.config.tie_output:
        parser.error(f"{args.model_dir}: its output layer is its own (tie_output false)")
    print_machine(describe(2))
    source = Path(files.decoder)
    with tempfile.TemporaryDirectory() as scratch:
        for precision, form, graph in forms(source, files.config):
            path = source
            if graph is not None:
                path = Path(scratch) / f"{precision}-{form.replace(' ', '-')}" / "decoder.onnx"
                path.parent.mkdir()
                write_graph(graph, path, "always")
                del graph
            figures = {
                "file_mib": round(graph_bytes(path) / 2**20, 1),
                "cpu_session_resident_mib": round(resident_bytes(path) / 2**20, 1),
            }
            print(f"{precision}, the output layer {form}: {json.dumps(figures)}", flush=True)


if __name__ == "__main__":
    main()
