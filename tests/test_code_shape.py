"""How the source is written, read with ast and re: keyword-only requests and settings, few positional
parameters, one name per class, one call lifecycle, one config schema, short serving modules, and docs
that name only what exists."""

from __future__ import annotations

import ast
import re

from .source_reading import ROOT, python_files, uses

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
