"""The container and the deployment files, checked offline: no Docker engine or cluster runs here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

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


def test_the_serving_install_has_no_torch(tmp_path):
    """What the runtime stage's `pip install .` resolves to, and what serving imports."""
    report = tmp_path / "report.json"
    result = run(sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                 "--report", str(report), ".")  # fmt: skip
    assert result.returncode == 0, result.stderr
    names = {i["metadata"]["name"].lower().replace("_", "-") for i in json.loads(report.read_text())["install"]}
    assert {"onnxruntime-gpu", "grpcio", "tokenizers", "prometheus-client"} <= names and "torch" not in names
    probe = "import sys, cli.main, service.server, service.grpc_api.client; assert 'torch' not in sys.modules, 'torch'"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).returncode == 0


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
