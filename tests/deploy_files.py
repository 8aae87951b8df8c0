"""deploy/'s files and the Dockerfile read as a cluster and the image would, and the tools that check them run:
the test modules' shared view of the deployment (test_deploy, test_deploy_kserve, test_deploy_pods,
test_model_storage)."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

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


# KServe (deploy/kserve): read apart from manifests(), which is deploy/k8s's.

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


def runtime_offers(runtime: dict, model: dict) -> bool:
    """KServe's rule: a runtime supports a model if the model's format label is among the runtime's, one per
    supported format and one per format and version (for a named runtime, autoSelect does not matter)."""
    offered = {f"mt:{f['name']}" for f in runtime["spec"]["supportedModelFormats"]}
    offered |= {f"mt:{f['name']}:{f['version']}" for f in runtime["spec"]["supportedModelFormats"] if "version" in f}
    fmt = model["modelFormat"]
    return f"mt:{fmt['name']}" + (f":{fmt['version']}" if "version" in fmt else "") in offered
