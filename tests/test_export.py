"""The exporter: what it writes, deterministically, and the CLI around it."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import onnx
import pytest

from model.architecture.random_model import random_model_dir
from model.export.model_dir import export_model_dir
from modeldir.config import ModelConfig
from modeldir.files import (
    ATTENTION_FILE,
    DECODER_FILE,
    ENCODER_FILE,
    MANIFEST_FILE,
    exported_precisions,
    graph_files,
    sha256_file,
)

from .parity_configs import EMBEDDING_CONFIGS, SEQ2SEQ_CONFIGS


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, check=True)


@pytest.mark.slow  # exports models
def test_cli_export_writes_graphs_manifest_and_progress(tmp_path):
    model_dir = random_model_dir(SEQ2SEQ_CONFIGS["h3-d48-pre"], tmp_path / "m", "m")
    result = run_cli("export", str(model_dir))
    steps = [line for line in result.stderr.splitlines() if line.startswith("[export m ")]
    assert [s.split("]")[0] for s in steps] == [f"[export m {i}/5" for i in range(1, 6)]
    assert all(s.endswith(" s") for s in steps)

    manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    assert manifest["opset"] == 18 and manifest["task"] == "seq2seq"
    for relative, digest in manifest["sha256"].items():
        assert sha256_file(model_dir / relative) == digest
    assert set(manifest["sha256"]) == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        ATTENTION_FILE,
        *graph_files("seq2seq").values(),
    }
    assert set(graph_files("seq2seq").values()) == {
        ENCODER_FILE,
        DECODER_FILE,
        "onnx/cache_moves.onnx",
        "onnx/cache_cross.onnx",
        "onnx/cache_resize.onnx",
    }
    assert "fp16" not in manifest  # only when asked for
    assert 0 < manifest["parity"]["encoder_max_abs_diff"] < 1e-4
    assert 0 < manifest["parity"]["decoder_logits_max_abs_diff"] < 1e-4
    assert 0 < manifest["parity"]["attention_max_abs_diff"] < 1e-5
    assert manifest["parity"]["attention_row_sum_max_error"] < 1e-5 and manifest["parity"]["attention_masked_max"] == 0
    assert {"torch", "onnx", "tokenizers"} <= set(manifest["versions"])

    decoder = manifest["graphs"]["decoder"]
    names = [i["name"] for i in decoder["inputs"]]
    assert names[:7] == [
        "input_ids",
        "past_lengths",
        "source_lengths",
        "logit_rows",
        "total_length",
        "query_slots",
        "row_slots",
    ]
    assert names[-2:] == ["cross_key.2", "cross_value.2"]
    shapes = {i["name"]: i["shape"] for i in decoder["inputs"] + decoder["outputs"]}
    assert shapes["past_key.0"] == shapes["present_value.2"] == ["batch", 3, "buffer", 16]
    assert shapes["past_lengths"] == shapes["row_slots"] == shapes["next_token"] == ["batch"]
    assert shapes["source_lengths"] == ["groups"] and shapes["cross_key.0"] == ["groups", 3, "source", 16]
    assert shapes["query_slots"] == ["slots"]
    assert shapes["logits"] == ["logit_rows", 257]

    attention = manifest["graphs"]["attention"]
    assert [i["name"] for i in attention["inputs"]] == ["input_ids", "attention_mask", "target_ids", "target_mask"]
    shapes = {o["name"]: o["shape"] for o in attention["outputs"]}
    assert shapes == {
        "encoder_self_attention": [3, "batch", 3, "source", "source"],
        "decoder_self_attention": [3, "batch", 3, "target", "target"],
        "cross_attention": [3, "batch", 3, "target", "source"],
        "predicted_ids": ["batch", "target"],
    }


def test_config_is_in_the_onnx_metadata(exported):
    model = exported["h8-d512-pre"]
    graphs = [
        (model.files.encoder, "encoder"),
        (model.files.decoder, "decoder"),
        (model.dir / ATTENTION_FILE, "attention"),
    ]
    for path, graph in graphs:
        props = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
        assert props["attnserve.graph"] == graph and props["attnserve.name"] == "h8-d512-pre"
        assert ModelConfig.from_dict(json.loads(props["attnserve.config"])) == model.config


def test_graphs_are_single_files(exported):
    for model in exported.values():
        files = sorted(p.name for p in (model.dir / "onnx").iterdir())
        graphs = sorted(["attention.onnx", *(f.split("/")[-1] for f in graph_files(model.config.task).values())])
        assert files == graphs


@pytest.mark.slow  # exports models
def test_export_is_deterministic(tmp_path):
    """The same weights give byte-identical ONNX files, also from another process."""
    config = SEQ2SEQ_CONFIGS["h4-d96-post-4layers"]
    first = random_model_dir(config, tmp_path / "a", "same", seed=7)
    second = random_model_dir(config, tmp_path / "b", "same", seed=7)
    export_model_dir(first, progress_stream=io.StringIO())
    run_cli("export", str(second))
    for artifact in (*graph_files("seq2seq").values(), ATTENTION_FILE, "model.safetensors"):
        assert (first / artifact).read_bytes() == (second / artifact).read_bytes(), artifact


@pytest.mark.slow  # exports models
@pytest.mark.parametrize("order", ["option first", "directory first"])
def test_cli_export_takes_precision_before_or_after_the_directory(tmp_path, order):
    model_dir = random_model_dir(EMBEDDING_CONFIGS["emb-h6-d48-cls-pre"], tmp_path / "e", "e")
    option = ["--precision", "fp16"]
    run_cli("export", *(option + [str(model_dir)] if order == "option first" else [str(model_dir)] + option))
    manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    assert "fp16" in manifest and "int8" not in manifest


@pytest.mark.parametrize(
    "argv, message",
    [
        (["export", "--precision", "fp16"], "give one model directory"),
        (["export", "a", "--precision", "fp16", "b"], "give one model directory, not a and b"),
        (["export", "--precision", "fp17", "a"], "give one or more of fp32, fp16, int8, not ['fp17', 'a']"),
        (["export", "--precision", "fp16", "a", "b"], "not ['fp16', 'a', 'b']"),
    ],
)
def test_cli_export_refuses_what_it_cannot_read(argv, message):
    result = subprocess.run([sys.executable, "-m", "cli", *argv], capture_output=True, text=True)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def op_counts(path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def test_serving_graphs_run_attention_as_fused_ops_in_every_precision(exported, minilm_dir, numbers_dir):
    """The encoder's self-attention and the decoder's cross-attention are one com.microsoft.MultiHeadAttention
    node each, the decoder's self-attention one GroupQueryAttention, in every graph set: no Softmax is left
    for ONNX Runtime to run as separate kernels. The attention-map graph keeps the plain form (it returns the
    weights)."""
    dirs = [m.dir for m in exported.values()] + [minilm_dir, numbers_dir]
    checked = 0
    for model_dir in dirs:
        manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
        c = manifest["config"]
        for graph_set in exported_precisions(manifest):
            files = graph_files(manifest["task"], graph_set)
            encoder = op_counts(model_dir / files["encoder"])
            assert encoder.get("MultiHeadAttention") == c["n_encoder_layers"] and "Softmax" not in encoder
            if manifest["task"] == "seq2seq":
                decoder = op_counts(model_dir / files["decoder"])
                assert decoder.get("MultiHeadAttention") == decoder.get("GroupQueryAttention") == c["n_decoder_layers"]
                assert "Softmax" not in decoder
            checked += 1
        attention = op_counts(model_dir / ATTENTION_FILE)
        assert "MultiHeadAttention" not in attention and attention["Softmax"] >= c["n_encoder_layers"]
    assert checked >= len(dirs) + 6  # float16 and both int8 sets of the bundled two


# Inputs that ONNX Runtime's CUDA kernels read on the host (their CPU-input slots): a value computed from
# shapes may go there without a copy node. Everything else a CUDA kernel reads is device memory.
HOST_INPUTS = {
    "Reshape": {1},
    "Expand": {1},
    "Range": {0, 1, 2},
    "ConstantOfShape": {0},
    "Slice": {1, 2, 3, 4},
    "Tile": {1},
    "Unsqueeze": {1},
    "Squeeze": {1},
    "ReduceSum": {1},
    "ReduceMax": {1},
    "Pad": {1, 2},
    "Split": {1},
    "GroupQueryAttention": {6},
}
# Ops that ONNX Runtime leaves on the host when all their inputs are shape values (shape arithmetic).
SHAPE_ARITHMETIC = {
    "Gather",
    "Cast",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Slice",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Equal",
    "Where",
    "ConstantOfShape",
}


def shape_values_read_as_device_data(graph: onnx.GraphProto) -> list[tuple[str, str]]:
    """(node, input) where a value computed from tensor shapes on the host feeds a device input: on CUDA
    each is a MemcpyFromHost node, and a session with a copy node cannot capture CUDA graphs."""
    constants = {i.name for i in graph.initializer} | {
        o for n in graph.node if n.op_type == "Constant" for o in n.output
    }
    on_host = {o for n in graph.node if n.op_type == "Shape" for o in n.output}
    for node in graph.node:  # nodes come in topological order
        inputs = [i for i in node.input if i]
        if node.op_type in SHAPE_ARITHMETIC and all(i in on_host or i in constants for i in inputs):
            if any(i in on_host for i in inputs):
                on_host.update(node.output)
    found = []
    for node in graph.node:
        if set(node.output) <= on_host:
            continue  # shape arithmetic itself
        for slot, name in enumerate(node.input):
            if name in on_host and slot not in HOST_INPUTS.get(node.op_type, set()):
                found.append((node.name, name))
    return found


def test_decoder_steps_read_no_shape_value_as_device_data(exported, numbers_dir):
    """The decoder step of every graph set can be captured as a CUDA graph: no value computed from shapes
    goes into device data (GroupQueryAttention's step count comes from a Range, which runs on the device)."""
    checked = 0
    for model_dir in [m.dir for m in exported.values() if m.files.task == "seq2seq"] + [numbers_dir]:
        manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
        for graph_set in exported_precisions(manifest):
            graph = onnx.load(str(model_dir / graph_files("seq2seq", graph_set)["decoder"])).graph
            assert shape_values_read_as_device_data(graph) == [], (model_dir.name, graph_set)
            checked += 1
    assert checked >= 4


def test_a_shape_value_added_to_device_data_is_found():
    """The check finds what it looks for: the step count as the decoder computed it before, a shape's
    dimension cast and added to an input, is a copy node on CUDA."""
    h = onnx.helper
    nodes = [
        h.make_node("Shape", ["q"], ["shape"]),
        h.make_node("Gather", ["shape", "one"], ["steps"], axis=0),
        h.make_node("Cast", ["steps"], ["steps32"], to=onnx.TensorProto.INT32),
        h.make_node("Add", ["lengths", "steps32"], ["seqlens"], name="add"),
        h.make_node("Reshape", ["q", "shape"], ["same"], name="reshape"),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [
            h.make_tensor_value_info("q", onnx.TensorProto.FLOAT, ["b", "t"]),
            h.make_tensor_value_info("lengths", onnx.TensorProto.INT32, ["b"]),
        ],
        [
            h.make_tensor_value_info("seqlens", onnx.TensorProto.INT32, ["b"]),
            h.make_tensor_value_info("same", onnx.TensorProto.FLOAT, ["b", "t"]),
        ],
        [h.make_tensor("one", onnx.TensorProto.INT64, [], [1])],
    )
    assert shape_values_read_as_device_data(graph) == [("add", "steps32")]


def test_a_build_makes_again_a_bundled_model_an_older_exporter_wrote(minilm_dir, copy_of):
    """`attnserve build` keeps a bundled model only when every precision's files are there and right and
    this revision of the exporter wrote them: one from before the int8 ranges is exported again."""
    from cli.build import is_current

    model_dir = copy_of(minilm_dir)
    assert is_current(model_dir)
    manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    assert "int8_ranges" in manifest
    older = {key: value for key, value in manifest.items() if key not in ("export_revision", "int8_ranges")}
    (model_dir / MANIFEST_FILE).write_text(json.dumps(older))
    assert not is_current(model_dir)
    (model_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    (model_dir / graph_files("embedding", "fp16")["encoder"]).unlink()
    assert not is_current(model_dir)
