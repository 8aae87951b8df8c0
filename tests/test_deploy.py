"""The container and the deployment files, checked offline: no Docker engine or cluster runs here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from .deploy_files import DEPLOY, ROOT, manifests, run


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
