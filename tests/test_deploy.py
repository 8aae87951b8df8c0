"""The container and the deployment files, checked offline: no Docker engine or cluster runs here."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from service.ops.config import ServerConfig
from service.ops.config_sources import add_arguments, from_sources

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent


def run(*command: str, cwd: Path = ROOT, **kwargs) -> subprocess.CompletedProcess:
    tool = shutil.which(command[0], path=str(BIN)) or shutil.which(command[0])
    assert tool, f"{command[0]} is not installed (make test installs it)"
    return subprocess.run([tool, *command[1:]], cwd=cwd, capture_output=True, text=True, **kwargs)


def manifests() -> dict[str, dict]:
    documents = [d for f in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    return {d["kind"]: d for d in documents}


def test_dockerfile_lints_clean():
    result = run("hadolint", "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_builds_models_with_torch_and_serves_without():
    text = (ROOT / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) == 2
    build, runtime = stages
    assert "'.[export]'" in build and "attnserve build" in build
    assert runtime.startswith("nvidia/cuda:13") and "cudnn-runtime" in runtime.split()[0]
    assert "pip install ." in runtime and "[export]" not in runtime and "torch" not in runtime.replace("no torch", "")
    assert re.search(r"^USER 10001$", runtime, flags=re.M) and "EXPOSE 50051 8080 9464" in runtime
    assert "HEALTHCHECK" in runtime and '"attnserve", "health"' in runtime


@pytest.mark.slow  # installs the package into a fresh environment
def test_the_serving_install_has_no_torch(tmp_path):
    """What the runtime stage's `pip install .` resolves to, and what serving imports."""
    report = tmp_path / "report.json"
    result = run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        str(report),
        ".",
    )
    assert result.returncode == 0, result.stderr
    names = {i["metadata"]["name"].lower().replace("_", "-") for i in json.loads(report.read_text())["install"]}
    assert {"onnxruntime-gpu", "grpcio", "tokenizers", "prometheus-client"} <= names and "torch" not in names
    probe = "import sys, cli.main, service.server, service.grpc_api.client; assert 'torch' not in sys.modules, 'torch'"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).returncode == 0


def test_the_install_carries_every_package():
    """`pip install .` (the image's) installs the packages pyproject.toml's find rule takes, as setuptools
    finds them: every folder of Python code the server or the command runs must be among them (service/http_api
    once was not), and nothing of the tests'."""
    import tomllib
    from setuptools import find_packages

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    listed = set(find_packages(str(ROOT), include=include))
    assert not {p.split(".")[0] for p in listed} & {"tests", "testing", "benchmarks"}
    folders = [d for top in ("cli", "modeldir", "model", "service") for d in [ROOT / top, *(ROOT / top).rglob("*")]]
    found = {".".join(d.relative_to(ROOT).parts) for d in folders if d.is_dir() and any(d.glob("*.py"))}
    assert found <= listed, (
        f"not found by [tool.setuptools.packages.find] (a folder without __init__.py?): {sorted(found - listed)}"
    )


def test_yaml_lints_clean():
    result = run("yamllint", "deploy", ".yamllint.yaml")
    assert result.returncode == 0, result.stdout


def test_kubernetes_manifests_validate():
    result = run("kubernetes-validate", "--strict", "deploy/k8s/attnserve.yaml", "deploy/k8s/monitoring.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed for resource") == 4  # ConfigMap, Deployment, Service, HPA (PodMonitor: a CRD)


def test_kubernetes_pieces_fit_together():
    k = manifests()
    deployment, service, config = k["Deployment"], k["Service"], k["ConfigMap"]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": 50051, "http": 8080, "metrics": 9464}
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 1
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == ports["grpc"]
    assert container["readinessProbe"]["grpc"]["service"] == "attnserve.v1.Inference"
    drain = float(config["data"]["ATTNSERVE_DRAIN_SECONDS"])
    assert pod["spec"]["terminationGracePeriodSeconds"] > drain + 1
    assert all(key.startswith("ATTNSERVE_") for key in config["data"])
    assert service["spec"]["clusterIP"] == "None" and "client" in (DEPLOY / "k8s" / "attnserve.yaml").read_text()
    labels = pod["metadata"]["labels"]
    monitor = k["PodMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    hpa = k["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "attnserve_queue_depth"


def test_keda_scales_the_deployment_on_queries_promtool_evaluates(tmp_path):
    """The ScaledObject's target is the Deployment, its bounds the HPA's; each trigger's query, made a
    recording rule, gives on recorded series what the comments say (promtool test rules)."""
    k = manifests()
    scaled, hpa = k["ScaledObject"], k["HorizontalPodAutoscaler"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == k["Deployment"]["metadata"]["name"]
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (
        hpa["spec"]["minReplicas"],
        hpa["spec"]["maxReplicas"],
    )
    triggers = {t["name"]: t for t in scaled["spec"]["triggers"]}
    assert set(triggers) == {"queue_depth", "kv_cache_usage"}
    rules = {
        "groups": [
            {
                "name": "keda",
                "rules": [{"record": f"keda:{n}", "expr": t["metadata"]["query"]} for n, t in triggers.items()],
            }
        ]
    }
    (tmp_path / "keda_rules.yml").write_text(yaml.safe_dump(rules))
    series = [  # two pods of the Deployment (two models on one), one pod of another namespace
        ('attnserve_queue_depth{namespace="default", pod="attnserve-a", model="minilm"}', "10x5"),
        ('attnserve_queue_depth{namespace="default", pod="attnserve-a", model="numbers"}', "20x5"),
        ('attnserve_queue_depth{namespace="default", pod="attnserve-b", model="minilm"}', "40x5"),
        ('attnserve_queue_depth{namespace="other", pod="attnserve-c", model="minilm"}', "999x5"),
        ('attnserve_kv_cache_usage_ratio{namespace="default", pod="attnserve-a", model="numbers"}', "0.9x5"),
        ('attnserve_kv_cache_usage_ratio{namespace="default", pod="attnserve-b", model="numbers"}', "0.5x5"),
    ]
    test = {
        "rule_files": ["keda_rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": name, "values": values} for name, values in series],
                "promql_expr_test": [
                    {
                        "expr": "keda:queue_depth",
                        "eval_time": "2m",
                        "exp_samples": [{"labels": "keda:queue_depth", "value": 70}],
                    },
                    {
                        "expr": "keda:kv_cache_usage",
                        "eval_time": "2m",
                        "exp_samples": [{"labels": "keda:kv_cache_usage", "value": 1.4}],  # 2 replicas at 0.8
                    },
                ],
            }
        ],
    }
    (tmp_path / "keda_test.yml").write_text(yaml.safe_dump(test))
    result = run("promtool", "test", "rules", "keda_test.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_pass_their_unit_tests():
    prometheus = DEPLOY / "prometheus"
    assert run("promtool", "check", "rules", "alerts.yml", cwd=prometheus).returncode == 0
    result = run("promtool", "test", "rules", "alerts_test.yml", cwd=prometheus)
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", (prometheus / "alerts_test.yml").read_text()))
    defined = set(re.findall(r"alert: (\w+)", (prometheus / "alerts.yml").read_text()))
    assert tested == defined  # every alert has a test


def test_scrape_config_checks(tmp_path):
    """promtool check config; Debian's Prometheus is built without Kubernetes discovery, so the check runs
    on a copy that discovers the same targets statically (relabelling and rule files are checked as is)."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
        job["static_configs"] = [{"targets": ["127.0.0.1:9464"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    shutil.copy(DEPLOY / "prometheus" / "alerts.yml", tmp_path)
    result = run("promtool", "check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_is_grafana_json():
    dashboard = json.loads((DEPLOY / "grafana" / "attnserve.json").read_text())
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("throughput", "latency", "first token", "queue", "batch size", "cache", "errors"):
        assert topic in titles, topic


# ---- KServe (deploy/kserve): read apart from manifests(), which is deploy/k8s's -----------------------------

KSERVE = DEPLOY / "kserve"
# KServe's own fields beside the core/v1 specs that an InferenceService's predictor (a PodSpec) and model spec
# (a Container) inline: taken off before those specs are validated as a Pod.
KSERVE_PREDICTOR_FIELDS = {"model", "minReplicas", "maxReplicas", "autoScaling"}
KSERVE_MODEL_FIELDS = {"modelFormat", "runtime", "protocolVersion", "storageUri", "runtimeVersion", "storage"}


def kserve_documents(*names: str) -> list[dict]:
    files = [KSERVE / name for name in names] or sorted(KSERVE.glob("*.yaml"))
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def kserve() -> dict[str, dict]:
    """The runtime and service that serve attnserve model directories."""
    return {d["kind"]: d for d in kserve_documents("servingruntime.yaml", "inferenceservice.yaml")}


def kserve_huggingface() -> dict[str, dict]:
    """The runtime, service and cache volume that serve a Hugging Face checkpoint."""
    return {d["kind"]: d for d in kserve_documents("huggingface.yaml")}


def runtime_container(documents: dict | None = None) -> dict:
    (container,) = (documents or kserve())["ServingRuntime"]["spec"]["containers"]
    return container


def dockerfile_runtime_stage() -> str:
    """The runtime stage's text, continuation lines joined."""
    stage = re.split(r"^FROM ", (ROOT / "Dockerfile").read_text(), flags=re.M)[-1]
    return re.sub(r"\\\n\s*", " ", stage)


def dockerfile_instruction(name: str) -> list[str]:
    return re.findall(rf"^{name} (.+)$", dockerfile_runtime_stage(), flags=re.M)


def image_env() -> dict[str, str]:
    return dict(pair.split("=", 1) for line in dockerfile_instruction("ENV") for pair in shlex.split(line))


def serve_config(args: list[str], environ: dict[str, str]) -> ServerConfig:
    """What `attnserve serve ARGS` runs with, given its environment: the server's own parser and precedence."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_sources(parser.parse_args(args), environ)


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


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


def runtime_offers(runtime: dict, model: dict) -> bool:
    """KServe's rule: a runtime supports a model if the model's format label is among the runtime's, one per
    supported format and one per format and version (for a named runtime, autoSelect does not matter)."""
    offered = {f"mt:{f['name']}" for f in runtime["spec"]["supportedModelFormats"]}
    offered |= {f"mt:{f['name']}:{f['version']}" for f in runtime["spec"]["supportedModelFormats"] if "version" in f}
    fmt = model["modelFormat"]
    return f"mt:{fmt['name']}" + (f":{fmt['version']}" if "version" in fmt else "") in offered


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
