"""The import rules that keep the layout honest (docs/architecture.md), read from the source with ast, so
that imports inside functions count too."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from . import source_reading
from .source_reading import ROOT, imports_of, module_name, python_files, uses, violations

FRONT_DOOR_LIBRARIES = (
    "grpc",
    "grpc_health",
    "grpc_reflection",
    "google.protobuf",
    "service.grpc_api",
    "fastapi",
    "starlette",
    "uvicorn",
    "pydantic",
    "service.http_api",
    "service.kserve_protocol",  # the Open Inference Protocol's wire packing, shared by its two doors
)
# What stays behind the facade (service/core/serving.py): a door asks ServingCore and gets core types
# (core/info.py's ModelInfo, the capabilities' request and result types), never a served model, the
# registry, the routing or the core's settings.
BEHIND_THE_FACADE = ("service.core.models", "service.core.translation.routing", "service.core.serving.CoreSettings")
DOORS = ("service/grpc_api", "service/http_api", "service/kserve_protocol.py")

# (files, forbidden module prefixes, why)
RULES = [
    ("model", ("service", "cli"), "the build side never imports the serving side or the CLI"),
    ("modeldir", ("model", "service", "cli", "torch"), "the model-directory contract imports neither side"),
    ("service", ("model", "cli", "torch"), "the serving side never imports the build side, the CLI or torch"),
    ("service/core", FRONT_DOOR_LIBRARIES, "the core knows no transport"),
    ("service/engine", (*FRONT_DOOR_LIBRARIES, "service.core"), "the engine knows no transport and no core"),
    ("service/runner", (*FRONT_DOOR_LIBRARIES, "service.core", "service.engine"), "the runner is the bottom"),
    ("service/ops", (*FRONT_DOOR_LIBRARIES, "service.core", "service.engine"), "operations know no transport"),
    ("service/errors.py", FRONT_DOOR_LIBRARIES, "domain errors name no status code"),
    ("service/grpc_api", ("service.http_api", "fastapi", "starlette", "uvicorn"), "one front door, not the other"),
    ("service/http_api", ("service.grpc_api", "grpc", "google.protobuf"), "one front door, not the other"),
    ("service/grpc_api", ("service.engine", "service.runner"), "a front door sees the core's types only"),
    ("service/http_api", ("service.engine", "service.runner"), "a front door sees the core's types only"),
    ("service/kserve_protocol.py", ("service.engine", "service.runner"), "a front door sees the core's types only"),
    ("service/kserve_protocol.py", ("grpc", "google.protobuf", "fastapi", "starlette"), "shared by both doors"),
    *((door, BEHIND_THE_FACADE, "a front door asks the facade, ServingCore") for door in DOORS),
    ("cli", ("service.engine", "service.runner", "service.core"), "the CLI starts servers; it is no front door"),
]
# onnxruntime: the runner is the only serving module that knows the device.
ONNXRUNTIME_ALLOWED = ("service/runner",)


def rooted_at(root: Path, monkeypatch) -> None:
    """The checkers read a tree of the test's own."""
    for module in (sys.modules[__name__], source_reading):
        monkeypatch.setattr(module, "ROOT", root)


@pytest.mark.parametrize("where, forbidden, why", RULES, ids=[f"{r[0]}-{i}" for i, r in enumerate(RULES)])
def test_import_rule(where, forbidden, why):
    files = python_files(where)
    assert files, where
    assert violations(files, forbidden) == [], why


def test_doors_read_nothing_behind_the_facade():
    """No door reads the core's registry, routing or settings: it asks ServingCore (models(), model_for(),
    translation_languages(), detect_languages(), limits())."""
    found = []
    for door in DOORS:
        for path in python_files(door):
            _, attributes = uses(path)
            found += [
                f"{path.relative_to(ROOT)} reads .{a}" for a in ("registry", "routing", "settings") if a in attributes
            ]
    assert found == []


def import_graph(tops: tuple[str, ...]) -> dict[str, set[str]]:
    """module -> the project modules it imports (at the top, inside functions or for type checking alike);
    a package's __init__ is left out, as importing a module through its package is no arrow back."""
    files = {module_name(p): p for top in tops for p in python_files(top) if p.name != "__init__.py"}
    return {m: {i for i in imports_of(p) if i in files and i != m} for m, p in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of the graph: its strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    """No module reaches itself through imports, type-checking ones included: each room's arrows point one
    way, so that a family or a capability can be read (and moved) without the rest."""
    assert cycles(import_graph(("service", "model", "modeldir", "cli"))) == []


def test_the_circle_check_finds_a_circle_through_type_checking(tmp_path, monkeypatch):
    rooted_at(tmp_path, monkeypatch)
    core = tmp_path / "service" / "core"
    core.mkdir(parents=True)
    (core / "a.py").write_text("from .b import B\n")
    (core / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n")
    (core / "c.py").write_text("def later():\n    from service.core import a\n")
    assert cycles(import_graph(("service",))) == [["service.core.a", "service.core.b", "service.core.c"]]


# The device kit lives in benchmarks/ and runs on the device; its test is the one that imports it.
KIT_TEST = "tests/test_gpu_kit.py"


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (tests/test_*.py) a file imports, by name or relatively: a prefix, so not violations()'s
    rule of whole names."""
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for name in sorted(imports_of(path))
        if name.startswith("tests.test_")
    ]


def test_no_test_module_imports_another_or_the_benchmarks():
    """Shared test code is a helper module (tests/waits.py, ...), a conftest fixture or testing/; the
    benchmarks are no library of the tests."""
    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        found += imported_test_modules(path)
        if str(path.relative_to(ROOT)) != KIT_TEST:
            found += violations([path], ("benchmarks",))
    assert found == []


def test_the_checker_finds_a_test_module_importing_another(tmp_path, monkeypatch):
    rooted_at(tmp_path, monkeypatch)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_b.py").write_text(
        "from .test_a import helper\nimport tests.test_c\nfrom . import waits\n"
    )
    assert imported_test_modules(tmp_path / "tests" / "test_b.py") == [
        "tests/test_b.py imports tests.test_a",
        "tests/test_b.py imports tests.test_a.helper",
        "tests/test_b.py imports tests.test_c",
    ]


def test_one_served_fixture():
    """The default server is conftest.py's `served`; a module that needs settings of its own names its
    fixture by them."""
    defined = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "tests").glob("*.py"))
        if re.search(r"^def served\(", p.read_text(), re.M)
    ]
    assert defined == ["tests/conftest.py"]


def test_the_test_harness_is_not_shipped():
    """testing/ (ServerThread, ServerProcess, churn) is for tests and benchmarks: not a package the wheel
    installs, and nothing shipped imports it."""
    import tomllib

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find["include"]
    assert not [p for p in packages if p.split(".")[0] in ("testing", "tests", "benchmarks")]
    shipped = [*python_files("service"), *python_files("cli"), *python_files("modeldir"), *python_files("model")]
    assert violations(shipped, ("testing", "tests", "benchmarks")) == []


def test_only_the_runner_imports_onnxruntime():
    outside = [p for p in python_files("service") if not str(p.relative_to(ROOT)).startswith(ONNXRUNTIME_ALLOWED)]
    assert violations(outside, ("onnxruntime",)) == []
    assert violations(python_files("service/runner"), ("onnxruntime",))  # it does import it


def test_the_checker_finds_imports_of_every_kind(tmp_path, monkeypatch):
    """A rule that could never fire would prove nothing: plain, from, relative and function-level imports."""
    rooted_at(tmp_path, monkeypatch)
    core = tmp_path / "service" / "core"
    core.mkdir(parents=True)
    (core / "sneaky.py").write_text(
        "import grpc.aio\nfrom ..grpc_api import servicer\n\ndef later():\n    from google.protobuf import message\n"
    )
    found = violations([core / "sneaky.py"], FRONT_DOOR_LIBRARIES)
    assert found == [
        "service/core/sneaky.py imports google.protobuf",
        "service/core/sneaky.py imports google.protobuf.message",
        "service/core/sneaky.py imports grpc.aio",
        "service/core/sneaky.py imports service.grpc_api",
        "service/core/sneaky.py imports service.grpc_api.servicer",
    ]


BUILD_SIDE = "[m for m in sys.modules if m == 'torch' or m.split('.')[0] == 'model']"


def test_serving_loads_neither_torch_nor_the_build_side():
    """What is imported at run time, not only what the source says: the server, the CLI's parser and
    `attnserve serve --help` (a real serve start is checked in test_as_users_start_it.py)."""
    probe = (
        "import sys, cli.main, service.server, testing.server_thread;"
        f"cli.main.build_parser(); bad = {BUILD_SIDE}; assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    help_probe = (
        "import atexit, sys;"
        f"atexit.register(lambda: print('build side:', {BUILD_SIDE}));"
        "from cli.main import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", help_probe, "serve", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0 and "--stream-write-timeout" in result.stdout, result.stderr
    assert result.stdout.splitlines()[-1] == "build side: []"
