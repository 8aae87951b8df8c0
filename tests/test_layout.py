"""The import rules that keep the layout honest (docs/architecture.md), read from the source with ast, so
that imports inside functions count too."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module the file imports, relative imports made absolute."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def python_files(where: str) -> list[Path]:
    target = ROOT / where
    if target.is_file():
        return [target]
    return sorted(p for p in target.rglob("*.py") if "pb" not in p.relative_to(ROOT).parts)


def violations(files: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in files:
        for name in sorted(imports_of(path)):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(ROOT)} imports {name}")
    return out


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
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    core = tmp_path / "service" / "core"
    core.mkdir(parents=True)
    (core / "a.py").write_text("from .b import B\n")
    (core / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n")
    (core / "c.py").write_text("def later():\n    from service.core import a\n")
    assert cycles(import_graph(("service",))) == [["service.core.a", "service.core.b", "service.core.c"]]


# Dataclasses that carry what a caller asks for or sets: read by name at every call site.
KEYWORD_ONLY = ("Request", "Options", "Settings", "Limits", "Params")
MAX_POSITIONAL = 6


def dataclass_keywords(node: ast.ClassDef) -> dict[str, bool] | None:
    for decorator in node.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        name = ast.unparse(call.func if call else decorator)
        if name.endswith("dataclass"):
            return {k.arg: ast.literal_eval(k.value) for k in (call.keywords if call else [])}
    return None


def test_requests_options_and_settings_take_keywords_only():
    found = []
    for path in [*python_files("service"), *python_files("modeldir")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name.endswith(KEYWORD_ONLY):
                keywords = dataclass_keywords(node)
                if keywords is not None and not keywords.get("kw_only"):
                    found.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert found == []


def test_no_function_takes_more_than_six_positional_parameters():
    """Past six, a call site cannot be read without the signature beside it: the rest go after `*`. (The
    build side's graph modules are left out: torch passes a graph's inputs to forward() by position.)"""
    found = []
    for path in [*python_files("service"), *python_files("modeldir"), *python_files("cli")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                positional = [a for a in [*node.args.posonlyargs, *node.args.args] if a.arg not in ("self", "cls")]
                if len(positional) > MAX_POSITIONAL:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {len(positional)}")
    assert found == []


def test_one_name_per_class():
    """Where two classes share a name, one of them is misnamed (the serving side's served models are
    Served*, the build side's are the Transformer's own)."""
    defined: dict[str, list[str]] = {}
    for path in [*python_files("service"), *python_files("model"), *python_files("modeldir"), *python_files("cli")]:
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in defined.items() if len(paths) > 1} == {}


def uses(path: Path) -> tuple[set[str], set[str]]:
    """(names called, attributes read) in a file."""
    called, attributes = set(), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
        elif isinstance(node, ast.Attribute):
            attributes.add(node.attr)
    return called, attributes


def test_one_call_lifecycle():
    """A call's record is opened and admission asked in one place (core/calls/lifecycle.py): no door makes a
    CallRecord, counts a request in the metrics itself, or touches admission."""
    found = []
    for path in python_files("service"):
        where = str(path.relative_to(ROOT))
        called, attributes = uses(path)
        if "CallRecord" in called and where != "service/core/calls/lifecycle.py":
            found.append(f"{where} makes a CallRecord")
        if where.startswith(("service/grpc_api", "service/http_api")):
            found += [f"{where} reads .{name}" for name in ("admission", "requests") if name in attributes]
    assert found == []


def test_one_schema_for_a_models_config_and_one_for_its_cache():
    """ModelConfig is the model directory's (modeldir/config.py), read typed: nothing serving reads a
    config as a dict; the cache's geometry and element types are said once (runner/cache_memory.py)."""
    defined = {}
    for path in [*python_files("service"), *python_files("modeldir"), *python_files("model")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name in ("ModelConfig", "CacheGeometry", "CacheShape"):
                defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert defined == {"ModelConfig": ["modeldir/config.py"], "CacheGeometry": ["service/runner/cache_memory.py"]}
    dict_reads = []
    for path in python_files("service"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            target = node.value if isinstance(node, ast.Subscript) else None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                target = node.func.value
            if isinstance(target, ast.Attribute) and target.attr == "config":
                dict_reads.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert dict_reads == []


# The device kit lives in benchmarks/ and runs on the device; its test is the one that imports it.
KIT_TEST = "tests/test_gpu_kit.py"


def test_no_test_module_imports_another_or_the_benchmarks():
    """Shared test code is a helper module (tests/waits.py, ...), a conftest fixture or testing/; the
    benchmarks are no library of the tests."""
    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        where = str(path.relative_to(ROOT))
        forbidden = ("tests.test_",) if where == KIT_TEST else ("tests.test_", "benchmarks")
        found += violations([path], forbidden)
    assert found == []


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
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
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


def test_no_serving_module_is_longer_than_350_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in python_files("service") if (n := len(p.read_text().splitlines())) > 350
    }
    assert long == {}


def test_architecture_doc_names_only_files_that_exist():
    """docs/architecture.md must match the code: every file it names is there."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"\b((?:service|model|modeldir|checkpoints|cli|tests)/[\w/]+\.py)\b", text))
    short = set(re.findall(r"`((?:grpc_api|http_api|core|engine|runner|ops)/\w+\.py)`", text))
    assert len(named) > 10 and len(short) > 10
    missing = sorted(p for p in named if not (ROOT / p).is_file())
    missing += sorted(p for p in short if not (ROOT / "service" / p).is_file())
    assert missing == []


def names_something(dotted: str) -> bool:
    """A module, or a module and the names inside it: service.grpc_api.client.Client.attention."""
    import importlib

    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            thing = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        return all((thing := getattr(thing, name, None)) is not None for name in parts[split:])
    return False


def test_docs_name_only_modules_and_files_that_exist():
    """README.md and docs/ must match the code: every dotted module they name imports (with the class or
    function after it), and every file path they name is there."""
    texts = [(ROOT / "README.md").read_text(), *(p.read_text() for p in (ROOT / "docs").glob("*.md"))]
    missing = []
    for text in texts:
        for dotted in set(re.findall(r"`((?:service|modeldir|cli|benchmarks)(?:\.\w+)+)", text)):
            missing += [] if names_something(dotted.removesuffix(".py")) else [dotted]
        for path in set(
            re.findall(
                r"\b((?:service|model|modeldir|checkpoints|cli|tests|benchmarks|deploy|protos)/[\w/.-]+\.\w+)\b",
                text,
            )
        ):
            if not (ROOT / path).exists():
                missing.append(path)
    assert sorted(missing) == []
