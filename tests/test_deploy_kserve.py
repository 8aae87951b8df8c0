"""The KServe runtimes and services (deploy/kserve), checked offline: core/v1 specs, the same container as
deploy/k8s's, the runtime a service selects, and how Prometheus finds them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from .deploy_files import (
    KSERVE,
    KSERVE_MODEL_FIELDS,
    KSERVE_PREDICTOR_FIELDS,
    dockerfile_instruction,
    dockerfile_runtime_stage,
    env_of,
    image_env,
    kserve,
    kserve_documents,
    kserve_huggingface,
    manifests,
    run,
    runtime_container,
    runtime_offers,
    serve_config,
)


def test_yamllint_covers_kserve():
    result = run("yamllint", "--list-files", "deploy")
    assert result.returncode == 0, result.stderr
    kserve_files = {f"deploy/kserve/{f.name}" for f in KSERVE.glob("*.yaml")}
    assert len(kserve_files) == 3 and kserve_files <= set(result.stdout.split())


def test_kserve_documents_are_runtimes_and_services():
    pair = [("serving.kserve.io/v1alpha1", "ServingRuntime"), ("serving.kserve.io/v1beta1", "InferenceService")]
    assert sorted((d["apiVersion"], d["kind"]) for d in kserve().values()) == pair
    assert sorted((d["apiVersion"], d["kind"]) for d in kserve_huggingface().values()) == [
        ("serving.kserve.io/v1alpha1", "ServingRuntime"),
        ("serving.kserve.io/v1beta1", "InferenceService"),
        ("v1", "PersistentVolumeClaim"),
    ]
    assert len(kserve_documents()) == 5  # no other file


def test_kserve_container_specs_are_core_v1(tmp_path):
    """Each container spec, wrapped in a v1 Pod with the pod fields beside it, passes strict validation (an
    unknown or misspelt field fails). The InferenceService's predictor and model spec inline a PodSpec and a
    Container beside KServe's own fields, which are taken off first."""
    pods = {}
    for name, k in (("attnserve", kserve()), ("huggingface", kserve_huggingface())):
        runtime = k["ServingRuntime"]["spec"]
        predictor = k["InferenceService"]["spec"]["predictor"]
        overrides = {key: value for key, value in predictor["model"].items() if key not in KSERVE_MODEL_FIELDS}
        pods[f"{name}-runtime"] = {"containers": runtime["containers"], "volumes": runtime["volumes"]}
        pods[f"{name}-predictor"] = {
            **{key: value for key, value in predictor.items() if key not in KSERVE_PREDICTOR_FIELDS},
            "containers": [{**overrides, "name": "kserve-container"}],
        }
    files = []
    for name, spec in pods.items():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(pod))
        files.append(f"{name}.yaml")
    (tmp_path / "claim.yaml").write_text(yaml.safe_dump(kserve_huggingface()["PersistentVolumeClaim"]))
    result = run("kubernetes-validate", "--strict", *files, "claim.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed for resource") == 5


def test_kserve_runtime_runs_the_k8s_container():
    """The same image, serve settings, ports, probes, resources and security as deploy/k8s/attnserve.yaml."""
    k8s = manifests()
    pod = k8s["Deployment"]["spec"]["template"]
    (k8s_container,) = pod["spec"]["containers"]
    runtime = kserve()["ServingRuntime"]
    container = runtime_container()
    assert container["name"] == "kserve-container"  # the container KServe merges the model spec into
    assert (container["image"], container["imagePullPolicy"]) == (k8s_container["image"], "IfNotPresent")
    # No command: the args go to the image's entrypoint.
    assert "command" not in container and dockerfile_instruction("ENTRYPOINT") == ['["attnserve", "serve"]']

    # deploy/k8s sets the server through its ConfigMap, the runtime through args (no ConfigMap here).
    assert k8s_container["envFrom"] == [{"configMapRef": {"name": k8s["ConfigMap"]["metadata"]["name"]}}]
    assert "envFrom" not in container
    env = image_env()
    k8s_config = serve_config(k8s_container.get("args", []), env | k8s["ConfigMap"]["data"] | env_of(k8s_container))
    config = serve_config(container["args"], env | env_of(container))
    # The same settings, but the models: deploy/k8s's are baked into the image, KServe's come from storage.
    assert dataclasses.replace(config, models=k8s_config.models) == k8s_config

    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"h2c": config.port, "http": config.http_port, "metrics": config.metrics_port}
    assert ports["h2c"] == 50051 and ports["http"] == 8080 and ports["metrics"] == 9464
    # The args state the ports themselves: the containerPorts do not lean on the image's ENV.
    bare = serve_config(container["args"], {})
    assert (bare.port, bare.http_port, bare.metrics_port) == (config.port, config.http_port, config.metrics_port)
    exposed = {int(p) for line in dockerfile_instruction("EXPOSE") for p in line.split()}
    assert set(ports.values()) == exposed == {p["containerPort"] for p in k8s_container["ports"]}
    assert all(p["protocol"] == "TCP" for p in container["ports"])

    # deploy/k8s serves the models the image bakes in; KServe's runtime what the storage initializer put in
    # /mnt/models (tests/test_model_storage.py starts the server so).
    assert k8s_config.models == tuple(Path(p) for p in env["ATTNSERVE_MODELS"].split(","))
    assert "COPY --from=models /models /models" in dockerfile_runtime_stage()
    assert all(p.parent == Path("/models") for p in k8s_config.models)
    assert config.models == (Path("/mnt/models"),)
    isvc_text = (KSERVE / "inferenceservice.yaml").read_text()
    for model in k8s_config.models:
        assert f'"{model.name}"' in isvc_text  # the model_name its comment tells clients to send

    assert container["resources"] == k8s_container["resources"]
    assert (
        container["resources"]["requests"]["nvidia.com/gpu"] == container["resources"]["limits"]["nvidia.com/gpu"] == 1
    )
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe] == k8s_container[probe], probe
        assert container[probe]["grpc"]["port"] == ports["h2c"]
    assert container["lifecycle"] == k8s_container["lifecycle"]  # the preStop pause
    assert container["securityContext"] == pod["spec"]["securityContext"] | k8s_container["securityContext"]
    assert container["volumeMounts"] == k8s_container["volumeMounts"]
    assert runtime["spec"]["volumes"] == pod["spec"]["volumes"]
    # Found by the same scrape configs and alert rules as deploy/k8s's pods.
    assert runtime["spec"]["labels"] == pod["metadata"]["labels"]
    monitor = k8s["PodMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= runtime["spec"]["labels"].items()
    assert monitor["podMetricsEndpoints"][0]["port"] in ports

    predictor = kserve()["InferenceService"]["spec"]["predictor"]
    assert predictor["terminationGracePeriodSeconds"] == pod["spec"]["terminationGracePeriodSeconds"]


def test_kserve_service_selects_the_runtime():
    k = kserve()
    runtime, isvc = k["ServingRuntime"], k["InferenceService"]
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert runtime_offers(runtime, model)
    # Both forms: gRPC on the first port (the service's), KServe's "v2" REST form on the HTTP port.
    assert runtime["spec"]["protocolVersions"] == ["grpc-v2", "v2"] and model["protocolVersion"] == "grpc-v2"
    # Models from storage: the storage initializer fills /mnt/models, which the runtime serves.
    assert model["storageUri"].startswith(("pvc://", "s3://", "gs://", "https://", "oci://", "hf://"))
    assert "/mnt/models" in runtime_container()["args"]
    # Several ports need RawDeployment (Knative allows one); the first becomes the Service's port 80, gRPC,
    # named so that KServe and Knative take it for HTTP/2.
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] in ("RawDeployment", "Standard")
    ports = runtime_container()["ports"]
    assert len(ports) == 3 and ports[0]["name"] == "h2c" and ports[0]["containerPort"] == 50051


def test_kserve_metrics_are_annotated():
    runtime = kserve()["ServingRuntime"]["spec"]
    annotations = runtime["annotations"]
    metrics = {p["name"]: p["containerPort"] for p in runtime_container()["ports"]}["metrics"]
    assert annotations["prometheus.kserve.io/port"] == annotations["prometheus.io/port"] == str(metrics)
    assert annotations["prometheus.kserve.io/path"] == annotations["prometheus.io/path"] == "/metrics"
    assert annotations["prometheus.io/scrape"] == "true"
    assert manifests()["PodMonitor"]["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"
    # With it on, KServe's webhook would point prometheus.io/port at the queue-proxy, absent in RawDeployment.
    isvc = kserve()["InferenceService"]["metadata"]["annotations"]
    assert isvc["serving.kserve.io/enable-prometheus-scraping"] == "false"
