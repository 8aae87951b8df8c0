"""KServe v2 REST's request and answer shapes, for the OpenAPI document (the Open Inference Protocol's
schemas, narrowed to what attnserve's models take: one BYTES input of texts, and each task's parameters)."""

from __future__ import annotations

from ..kserve_protocol import CLIENT_PARAMETERS, OUTPUTS, PARAMETERS, TEXT, VERSION
from .openapi_document import FILL, JSON
from .schema_shapes import BOOLEAN, INTEGER, NUMBER, OBJECT, STRING, array, obj

TYPES = {int: INTEGER, float: NUMBER, bool: BOOLEAN, str: STRING}
TENSOR_SPEC = obj(("name", "datatype", "shape"), name=STRING, datatype=STRING, shape=array(INTEGER))
SERVER = obj(("name", "version", "extensions"), name=STRING, version=STRING, extensions=array(STRING))
METADATA = obj(
    ("name", "platform", "inputs", "outputs"),
    name=STRING,
    versions=array(STRING),
    platform=STRING,
    inputs=array(TENSOR_SPEC),
    outputs=array(TENSOR_SPEC),
)
CONFIG = obj(("name", "input", "output"), name=STRING, input=array(OBJECT), output=array(OBJECT))
READY = obj(("name", "ready"), name=STRING, ready=BOOLEAN)
INFERRED = {
    **obj(
        ("model_name", "outputs"),
        model_name=STRING,
        model_version=STRING,
        id=STRING,
        parameters=OBJECT,
        outputs=array(TENSOR_SPEC),
    ),
    "description": "JSON; with binary outputs, this header then the tensors' bytes "
    "(Inference-Header-Content-Length gives the header's length)",
}

# Every task's parameters (a model refuses another task's by name), and those Triton's clients add.
EVERY_PARAMETER = {name: TYPES[kind] for task in PARAMETERS.values() for name, kind in task.items()}
PARAMETERS_SCHEMA = {
    "type": "object",
    "properties": {
        **EVERY_PARAMETER,
        **{name: {} for name in CLIENT_PARAMETERS},
        "binary_data_output": {"type": "boolean"},
    },
    "additionalProperties": False,
    "description": "the model's own task's: "
    + "; ".join(f"{task}: {', '.join(names)}" for task, names in PARAMETERS.items()),
}
TEXT_TENSOR = {
    "type": "object",
    "properties": {
        "name": {"const": TEXT},
        "datatype": {"const": "BYTES"},
        "shape": {  # [N] or [N, 1]
            "type": "array",
            "prefixItems": [{"type": "integer", "minimum": 0}, {"const": 1}],
            "minItems": 1,
            "maxItems": 2,
        },
        "data": {"type": "array", "description": "the texts, as many as shape[0] (or binary_data_size's bytes)"},
        "parameters": {"type": "object", "properties": {"binary_data_size": {"type": "integer", "minimum": 0}}},
    },
    "required": ["name", "datatype", "shape"],
}
OUTPUT = {
    "type": "object",
    "properties": {
        "name": {"enum": sorted({name for names in OUTPUTS.values() for name in names})},
        "parameters": {"type": "object", "properties": {"binary_data": {"type": "boolean"}}},
    },
    "required": ["name"],
}
INFER_REQUEST = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "parameters": PARAMETERS_SCHEMA,
        "inputs": {"type": "array", "items": TEXT_TENSOR, "minItems": 1, "maxItems": 1},
        "outputs": {"type": "array", "items": OUTPUT},
    },
    "required": ["inputs"],
}
HEADER_LENGTH = {
    "name": "Inference-Header-Content-Length",
    "in": "header",
    "required": False,
    "schema": {"type": "integer", "minimum": 0},
    "description": "binary tensor data: the JSON header's length; the tensors' bytes follow it",
}
INFER_BODY = {
    "requestBody": {"required": True, "content": {JSON: {"schema": INFER_REQUEST}}},
    "parameters": [HEADER_LENGTH],
}


def path_parameters(versioned: str) -> list[dict]:
    """A model's path: its name (examples: the served ones; another is a 404) and, where the path has one,
    its version (only VERSION is served)."""
    model = {"name": "model", "in": "path", "required": True, "schema": {"type": "string", FILL: "model_examples"}}
    version = {"name": "version", "in": "path", "required": True, "schema": {"type": "string", "examples": [VERSION]}}
    return [model, version] if versioned else [model]
