"""Models from storage as KServe delivers them: KServe's own storage code (kserve-storage, the storage
initializer's) fills /mnt/models from a storageUri, and the server is started on that directory as the
ServingRuntime starts it (`--models /mnt/models`): an archive of several model directories, or one model
directory; a Hugging Face checkpoint made ready by `attnserve prepare` through a cache keyed by its checksum."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile

import pytest
from kserve_storage import Storage

from modeldir.storage import model_directories
from testing.server_process import LOCAL_PORTS, ServerProcess

from .deploy_files import env_of, kserve_huggingface, runtime_container
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


def test_a_checkpoint_from_storage_is_exported_once_then_found_in_the_cache(marian_en_it, tmp_path):
    """`attnserve prepare`, as an init container runs it after the storage initializer: a Hugging Face
    checkpoint imported and exported into the cache, the next pod's run finding it there by checksum, and
    the server started on what it prepared."""
    bucket, mounted, cache = tmp_path / "bucket", tmp_path / "mnt" / "models", tmp_path / "cache"
    shutil.copytree(marian_en_it.parent / "hf", bucket / "marian-en-it")  # the checkpoint the fixture imported
    Storage.download(str(bucket), str(mounted))
    runs = []
    for pod in ("first", "second"):
        command = [
            sys.executable,
            "-m",
            "cli",
            "prepare",
            str(mounted),
            "--out",
            str(tmp_path / pod),
            "--cache",
            str(cache),
        ]
        runs.append(subprocess.run(command, capture_output=True, text=True, timeout=600))
        assert runs[-1].returncode == 0, runs[-1].stderr
    assert "(imported and exported into the cache)" in runs[0].stdout and "(from the cache)" in runs[1].stdout
    # One export, named by checksum and graphs, no leftovers.
    assert [p.name[33:] for p in cache.iterdir()] == ["fp32-marian-en-it"]
    server = ServerProcess(models=[str(tmp_path / "second")])
    try:
        assert served_models(server) == ["marian-en-it"]
        answer = http().post(
            f"http://127.0.0.1:{server.http_port}/v2/translate", json={"text": "a test", "target_lang": "IT"}
        )
        assert answer.status_code == 200 and answer.json()["translations"][0]["text"], answer.text
    finally:
        server.stop()


def test_the_huggingface_runtime_prepares_then_serves_what_hf_delivers(marian_en_it, tmp_path):
    """deploy/kserve/huggingface.yaml's container, run here as its pod runs it: a checkpoint at the top of
    /mnt/models (where hf:// leaves one) and MODEL_NAME from the InferenceService; prepare exports it with
    fp16 graphs into the cache, then the server, in the shell's place, serves it by that name and stops on
    SIGTERM. Only the paths, the device and the ports differ from the manifest."""
    mounted, ready, cache = tmp_path / "mnt" / "models", tmp_path / "ready", tmp_path / "cache"
    Storage.download(str(marian_en_it.parent / "hf"), str(mounted))
    container = runtime_container(kserve_huggingface())
    shell, flag, script, zeroth = container["command"]
    for path, here in (("/mnt/models", mounted), ("/tmp/models", ready), ("/cache", cache)):
        assert f" {path} " in script
        script = script.replace(f" {path} ", f" {here} ")
    name = env_of(kserve_huggingface()["InferenceService"]["spec"]["predictor"]["model"])["MODEL_NAME"]
    env = os.environ | {"MODEL_NAME": name, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    here = ["--device=cpu", *LOCAL_PORTS, "--log-format", "text"]  # later flags win
    server = ServerProcess(command=[shell, flag, script, zeroth, *container["args"], *here], env=env)
    try:
        assert served_models(server) == [name]
        answer = http().post(
            f"http://127.0.0.1:{server.http_port}/v2/translate", json={"text": "a test", "target_lang": "IT"}
        )
        assert answer.status_code == 200 and answer.json()["translations"][0]["text"], answer.text
        (entry,) = cache.iterdir()
        assert entry.name.endswith(f"-fp32-fp16-{name}") and any((entry / "onnx" / "fp16").glob("*.onnx"))
        assert (ready / name).resolve() == entry.resolve()
    finally:
        code = server.stop()
    assert code == 0, server.output()  # the server itself got SIGTERM and drained: the shell exec'd it
