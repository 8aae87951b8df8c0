"""The pods of deploy/ as a cluster would run them, checked offline: how each stops (preStop pause, drain,
grace period), one GPU each, and the KServe runtime for Hugging Face checkpoints, which is the attnserve
runtime with `attnserve prepare` before the server."""

from __future__ import annotations

import re

from .deploy_files import (
    ROOT,
    env_of,
    image_env,
    kserve,
    kserve_huggingface,
    manifests,
    run,
    runtime_container,
    runtime_offers,
    serve_config,
)


def pods() -> dict[str, tuple[dict, dict, object]]:
    """Each pod template of deploy/ -> (its pod spec fields that matter here, its server container, the
    ServerConfig that container's server runs with)."""
    k8s = manifests()
    template = k8s["Deployment"]["spec"]["template"]["spec"]
    (container,) = template["containers"]
    found = {"k8s": (template, container, serve_config([], image_env() | k8s["ConfigMap"]["data"]))}
    for name, documents in (("kserve", kserve()), ("kserve-huggingface", kserve_huggingface())):
        predictor = documents["InferenceService"]["spec"]["predictor"]
        container = runtime_container(documents)
        found[name] = (predictor, container, serve_config(container["args"], image_env() | env_of(container)))
    return found


def test_every_pod_stops_within_its_grace_period():
    """Deleting a pod starts its grace period; the preStop pause comes first (calls still arrive while the
    endpoints catch up), then SIGTERM starts the drain, then what is left is failed. The grace period must
    cover all three, or the kubelet kills the server mid-drain."""
    pauses = set()
    for name, (pod, container, config) in pods().items():
        pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        pauses.add(pause)
        assert 2 <= pause <= 10, name  # enough for endpoints to propagate, short enough not to hold a rollout
        assert config.drain_seconds == 30, name
        assert pod["terminationGracePeriodSeconds"] >= pause + config.drain_seconds + 5, name
    assert len(pauses) == 1


def test_every_pod_holds_one_gpu_and_names_no_device():
    """One pod per GPU (README, "Every GPU of a node"): the device plugin gives each pod its own GPU, which
    the pod sees as device 0, so nothing in a pod may pick a device index of its own."""
    for name, (_, container, config) in pods().items():
        resources = container["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 1, name
        assert config.device == "cuda", name
        assert "CUDA_VISIBLE_DEVICES" not in env_of(container), name
        assert not any("device-id" in arg or "devices" in arg for arg in container.get("args", [])), name


def test_the_huggingface_runtime_is_the_runtime_with_prepare_first():
    plain, huggingface = kserve()["ServingRuntime"], kserve_huggingface()["ServingRuntime"]
    differs = {"supportedModelFormats", "containers", "volumes"}
    assert {k: v for k, v in huggingface["spec"].items() if k not in differs} == {
        k: v for k, v in plain["spec"].items() if k not in differs
    }
    container, plain_container = runtime_container(kserve_huggingface()), runtime_container()
    differs = {"image", "command", "args", "startupProbe", "volumeMounts"}
    assert {k: v for k, v in container.items() if k not in differs} == {
        k: v for k, v in plain_container.items() if k not in differs
    }
    # The same server flags but the models, which are what prepare made ready.
    models_at = plain_container["args"].index("--models")
    assert plain_container["args"][models_at + 1] == "/mnt/models"
    assert container["args"] == plain_container["args"][:models_at] + plain_container["args"][models_at + 2 :]

    shell, flag, script, zeroth = container["command"]
    assert (shell, flag, zeroth) == ("/bin/sh", "-c", "attnserve-huggingface")
    prepare = re.search(r"^attnserve prepare /mnt/models --out (\S+) --cache (\S+) (.*)$", script, flags=re.M)
    assert prepare, script
    out, cache = prepare.group(1), prepare.group(2)
    assert "--precision fp16" in prepare.group(3)  # graphs for the GPU --device=cuda runs
    assert script.splitlines()[0] == "set -e"  # a failed prepare fails the pod instead of serving nothing
    assert script.splitlines()[-1] == f'exec attnserve serve --models {out} "$@"'

    # out is on the writable /tmp volume (the root filesystem is read-only), cache on the claimed volume.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/tmp"] == "tmp" and out.startswith("/tmp/")
    volumes = {v["name"]: v for v in huggingface["spec"]["volumes"]}
    claim = kserve_huggingface()["PersistentVolumeClaim"]
    assert volumes[mounts[cache]]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # every replica reads it
    assert [v for v in huggingface["spec"]["volumes"] if v["name"] != mounts[cache]] == plain["spec"]["volumes"]

    # The first pod exports before it serves: the startup probe waits longer than the plain runtime's.
    startup = container["startupProbe"]
    assert {k: v for k, v in startup.items() if k != "failureThreshold"} == {
        k: v for k, v in plain_container["startupProbe"].items() if k != "failureThreshold"
    }
    assert startup["failureThreshold"] * startup["periodSeconds"] >= 1800

    isvc = kserve_huggingface()["InferenceService"]
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == huggingface["metadata"]["name"] and runtime_offers(huggingface, model)
    assert model["storageUri"].startswith("hf://") and env_of(model)["MODEL_NAME"]
    assert isvc["metadata"]["annotations"] == kserve()["InferenceService"]["metadata"]["annotations"]


def test_the_import_image_is_the_serving_image_with_the_exporter():
    result = run("hadolint", "Dockerfile.import")
    assert result.returncode == 0, result.stdout + result.stderr
    text = (ROOT / "Dockerfile.import").read_text()
    assert re.search(r"^ARG SERVING_IMAGE=attnserve:latest$", text, flags=re.M)
    assert runtime_container()["image"] == "attnserve:latest"  # what `docker build -t attnserve .` tags
    assert re.search(r"^FROM \$\{SERVING_IMAGE\}$", text, flags=re.M)
    assert "pip install '.[export]'" in text
    assert text.rstrip().splitlines()[-2:] == ["USER 10001", "WORKDIR /home/attnserve"]
    assert runtime_container(kserve_huggingface())["image"] == "attnserve-import:latest"
    assert "-t attnserve-import" in text
