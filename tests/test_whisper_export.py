"""Whisper exported as our seq2seq graphs: the encoder reads log-mel frames (B, n_mels, frames) float32 in
every precision and hands the decoder each layer's cross K/V; the graphs hold to PyTorch (the manifest's
parity). CTranslate2's Whisper directories (as faster-whisper uses them: float32, float16 and int8 with
row scales) import to the weights of the checkpoint CTranslate2 converted them from; their special tokens,
suppressed tokens and alignment heads are read into config.json."""

from __future__ import annotations

import io
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from model.export.model_dir import export_model_dir
from model.families.choice import family_of
from model.families.whisper.ctranslate2_model import read_model_bin
from model.families.whisper.importer import WhisperImportError, import_whisper, whisper_model
from model.families.whisper.random_checkpoint import WhisperShape, random_whisper_checkpoint
from modeldir.config import load_config
from modeldir.files import VOICE_ACTIVITY_FILE, graph_files, graph_set_for, open_model_dir, sha256_file

SHAPES = {
    "multilingual": WhisperShape(),
    "english-only": WhisperShape(n_mels=128, d_model=96, heads=3, d_ff=192, multilingual=False),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper-checkpoints")
    return {
        name: random_whisper_checkpoint(root / name, shape, seed=i) for i, (name, shape) in enumerate(SHAPES.items())
    }


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory):
    """name -> (model directory, manifest) of each random checkpoint imported as `attnserve import` does."""
    root = tmp_path_factory.mktemp("whisper-exported")
    out = {}
    for name, source in checkpoints.items():
        family, kind = family_of(source)
        assert kind == "whisper"
        model_dir = family.importer(source, root / name, name)
        out[name] = model_dir, export_model_dir(model_dir, io.StringIO(), reduced=("fp16", "int8"))
    return out


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_graphs_hold_to_pytorch_in_every_precision(exported, name):
    _, manifest = exported[name]
    assert manifest["parity"]["encoder_max_abs_diff"] < 1e-4
    assert manifest["parity"]["decoder_logits_max_abs_diff"] < 1e-4
    half = manifest["fp16"]["parity_against_float16"]
    assert half["encoder_max_abs_diff"] < 0.05 and half["first_divergent_step"] is None
    # The 8-bit set this CPU serves: full-range weights saturate on x86 without VNNI (modeldir/files.py).
    assert manifest[graph_set_for("int8")]["parity"]["decoder_logits_max_abs_diff"] < 0.5


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_encoder_reads_log_mel_frames_in_every_precision(exported, name):
    model_dir, manifest = exported[name]
    shape = SHAPES[name]
    for graph_set in ("fp32", "fp16", "int8"):
        graphs = manifest["graphs"] if graph_set == "fp32" else manifest[graph_set]["graphs"]
        (features,) = graphs["encoder"]["inputs"]
        assert features == {"name": "input_features", "dtype": "float32", "shape": ["batch", shape.n_mels, "frames"]}
        assert (model_dir / graph_files("seq2seq", graph_set)["encoder"]).is_file()
    assert "attention" not in manifest["graphs"]  # no attention maps over 1,500 frames


def test_the_voice_activity_detector_is_silero_s_graph_under_the_manifest(exported):
    """Copied from the silero-vad package, its checksum in the manifest, its inputs what the server feeds."""
    model_dir, manifest = exported["multilingual"]
    detector = manifest["graphs"]["voice_activity"]
    assert detector["file"] == VOICE_ACTIVITY_FILE and detector["source"].startswith("silero-vad 6.2.3 ")
    assert [(i["name"], i["shape"]) for i in detector["inputs"]] == [
        ("input", ["sequence_length", 576]),
        ("h", [1, 1, 128]),
        ("c", [1, 1, 128]),
    ]
    assert manifest["sha256"][VOICE_ACTIVITY_FILE] == sha256_file(model_dir / VOICE_ACTIVITY_FILE)
    assert open_model_dir(model_dir).voice_activity == model_dir / VOICE_ACTIVITY_FILE


def test_the_tokens_and_rules_are_read_from_the_checkpoint(exported, checkpoints):
    _, config = load_config(exported["multilingual"][0])
    whisper = config.whisper
    assert (whisper.multilingual, whisper.languages) == (True, ("en", "de", "fr"))
    assert (whisper.end_of_text_id, whisper.start_of_transcript_id, whisper.first_language_id) == (256, 257, 258)
    assert whisper.language_id("fr") == 260 and whisper.no_timestamps_id == 266
    assert whisper.timestamp_begin_id == 267 and config.vocab_size - whisper.timestamp_begin_id == 1501
    assert (config.bos_id, config.eos_id) == (257, 256)
    assert whisper.suppress_ids == tuple(sorted(ord(c) for c in "#[]{}")) and whisper.begin_suppress_ids == (32, 256)
    assert whisper.alignment_heads == ((1, 0), (1, 1), (1, 2), (1, 3))
    # Never generated: the checkpoint's list and the prompt's special tokens (not the end, nor timestamps).
    assert set(config.suppressed_ids) == {*whisper.suppress_ids, 257, 261, 262, 263, 264, 265}
    assert not load_config(exported["english-only"][0])[1].whisper.multilingual


def test_a_checkpoint_without_its_tokenizer_is_refused_by_name(checkpoints, tmp_path):
    source = shutil.copytree(checkpoints["multilingual"], tmp_path / "no-tokenizer")
    (source / "tokenizer.json").unlink()
    with pytest.raises(WhisperImportError, match="no tokenizer"):
        import_whisper(source, tmp_path / "out", "w")


def _converted(source, out, quantization: str):
    """The checkpoint as CTranslate2's converter writes it, with the tokenizer faster-whisper's folders hold."""
    from ctranslate2.converters import TransformersConverter

    TransformersConverter(str(source)).convert(str(out), quantization=quantization, force=True)
    shutil.copyfile(source / "tokenizer.json", out / "tokenizer.json")
    return out


@pytest.mark.parametrize("quantization", ["float32", "float16", "int8"])
def test_ctranslate2_directories_import_to_the_weights_they_were_converted_from(checkpoints, tmp_path, quantization):
    source = checkpoints["english-only"]
    directory = _converted(source, tmp_path / "ct2", quantization)
    family, kind = family_of(directory)
    assert kind == "whisper CTranslate2"
    model_dir = family.importer(directory, tmp_path / "ours", "w")
    ours = load_file(str(model_dir / "model.safetensors"))
    theirs = whisper_model(source).state_dict()
    assert set(ours) == set(theirs)
    for key, expected in theirs.items():
        # int8 quantizes the matrices (convolutions and tables too, not the positions); the rest stays float32.
        if quantization == "int8" and expected.ndim >= 2 and "embeddings.positions" not in key:
            rows = expected.reshape(expected.shape[0], -1)
            step = rows.abs().amax(dim=1, keepdim=True) / 127  # each row within half a step of its own scale
            assert ((ours[key].reshape(rows.shape) - rows).abs() <= step / 2 + 1e-6).all(), key
        else:
            stored = expected.half().float() if quantization == "float16" else expected
            torch.testing.assert_close(ours[key], stored, rtol=0, atol=1e-6, msg=key)
    _, config = load_config(model_dir)
    _, hf_config = load_config(import_whisper(source, tmp_path / "hf", "w"))
    assert config.whisper == hf_config.whisper and config.suppressed_ids == hf_config.suppressed_ids


def test_model_bin_is_read_as_ctranslate2_wrote_it(checkpoints, tmp_path):
    directory = _converted(checkpoints["multilingual"], tmp_path / "ct2", "int8")
    variables = read_model_bin(directory / "model.bin")
    weight = variables["decoder/layer_0/self_attention/linear_0/weight"]
    shape = SHAPES["multilingual"]
    assert weight.dtype == np.int8 and weight.shape == (3 * shape.d_model, shape.d_model)
    assert variables["decoder/layer_0/self_attention/linear_0/weight_scale"].shape == (3 * shape.d_model,)
    assert int(variables["decoder/num_heads"]) == shape.heads
    assert variables["decoder/projection/weight"] is variables["decoder/embeddings/weight"]  # an alias
    settings = json.loads((directory / "config.json").read_text())
    assert settings["suppress_ids_begin"] == [32, 256]
