"""deploy/'s custom resources (KServe's InferenceService and ServingRuntime, KEDA's ScaledObject, the
Prometheus Operator's PodMonitor) checked against their projects' schemas (testing/crd_schemas.py), as the
API server would check them; the Kubernetes types inside them are kubernetes-validate's (tests/test_deploy.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from testing import crd_schemas

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def custom_resources() -> list[tuple[str, dict]]:
    """(file:kind, document) for each document of deploy/ whose API group is not Kubernetes' own (those
    have no dot, as apps and autoscaling, or end in .k8s.io)."""
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            group = (document or {}).get("apiVersion", "").rpartition("/")[0]
            if "." in group and not group.endswith(".k8s.io"):
                found.append((f"{path.relative_to(DEPLOY)}:{document['kind']}", document))
    return found


def test_every_custom_resource_has_a_schema():
    kinds = sorted({(d["apiVersion"], d["kind"]) for _, d in custom_resources()})
    assert kinds == sorted(crd_schemas.schemas())
    assert len(custom_resources()) == 6  # two InferenceServices, two ServingRuntimes, a ScaledObject, a PodMonitor


@pytest.mark.parametrize("name, document", custom_resources(), ids=[name for name, _ in custom_resources()])
def test_custom_resource_matches_its_schema(name, document):
    assert crd_schemas.errors(document) == []


def misspelt(document: dict, path: tuple, key: str, wrong: str) -> dict:
    broken = copy.deepcopy(document)
    place = broken
    for step in path:
        place = place[step]
    place[wrong] = place.pop(key)
    return broken


MISTAKES = [
    # (file, kind, where, the field, a misspelling people make)
    ("kserve/inferenceservice.yaml", "InferenceService", ("spec", "predictor"), "minReplicas", "minReplica"),
    ("kserve/inferenceservice.yaml", "InferenceService", ("spec", "predictor", "model"), "storageUri", "storageURI"),
    ("kserve/servingruntime.yaml", "ServingRuntime", ("spec",), "supportedModelFormats", "supportedModelFormat"),
    ("k8s/keda.yaml", "ScaledObject", ("spec",), "minReplicaCount", "minReplicas"),
    ("k8s/keda.yaml", "ScaledObject", ("spec", "triggers", 1), "metadata", "meta_data"),
    ("k8s/monitoring.yaml", "PodMonitor", ("spec", "podMetricsEndpoints", 0), "port", "targetPort_"),
]


@pytest.mark.parametrize("file, kind, path, key, wrong", MISTAKES)
def test_a_misspelt_field_is_found(file, kind, path, key, wrong):
    (document,) = [d for d in yaml.safe_load_all((DEPLOY / file).read_text()) if d and d["kind"] == kind]
    problems = crd_schemas.errors(misspelt(document, path, key, wrong))
    where = ".".join(map(str, path))
    assert any(p.startswith(f"{where}: ") and repr(wrong) in p for p in problems), problems


def test_a_wrong_type_and_a_missing_field_are_found():
    (scaled,) = yaml.safe_load_all((DEPLOY / "k8s" / "keda.yaml").read_text())
    scaled = copy.deepcopy(scaled)
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 32  # KEDA's metadata values are strings
    del scaled["spec"]["scaleTargetRef"]
    assert sorted(crd_schemas.errors(scaled)) == [
        "spec.triggers.0.metadata.threshold: 32 is not of type 'string'",
        "spec: 'scaleTargetRef' is a required property",
    ]
    isvc = yaml.safe_load((DEPLOY / "kserve" / "inferenceservice.yaml").read_text())
    isvc["spec"]["predictor"]["maxReplicas"] = "8"
    assert crd_schemas.errors(isvc) == ["spec.predictor.maxReplicas: '8' is not of type 'integer'"]
    runtime = yaml.safe_load((DEPLOY / "kserve" / "servingruntime.yaml").read_text())
    del runtime["spec"]["containers"]
    assert crd_schemas.errors(runtime) == ["spec: 'containers' is a required property"]


def scaled_object_kserve_makes(isvc: dict) -> dict:
    """The ScaledObject KServe's KEDA autoscaler makes for an InferenceService's predictor (KServe 0.15 and
    later, as its reconciler reads): named after the predictor's Deployment and aimed at it, the predictor's
    bounds, and a trigger for each External metric whose type is the metric's backend and whose metadata are
    its server address, its query and the target value as Go's %f writes it. It sets no metricType, so KEDA
    takes its default, AverageValue."""
    predictor = isvc["spec"]["predictor"]
    name = f"{isvc['metadata']['name']}-predictor"
    triggers = [
        {
            "type": metric["external"]["metric"]["backend"],
            "metadata": {
                "serverAddress": metric["external"]["metric"]["serverAddress"],
                "query": metric["external"]["metric"]["query"],
                "threshold": f"{float(metric['external']['target']['value']):f}",
            },
        }
        for metric in predictor["autoScaling"]["metrics"]
        if metric["type"] == "External"
    ]
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"name": name},
            "minReplicaCount": predictor["minReplicas"],
            "maxReplicaCount": predictor["maxReplicas"],
            "triggers": triggers,
        },
    }


@pytest.mark.parametrize("file", ["inferenceservice.yaml", "huggingface.yaml"])
def test_kserve_makes_keda_yamls_scaled_object_for_its_predictor(file):
    """Each InferenceService has KServe scale its predictor as deploy/k8s/keda.yaml scales the Deployment
    (whose queries promtool checks in tests/test_deploy.py): the same triggers, thresholds and bounds, on
    the predictor's pods."""
    (isvc,) = [d for d in yaml.safe_load_all((DEPLOY / "kserve" / file).read_text()) if d["kind"] == "InferenceService"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "keda"
    made = scaled_object_kserve_makes(isvc)
    assert crd_schemas.errors(made) == []
    keda = yaml.safe_load((DEPLOY / "k8s" / "keda.yaml").read_text())["spec"]
    assert (made["spec"]["minReplicaCount"], made["spec"]["maxReplicaCount"]) == (
        keda["minReplicaCount"],
        keda["maxReplicaCount"],
    )
    assert len(made["spec"]["triggers"]) == len(keda["triggers"]) == 2
    pods = f'pod=~"{made["metadata"]["name"]}-.*"'
    for ours, theirs in zip(made["spec"]["triggers"], keda["triggers"]):
        assert "metricType" not in theirs  # KServe states none: both take KEDA's default
        assert ours["type"] == theirs["type"] == "prometheus"
        assert ours["metadata"]["serverAddress"] == theirs["metadata"]["serverAddress"]
        assert float(ours["metadata"]["threshold"]) == float(theirs["metadata"]["threshold"])
        assert ours["metadata"]["query"] == theirs["metadata"]["query"].replace('pod=~"attnserve-.*"', pods)
