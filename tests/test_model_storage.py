"""Models from storage as KServe delivers them: KServe's own storage code (kserve-storage, the storage
initializer's) fills /mnt/models from a storageUri, and the server is started on that directory as the
ServingRuntime starts it (`--models /mnt/models`): an archive of several model directories, or one model
directory."""

from __future__ import annotations

import tarfile

import pytest
from kserve_storage import Storage

from modeldir.storage import model_directories
from testing.server_process import ServerProcess

from .http_client import http


def served_models(server: ServerProcess) -> list[str]:
    return [m["id"] for m in http().get(f"http://127.0.0.1:{server.http_port}/v1/models").json()["data"]]


def test_an_archive_of_model_directories_from_a_storage_uri_is_served(numbers_dir, multilingual_numbers_dir, tmp_path):
    archive = tmp_path / "bucket" / "models.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(numbers_dir, arcname="numbers")
        tar.add(multilingual_numbers_dir, arcname="numbers-multilingual")
    mounted = tmp_path / "mnt" / "models"
    Storage.download(f"file://{archive}", str(mounted))  # the storage initializer unpacks it there
    assert model_directories([mounted]) == (mounted / "numbers", mounted / "numbers-multilingual")
    server = ServerProcess(models=[str(mounted)])
    try:
        assert served_models(server) == ["numbers", "numbers-multilingual"]
        answer = http().post(
            f"http://127.0.0.1:{server.http_port}/v2/translate",
            json={"text": "12", "target_lang": "FR", "source_lang": "ZXX"},
        )
        assert answer.json()["translations"][0]["text"] == "douze"
    finally:
        server.stop()


def test_one_model_directory_from_a_storage_uri_is_served(numbers_dir, tmp_path):
    mounted = tmp_path / "mnt" / "models"
    Storage.download(str(numbers_dir), str(mounted))  # a local path: its files linked into the mount
    assert model_directories([mounted]) == (mounted,)
    server = ServerProcess(models=[str(mounted)])
    try:
        assert served_models(server) == ["numbers"]  # a model is named by its own files, wherever it is
    finally:
        server.stop()


@pytest.mark.slow
def test_a_directory_without_models_is_refused_by_name(tmp_path):
    (tmp_path / "empty").mkdir()
    assert model_directories([tmp_path / "empty"]) == (tmp_path / "empty",)
    with pytest.raises(RuntimeError, match="empty/manifest.json: missing; export the model first"):
        ServerProcess(models=[str(tmp_path / "empty")])
