"""Integrity: the server loads only a model directory whose files match the manifest's checksums."""

from __future__ import annotations

import json

import pytest

from modeldir.files import DECODER_FILE, ENCODER_FILE, MANIFEST_FILE, ModelFilesError, open_model_dir


def test_an_intact_directory_opens(exported):
    files = open_model_dir(exported["h1-d8-post"].dir)
    assert files.task == "seq2seq" and files.name == "h1-d8-post"
    assert files.encoder.name == "encoder.onnx" and files.decoder.name == "decoder.onnx"


@pytest.mark.parametrize("artifact", [ENCODER_FILE, DECODER_FILE, "tokenizer.json"])
def test_a_modified_file_is_refused(exported, copy_of, artifact):
    model_dir = copy_of(exported["h1-d8-post"].dir)
    data = bytearray((model_dir / artifact).read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    (model_dir / artifact).write_bytes(bytes(data))
    with pytest.raises(ModelFilesError, match=f"{artifact}: sha256 [0-9a-f]{{64}} does not match") as error:
        open_model_dir(model_dir)
    assert "export the model again" in str(error.value)


def test_a_missing_file_is_refused(exported, copy_of):
    model_dir = copy_of(exported["h1-d8-post"].dir)
    (model_dir / DECODER_FILE).unlink()
    with pytest.raises(ModelFilesError, match="decoder.onnx: missing"):
        open_model_dir(model_dir)


def test_a_missing_or_foreign_manifest_is_refused(exported, copy_of):
    model_dir = copy_of(exported["h1-d8-post"].dir)
    manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    (model_dir / MANIFEST_FILE).write_text(json.dumps({**manifest, "format": "other/9"}))
    with pytest.raises(ModelFilesError, match="format 'other/9'"):
        open_model_dir(model_dir)
    (model_dir / MANIFEST_FILE).unlink()
    with pytest.raises(ModelFilesError, match="manifest.json: missing; export the model first"):
        open_model_dir(model_dir)
