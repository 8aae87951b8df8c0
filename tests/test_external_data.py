"""Models over 2 GB: graphs whose weights are in a data file beside them (ONNX external data). Miniatures
of NLLB-200 3.3B's and MADLAD-400 3B's shapes (NLLB: d_ff four times d_model, heads of 16; MADLAD: heads
twice d_model wide in total, a gated feed-forward, target tokens), exported with every graph's weights in
data files as their full shapes are (float32, float16, int8), listed in the manifest, served as
transformers generates; graphs over 1 GiB written so by default, smaller ones inside; a graph that names a
data file outside its model directory (by a relative path, an absolute one, or through a link), or one
the manifest does not list, or altered, refused by name before any session reads it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from model.export import graph_writing
from model.export import model_dir as export
from model.export.model_dir import export_model_dir
from model.families.multilingual.importer import import_multilingual
from model.families.multilingual.random_checkpoint import MultilingualShape, random_multilingual_checkpoint
from model.families.multilingual.reference import MultilingualReference
from model.families.t5.importer import import_t5
from model.families.t5.random_checkpoint import T5Shape, random_t5_checkpoint
from modeldir.files import MANIFEST_FILE, ModelFilesError, open_model_dir
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_process import LOCAL_PORTS
from testing.server_thread import ServerThread

from .slow_tests import slow_fixture

transformers = pytest.importorskip("transformers")

NLLB_3B = MultilingualShape("nllb", d_model=64, heads=4, encoder_layers=2, decoder_layers=2, d_ff=256)
MADLAD_3B = T5Shape(d_model=32, d_kv=16, heads=4, d_ff=256, languages=("de", "fr", "es"))
TEXTS = ["three hundred and twelve", "forty-five thousand and six", "nine", "seven hundred"]
MAX_NEW = 12
GRAPHS = ("encoder", "decoder")


@slow_fixture(scope="module")
def miniatures(tmp_path_factory):
    """name -> (the transformers checkpoint, our model directory, exported with every graph's weights in
    data files, in float32, float16 and int8)."""
    root = tmp_path_factory.mktemp("external")
    nllb = random_multilingual_checkpoint(root / "nllb-hf", NLLB_3B, seed=5)
    madlad = random_t5_checkpoint(root / "madlad-hf", MADLAD_3B, seed=6)
    out = {
        "nllb": (nllb, import_multilingual(nllb, root / "nllb", "nllb")),
        "madlad": (madlad, import_t5(madlad, root / "madlad", "madlad")),
    }
    for _, model_dir in out.values():
        export_model_dir(model_dir, progress_stream=io.StringIO(), reduced=("fp16", "int8"), external_data="always")
    return out


def test_every_graph_keeps_its_weights_in_a_listed_data_file(miniatures):
    for _, model_dir in miniatures.values():
        manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
        for folder in ("onnx", "onnx/fp16", "onnx/int8", "onnx/int8_reduced_range"):
            for graph in GRAPHS:
                data = f"{folder}/{graph}.onnx.data"
                assert manifest["sha256"][data] == hashlib.sha256((model_dir / data).read_bytes()).hexdigest()
                # the graph itself holds no tensor of 1 KiB or more (onnx keeps smaller ones inside)
                proto = onnx.load(str(model_dir / folder / f"{graph}.onnx"), load_external_data=False)
                assert max(len(t.raw_data) for t in proto.graph.initializer) < 1024
        for precision in ("fp32", "fp16", "int8"):
            open_model_dir(model_dir, precision=precision)  # every checksum, the data files' too
        assert manifest["parity"]["decoder_logits_max_abs_diff"] < 1e-4
        assert manifest["fp16"]["parity"]["decoder_logits_max_abs_diff"] < 0.2  # float16 rounding, as inside


def generated(server, model: str, target: str, source: str = "") -> list[list[int]]:
    stub = server.stub()
    params = pb.GenerationParams(max_new_tokens=MAX_NEW, num_beams=1)
    calls = [
        pb.GenerateRequest(model=model, input=t, source_language=source, target_language=target, params=params)
        for t in TEXTS
    ]
    return [list(stub.Generate(call, timeout=60).token_ids) for call in calls]


def test_the_miniatures_serve_as_transformers_generates(miniatures):
    (nllb_source, nllb_dir), (madlad_source, madlad_dir) = miniatures["nllb"], miniatures["madlad"]
    nllb = MultilingualReference(nllb_source, False, "eng_Latn", MAX_NEW)
    madlad = transformers.T5ForConditionalGeneration.from_pretrained(madlad_source).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(madlad_source)
    expected_madlad = []
    for text in TEXTS:
        with torch.no_grad():
            (row,) = madlad.generate(**tokenizer([f"<2de> {text}"], return_tensors="pt"), max_new_tokens=MAX_NEW)
        ids = row[1:].tolist()
        expected_madlad.append(ids[: ids.index(1)] if 1 in ids else ids)
    server = ServerThread([nllb_dir, madlad_dir], max_new_tokens=MAX_NEW + 1)
    try:
        assert generated(server, "nllb", "fra_Latn", "eng_Latn") == [
            ids for ((ids, _),) in nllb.hf_n_best(TEXTS, "fra_Latn")
        ]
        assert generated(server, "madlad", "de") == expected_madlad
    finally:
        server.close()
    server = ServerThread([nllb_dir, madlad_dir], max_new_tokens=MAX_NEW + 1, precision="int8")
    try:  # the 8-bit graphs, their weights in data files too, serve
        assert all(generated(server, "madlad", "fr")) and all(generated(server, "nllb", "deu_Latn", "eng_Latn"))
    finally:
        server.close()


def test_auto_puts_the_weights_of_large_graphs_in_data_files_only(miniatures, tmp_path, monkeypatch):
    """As the full shapes export (their graphs over 1 GiB), shown with the bound lowered under the
    miniature's decoder and over its encoder."""
    _, model_dir = miniatures["nllb"]
    copy = tmp_path / "nllb"
    shutil.copytree(model_dir, copy, ignore=shutil.ignore_patterns("onnx", MANIFEST_FILE))
    sizes = {graph: (model_dir / "onnx" / f"{graph}.onnx.data").stat().st_size for graph in GRAPHS}
    assert sizes["decoder"] > sizes["encoder"]
    bound = (sizes["encoder"] + sizes["decoder"]) // 2
    monkeypatch.setattr(graph_writing, "EXTERNAL_ABOVE", bound)
    monkeypatch.setattr(export, "EXTERNAL_ABOVE", bound)
    manifest = export_model_dir(copy, progress_stream=io.StringIO())
    assert "onnx/decoder.onnx.data" in manifest["sha256"] and "onnx/encoder.onnx.data" not in manifest["sha256"]
    assert not (copy / "onnx" / "encoder.onnx.data").exists()
    open_model_dir(copy)


def test_float16_from_a_data_file_equals_the_converter_given_every_weight(miniatures, tmp_path):
    """A graph in a data file is converted without its weights, then they are rounded a part at a time:
    the float16 graphs equal those ONNX Runtime's converter makes of the graph whole (MADLAD's: T5's
    float32 residual stream kept in both)."""
    from onnx import numpy_helper

    _, model_dir = miniatures["madlad"]
    inside = tmp_path / "madlad"
    shutil.copytree(model_dir, inside, ignore=shutil.ignore_patterns("onnx", MANIFEST_FILE))
    export_model_dir(inside, progress_stream=io.StringIO(), reduced=("fp16",))
    for graph in GRAPHS:
        streamed, whole = (onnx.load(str(d / "onnx" / "fp16" / f"{graph}.onnx")) for d in (model_dir, inside))
        assert [n.op_type for n in streamed.graph.node] == [n.op_type for n in whole.graph.node]
        weights = [{t.name: numpy_helper.to_array(t) for t in g.graph.initializer} for g in (streamed, whole)]
        assert weights[0].keys() == weights[1].keys()
        for name, values in weights[0].items():
            assert values.dtype == weights[1][name].dtype and (values == weights[1][name]).all(), name
        kinds = {v.dtype for v in weights[0].values()}
        assert {np.dtype(np.float16), np.dtype(np.float32)} <= kinds  # float16 weights, and T5's kept float32 ones


def relocate(model_dir: Path, graph: str, location: str) -> None:
    """Point every tensor of model_dir/graph at `location`, and list the graph's new checksum (the manifest
    consistent, as a crafted directory would be)."""
    path = model_dir / graph
    proto = onnx.load(str(path), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save_model(proto, str(path))
    manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    manifest["sha256"][graph] = hashlib.sha256(path.read_bytes()).hexdigest()
    (model_dir / MANIFEST_FILE).write_text(json.dumps(manifest))


@pytest.mark.parametrize("case", ["relative", "absolute", "link", "unlisted", "altered"])
def test_data_files_outside_the_directory_or_the_manifest_are_refused(miniatures, tmp_path, case):
    _, model_dir = miniatures["nllb"]
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    secret = tmp_path / "secret.bin"
    shutil.copyfile(copy / "onnx" / "encoder.onnx.data", secret)  # readable weights: only our check stops it
    graph = "onnx/encoder.onnx"
    if case == "relative":
        relocate(copy, graph, "../../secret.bin")
        reason = "external data at '../../secret.bin' lies outside the model directory"
    elif case == "absolute":
        relocate(copy, graph, str(secret))
        reason = f"external data at '{secret}': not a path relative to its folder"
    elif case == "link":
        (copy / "onnx" / "encoder.onnx.data").unlink()
        os.symlink(secret, copy / "onnx" / "encoder.onnx.data")
        reason = "external data at 'encoder.onnx.data' lies outside the model directory"
    elif case == "unlisted":
        os.rename(copy / "onnx" / "encoder.onnx.data", copy / "onnx" / "other.data")
        relocate(copy, graph, "other.data")
        reason = "no checksum for onnx/other.data"
    else:
        with open(copy / "onnx" / "encoder.onnx.data", "r+b") as data:
            data.write(b"\x01\x02\x03\x04")
        reason = "encoder.onnx.data: sha256 .* does not match"
    with pytest.raises(ModelFilesError, match=reason):
        open_model_dir(copy)
    if case == "relative":  # and the server, as users start it, says so and stops
        result = subprocess.run(
            [sys.executable, "-m", "cli", "serve", *LOCAL_PORTS, "--models", str(copy)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 1 and "lies outside the model directory" in result.stderr
