"""What the GPU machine's image holds and what must travel to it: the image's Python distributions (a dated
copy of its listing, gpu_image_packages.txt), the distributions the device kit carries, and the import
audit that finds a module coming from neither."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

IMAGE_PACKAGES = Path(__file__).with_name("gpu_image_packages.txt")
IMAGE_PYTHON = "3.12"

# What the serve path and the check import that the image lacks, or lists without a version (grpcio,
# protobuf: the generated code needs protobuf >= 6.33.5): carried at the versions this project runs.
# (fastapi imports opentelemetry-api at start, which nothing said until the rehearsal ran it.)
CARRIED = (
    "onnxruntime-gpu",
    "grpcio",
    "grpcio-health-checking",
    "grpcio-reflection",
    "protobuf",
    "prometheus-client",
    "fastapi",
    "starlette",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "annotated-doc",
    "typing-inspection",
    "typing-extensions",
    "opentelemetry-api",
    "uvicorn",
    "httptools",
    "h11",
    "click",
    "anyio",
    "idna",
    "num2words",
    "langcodes",
    "language-data",
    "marisa-trie",
    "sentencex",
    "py3langid",
    "av",  # audio uploads (FFmpeg inside the wheel)
    "python-multipart",  # the audio API's multipart bodies
)
# The image's own, at its versions, that the serve path imports: the rehearsal installs these. (onnx reads
# which data files a graph names, before the server opens it: modeldir/external_data.py.)
IMAGE_SERVE = (
    "numpy",
    "tokenizers",
    "sentencepiece",
    "safetensors",
    "packaging",
    "flatbuffers",
    "onnx",
    "ml-dtypes",
)
PROJECT_PACKAGES = ("benchmarks", "cli", "model", "modeldir", "service", "testing", "tests")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_distributions() -> dict[str, str | None]:
    """name -> version (None where the listing showed none)."""
    out = {}
    for line in IMAGE_PACKAGES.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[normalized(name)] = version or None
    return out


def carried_versions() -> dict[str, str]:
    """The carried distributions at the versions installed here (this project's tested ones)."""
    return {name: metadata.version(name) for name in CARRIED}


def image_pins() -> list[str]:
    """The image's serve-path distributions as requirements: name==version, or the name alone."""
    listed = image_distributions()
    return [f"{name}=={listed[name]}" if listed[name] else name for name in IMAGE_SERVE]


def loaded_distributions(modules=None) -> dict[str, set[str]]:
    """distribution -> the top-level modules loaded from it (stdlib and this project's packages left out)."""
    modules = sys.modules if modules is None else modules
    owners = metadata.packages_distributions()
    out: dict[str, set[str]] = {}
    for name, module in list(modules.items()):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in PROJECT_PACKAGES or top.startswith("_") or top == "__main__":
            continue
        if getattr(module, "__file__", None) is None and not hasattr(module, "__path__"):
            continue  # made in memory (cython_runtime): from no file, so from no distribution
        for distribution in owners.get(top, [f"<no distribution: {top}>"]):
            out.setdefault(normalized(distribution), set()).add(top)
    return out


def audit(distributions: dict[str, set[str]]) -> list[str]:
    """The distributions that are neither on the image nor in the kit, with the modules that need them."""
    allowed = set(image_distributions()) | {normalized(n) for n in CARRIED}
    return sorted(f"{name} ({', '.join(sorted(tops))})" for name, tops in distributions.items() if name not in allowed)


# Runs a module as `python -m` would, and writes at exit the distributions it loaded (loaded_distributions)
# as JSON: python -c AUDITED MODULE REPORT ARGS...
AUDITED = (
    "import atexit, json, runpy, sys;"
    "module, report = sys.argv[1], sys.argv[2]; sys.argv = [module, *sys.argv[3:]];"
    "from benchmarks.gpu_image import loaded_distributions;"
    "atexit.register(lambda: open(report, 'w').write(json.dumps("
    "{k: sorted(v) for k, v in loaded_distributions().items()})));"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def audited(python: str, module: str, report: Path) -> tuple[str, ...]:
    """The command prefix that runs `module` with `python`, its distributions written to `report` at exit."""
    return (str(python), "-c", AUDITED, module, str(report))
