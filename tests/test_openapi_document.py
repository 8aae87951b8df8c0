"""The HTTP port's OpenAPI document tells the truth: schemathesis, as an API team runs it, with every check
over every operation of `make run`'s server on the default ports, finds nothing; every operation documents
its body, its answer and its API's errors (a route added without them fails here); and each API's error
bodies are the shapes the document gives."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core.calls.lifecycle import Refusal
from service.http_api.call_handling import OPENAI
from service.http_api.cohere_api import COHERE
from service.http_api.deepl_api import DEEPL
from service.http_api.kserve_api import KSERVE
from service.http_api.libretranslate_api import LIBRETRANSLATE
from service.http_api.openapi_document import FILL, as_form
from service.http_api.server import api_of
from service.http_api.tei_api import TEI
from service.ops.config import ServerConfig
from testing.server_process import ServerProcess
from tests.default_ports import default_ports
from tests.http_client import http

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = "http://localhost:8080/openapi.json"
SEED, EXAMPLES = 1, 25  # about a minute and a half on 2 cores; schemathesis's default is 100
APIS = (OPENAI, TEI, DEEPL, LIBRETRANSLATE, COHERE, KSERVE)
# Answered before an API's shapes apply: the server's own health, and FastAPI's document and pages.
OWN_SHAPES = {"/health", "/v2/health/live", "/v2/health/ready"}


@pytest.fixture(scope="module")
def server(minilm_dir, numbers_dir, multilingual_numbers_dir, number_rankers, whisper_tiny_en):
    """`attnserve serve` on the default ports with `make run`'s models."""
    models = (str(minilm_dir), str(numbers_dir), str(multilingual_numbers_dir), *map(str, number_rankers.values()))
    models += (str(whisper_tiny_en),)
    with default_ports():
        process = ServerProcess(models=models, listen=())
        yield process
        process.stop()


@pytest.fixture(scope="module")
def document(server) -> dict:
    return http().get(DOCUMENT).json()


def test_schemathesis_finds_no_failure_with_every_check(server):
    """schemathesis.toml (read from the checkout, as `schemathesis run` reads it there) narrows one check on
    one kind of operation, and says why: KServe's infer, whose shape and data lengths JSON Schema cannot
    relate; uploads that are not audio; texts that are not well-formed XML; glossary entries and pairs.
    Every other check runs
    everywhere as schemathesis has it."""
    command = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    run = subprocess.run(
        [command, "run", DOCUMENT, "--checks", "all", "--seed", str(SEED), "--max-examples", str(EXAMPLES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_COLOR": "1", "PATH": str(Path(sys.executable).parent)},
    )
    assert run.returncode == 0, run.stdout[-12000:] + run.stderr[-2000:]
    assert "Selected: 57/57" in run.stdout and "Tested: 57" in run.stdout, run.stdout[-3000:]


def marked_schemas(node: object) -> list[dict]:
    if isinstance(node, dict):
        return [node] * (FILL in node) + [m for value in node.values() for m in marked_schemas(value)]
    if isinstance(node, list):
        return [m for value in node for m in marked_schemas(value)]
    return []


def references(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for value in node.values() for r in references(value)]
    if isinstance(node, list):
        return [r for value in node for r in references(value)]
    return []


def test_every_operation_documents_its_body_answer_and_errors(document):
    operations = [(path, method, op) for path, ops in document["paths"].items() for method, op in ops.items()]
    assert len(operations) == 57, [f"{m} {p}" for p, m, _ in operations]
    for path, method, operation in operations:
        where = f"{method.upper()} {path}"
        answers = operation["responses"]
        success = next((status for status in ("200", "201", "204") if status in answers), None)
        assert success, where
        for kind, content in answers[success].get("content", {}).items():
            assert content["schema"], f"{where}: its {kind} answer has no schema"
        if method == "post":
            body = operation.get("requestBody", {}).get("content", {})
            assert body and all(c["schema"] for c in body.values()), f"{where}: no request body documented"
        if path in OWN_SHAPES or path.endswith("/ready"):
            continue
        errors = api_of(path).error_responses()
        for status, error in errors.items():
            documented = answers.get(str(status), {}).get("content", {}).get("application/json", {})
            assert documented.get("schema") == {"$ref": f"#/components/schemas/{error['model'].__name__}"}, (
                f"{where}: {status} not documented in its API's shape"
            )
        assert "422" not in answers or 422 in errors, f"{where}: FastAPI's own 422 is documented"


def test_every_reference_resolves_and_every_figure_is_filled(document):
    schemas = document["components"]["schemas"]
    for reference in references(document):
        assert reference.startswith("#/components/schemas/") and reference.rsplit("/", 1)[1] in schemas, reference
    text = json.dumps(document)
    assert "HTTPValidationError" not in text
    for marked in marked_schemas(document):  # each figure a schema names was put in beside the name
        assert set(marked) - {FILL, "type", "description", "x-limit", "items", "minItems"}, marked
    batch = schemas["TeiEmbedBody"]["properties"]["inputs"]["anyOf"][2]
    assert batch[FILL] == "batch" and batch["maxItems"] == ServerConfig().max_client_batch_size
    assert schemas["CompletionsRequest"]["properties"]["model"]["enum"] == ["", "numbers", "numbers-multilingual"]
    deepl_targets = schemas["DeeplTranslateBody"]["properties"]["target_lang"]["enum"]
    assert {"DE", "EN-GB", "EN-US", "ES", "FR"} <= set(deepl_targets), deepl_targets


def test_a_form_body_is_documented_as_a_form_sends_it(document):
    schemas = document["components"]["schemas"]
    form = schemas["LibreTranslateBodyForm"]["properties"]
    assert form["alternatives"]["enum"] == ["0", "1", "2", "3"]
    assert "null" not in json.dumps(schemas["DeeplTranslateBodyForm"])
    assert schemas["DeeplTranslateBodyForm"]["properties"]["preserve_formatting"]["enum"][:2] == ["1", "true"]
    translate = document["paths"]["/v2/translate"]["post"]["requestBody"]["content"]
    assert set(translate) == {"application/json", "application/x-www-form-urlencoded"}


def test_a_method_a_shared_path_does_not_take_is_answered_with_all_it_takes(server):
    answer = http().request("OPTIONS", "http://localhost:8080/v2/languages")
    assert answer.status_code == 405
    assert set(answer.headers["allow"].split(", ")) == {"GET", "POST"}  # FastAPI adds no HEAD


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
def test_each_api_error_body_is_the_shape_it_documents(api):
    for status in [*api.statuses.statuses.values(), api.statuses.internal]:
        refusal = Refusal(status=status, field="inputs", message="inputs: empty text", kind="InvalidArgument")
        body = api.error_body(refusal)
        assert api.error_model.model_validate(body).model_dump(exclude_unset=True) == body


NULL = {"type": "null"}
LEAVES = st.sampled_from(
    [{"type": "string"}, {"type": "boolean"}, {"type": "integer", "minimum": 0, "maximum": 3}, NULL]
)
SCHEMAS = st.recursive(
    LEAVES,
    lambda inner: (
        st.builds(lambda options: {"anyOf": options}, st.lists(inner, min_size=1, max_size=3))
        | st.builds(
            lambda fields: {"type": "object", "properties": fields},
            st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
        )
    ),
    max_leaves=12,
)


def nodes(schema: object) -> list[dict]:
    if isinstance(schema, dict):
        return [schema, *(n for value in schema.values() for n in nodes(value))]
    if isinstance(schema, list):
        return [n for value in schema for n in nodes(value)]
    return []


@given(SCHEMAS)
def test_a_form_schema_has_text_where_json_has_null_booleans_and_numbers(schema):
    form = as_form(schema)
    for node in nodes(form):
        assert NULL not in node.get("anyOf", []), form
        assert node.get("anyOf", [None]), form  # never an empty anyOf
        assert node.get("type") not in ("boolean", "integer"), form
    integers = sum(node.get("type") == "integer" for node in nodes(schema))
    assert sum(node.get("enum") == ["0", "1", "2", "3"] for node in nodes(form)) == integers, form
