"""KServe v2 (the Open Inference Protocol) over REST on the HTTP port, as tritonclient.http and KServe's own
examples call it: /v2, /v2/health/live and /ready, /v2/models/{model}[/versions/{version}] with /ready,
/config and /infer, JSON tensors and the binary tensor data extension (a JSON header, then the tensors'
bytes). The tensors, parameters and infer are the core's (kserve_protocol.py), as for the gRPC door.
Errors as Triton's, {"error"}."""

from __future__ import annotations

import json
from importlib.metadata import version as installed_version

import numpy as np
from fastapi import FastAPI, Request
from starlette.responses import Response

from ..core.calls.lifecycle import Call
from ..core.serving import ServingCore
from ..errors import invalid
from ..kserve_protocol import (
    CLIENT_PARAMETERS,
    FIELD_NAMES,
    OUTPUTS,
    PARAMETERS,
    TEXT,
    VERSION,
    Tensor,
    check_served,
    check_version,
    infer,
    input_name,
    pack_bytes,
    requested,
    tensor_metadata,
    unpack_bytes,
)
from .call_handling import BEARER_STATUSES, BodyTooLarge, FastJSONResponse, HttpApi, TextError, handle
from .kserve_types import CONFIG, INFER_BODY, INFERRED, METADATA, READY, SERVER, path_parameters
from .openapi_document import JSON, answers

HEADER_LENGTH = "inference-header-content-length"
KINDS = {int: "an integer", float: "a number", bool: "a bool", str: "a string"}
TYPES = {"BYTES": "TYPE_STRING", "FP32": "TYPE_FP32", "INT64": "TYPE_INT64"}


def route_name(path: str) -> str:
    """A bounded name for call records and metrics (the model's name is a label of its own)."""
    if path.endswith("/infer"):
        return "kserve.infer"
    if path.endswith("/ready"):
        return "kserve.ready"
    if path.endswith("/config"):
        return "kserve.config"
    return "kserve.metadata" if path.startswith("/v2/models/") else "kserve.server"


KSERVE = HttpApi(
    "kserve", BEARER_STATUSES, lambda refusal: {"error": refusal.message}, TextError, route_name=route_name
)
OPEN_PATHS = ("/v2/health/live", "/v2/health/ready")


def is_kserve(path: str) -> bool:
    return path == "/v2" or path.startswith(("/v2/models/", "/v2/health/"))


def parameters_of(fields: dict | None, kinds: dict[str, type], where: str = "parameters") -> dict:
    """JSON parameters by name, each of its kind (an integer is a number too); Triton's own are dropped."""
    values = {}
    fields = mapping(fields, where)
    for name, value in fields.items():
        if name in CLIENT_PARAMETERS or name == "binary_data_output":
            continue
        if name not in kinds:
            raise invalid(f"{where}.{name}", f"not a parameter of this model; it takes {', '.join(kinds)}")
        kind = kinds[name]
        value = int(value) if kind is int and type(value) is float and value.is_integer() else value
        fits = type(value) is kind or (kind is float and type(value) is int)
        if not fits:
            raise invalid(f"{where}.{name}", f"{json.dumps(value)[:40]}; send {KINDS[kind]}")
        values[name] = kind(value)
    return values


def mapping(value, field: str) -> dict:
    """An optional object of the request (parameters): absent is empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(field, "an object")
    return value


def flattened(data) -> list:
    return [x for item in data for x in flattened(item)] if isinstance(data, list) else [data]


def read_texts(body: dict, binary: bytes, name: str = TEXT) -> list:
    """The one input: BYTES of shape [N] or [N, 1], as JSON strings or binary data; `text`'s elements
    UTF-8, `audio`'s any bytes (binary data only: JSON strings cannot carry them)."""
    inputs = body.get("inputs")
    if (
        not isinstance(inputs, list)
        or len(inputs) != 1
        or not isinstance(inputs[0], dict)
        or inputs[0].get("name") != name
    ):
        raise invalid("inputs.name", f"the model takes one input tensor, {name!r} (BYTES, shape [N])")
    tensor = inputs[0]
    if tensor.get("datatype") != "BYTES":
        raise invalid(name, f"datatype {tensor.get('datatype')!r}; send BYTES")
    shape = tensor.get("shape")
    if isinstance(shape, list):  # JSON Schema's integers include 3.0
        shape = [int(n) if type(n) is float and n.is_integer() else n for n in shape]
    if (
        not isinstance(shape, list)
        or not all(type(n) is int for n in shape)
        or len(shape) not in (1, 2)
        or (len(shape) == 2 and shape[1] != 1)
        or shape[0] < 0
    ):
        raise invalid(name, f"shape {shape}; send [N] or [N, 1] elements")
    size = mapping(tensor.get("parameters"), f"{name}.parameters").get("binary_data_size")
    if size is not None:
        if type(size) is not int or not 0 <= size <= len(binary):
            raise invalid(f"{name}.parameters.binary_data_size", f"{size}; the body holds {len(binary)} bytes")
        elements = unpack_bytes(binary[:size], name)
        if name != TEXT:
            texts = elements
        else:
            try:
                texts = [e.decode("utf-8") for e in elements]
            except UnicodeDecodeError as error:
                raise invalid(TEXT, f"not UTF-8 ({error.reason})") from None
    elif name != TEXT:
        raise invalid(name, "send the recordings as binary data (the binary_data_size parameter)")
    else:
        texts = flattened(tensor.get("data", []))
        if not all(isinstance(t, str) for t in texts):
            raise invalid(TEXT, "data: send the texts as strings")
    if len(texts) != shape[0]:
        raise invalid(name, f"shape {shape} holds {shape[0]} elements; the data has {len(texts)}")
    return texts


def outputs_of(body: dict, available: list[str]) -> tuple[list[str], set[str]]:
    """The outputs a request names, and those it wants as binary data (binary_data_output: all of them,
    but where an output says otherwise)."""
    outputs = body.get("outputs") or []
    if not isinstance(outputs, list) or not all(
        isinstance(o, dict) and isinstance(o.get("name"), str) for o in outputs
    ):
        raise invalid("outputs", "a list of objects with a name")
    every = mapping(body.get("parameters"), "parameters").get("binary_data_output") is True
    binary = {
        o["name"]
        for o in outputs
        if mapping(o.get("parameters"), "outputs.parameters").get("binary_data", every) is True
    }
    if every and not outputs:
        binary = set(available)
    return [o["name"] for o in outputs], binary


def infer_answer(body: dict, model: str, tensors: list[Tensor], binary: set[str], usage: dict) -> Response:
    outputs, blobs = [], []
    for t in tensors:
        entry = {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
        if t.name in binary:
            blob = pack_bytes(t.values) if t.datatype == "BYTES" else np.asarray(t.values).tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif t.datatype == "BYTES":
            entry["data"] = [v.decode() for v in t.values]
        else:
            entry["data"] = np.asarray(t.values).ravel().tolist()
        outputs.append(entry)
    answer = {"model_name": model, "model_version": VERSION, "parameters": usage, "outputs": outputs}
    if "id" in body:
        answer["id"] = body["id"]
    if not blobs:
        return FastJSONResponse(answer)
    header = json.dumps(answer).encode()
    return Response(
        header + b"".join(blobs), media_type="application/octet-stream", headers={HEADER_LENGTH: str(len(header))}
    )


async def read_body(request: Request) -> tuple[dict, bytes]:
    """The JSON request and the binary data after it (Inference-Header-Content-Length says where)."""
    try:
        raw = await request.body()
    except BodyTooLarge as error:
        raise error.error() from None
    length = request.headers.get(HEADER_LENGTH)
    if length is not None and (not length.isdigit() or int(length) > len(raw)):
        raise invalid(HEADER_LENGTH, f"{length!r}; the body has {len(raw)} bytes")
    split = int(length) if length is not None else len(raw)
    try:
        body = json.loads(raw[:split])
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise invalid("body", f"not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise invalid("body", "a JSON object is required")
    return body, raw[split:]


def add_kserve_routes(app: FastAPI, core: ServingCore) -> None:
    live_answer = {"type": "object", "properties": {"live": {"type": "boolean"}}, "required": ["live"]}

    @app.get("/v2/health/live", responses={200: {"description": "Alive", "content": {JSON: {"schema": live_answer}}}})
    async def live() -> Response:
        return FastJSONResponse({"live": True})

    ready_answer = {"type": "object", "properties": {"ready": {"type": "boolean"}}, "required": ["ready"]}
    ready_answers = {
        200: {"description": "Serving", "content": {JSON: {"schema": ready_answer}}},
        503: {"description": "Starting or shutting down", "content": {JSON: {"schema": ready_answer}}},
    }

    @app.get("/v2/health/ready", responses=ready_answers)
    async def ready() -> Response:
        serving = core.ready()
        return FastJSONResponse({"ready": serving}, status_code=200 if serving else 503)

    @app.get("/v2", responses=answers(KSERVE, SERVER))
    async def server(request: Request) -> Response:
        async def describe(call: Call) -> Response:
            return FastJSONResponse(
                {
                    "name": "attnserve",
                    "version": installed_version("attnserve"),
                    "extensions": ["binary_tensor_data", "model_configuration"],
                }
            )

        return await handle(core, request, {}, describe, KSERVE)

    for versioned in ("", "/versions/{version}"):
        base = "/v2/models/{model}" + versioned
        names = {"parameters": path_parameters(versioned)}  # the handlers read {version} themselves

        @app.get(base, responses=answers(KSERVE, METADATA), openapi_extra=names)
        async def metadata(request: Request, model: str) -> Response:
            version = request.path_params.get("version", "")

            async def describe(call: Call) -> Response:
                info = core.model(model)
                check_version(info, version)
                inputs, outputs = tensor_metadata(info)
                specs = [
                    [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in ts]
                    for ts in (inputs, outputs)
                ]
                return FastJSONResponse(
                    {
                        "name": info.name,
                        "versions": [VERSION],
                        "platform": "attnserve",
                        "inputs": specs[0],
                        "outputs": specs[1],
                    }
                )

            return await handle(core, request, FIELD_NAMES, describe, KSERVE)

        @app.get(base + "/config", responses=answers(KSERVE, CONFIG), openapi_extra=names)
        async def config(request: Request, model: str) -> Response:
            version = request.path_params.get("version", "")

            async def describe(call: Call) -> Response:
                info = core.model(model)
                check_version(info, version)
                inputs, outputs = tensor_metadata(info)
                specs = [
                    [{"name": t.name, "data_type": TYPES[t.datatype], "dims": list(t.shape)} for t in ts]
                    for ts in (inputs, outputs)
                ]
                return FastJSONResponse(
                    {
                        "name": info.name,
                        "platform": "attnserve",
                        "backend": "attnserve",
                        "max_batch_size": 0,
                        "input": specs[0],
                        "output": specs[1],
                    }
                )

            return await handle(core, request, FIELD_NAMES, describe, KSERVE)

        ready_answers = {
            200: {"description": "Ready", "content": {JSON: {"schema": READY}}},
            404: {"description": "No served model (or version) of that name", "content": {JSON: {"schema": READY}}},
            503: {"description": "Served, not ready yet (or no longer)", "content": {JSON: {"schema": READY}}},
        }

        @app.get(base + "/ready", responses=ready_answers, openapi_extra=names)
        async def model_ready(request: Request, model: str) -> Response:
            """Triton's clients read any status but 200 as not ready."""
            version = request.path_params.get("version", "")
            versioned = version in ("", VERSION)
            serving = versioned and core.model_ready(model)
            known = versioned and (not core.ready() or model in {m.name for m in core.models()})
            status = 200 if serving else 503 if known else 404
            return FastJSONResponse({"name": model, "ready": serving}, status_code=status)

        @app.post(
            base + "/infer",
            responses=answers(KSERVE, INFERRED),
            openapi_extra={**INFER_BODY, "parameters": [*INFER_BODY["parameters"], *names["parameters"]]},
        )
        async def infer_route(request: Request, model: str) -> Response:
            version = request.path_params.get("version", "")

            async def work(call: Call) -> Response:
                info = core.model(model)
                check_version(info, version)
                check_served(info)
                body, binary = await read_body(request)
                names, binary_outputs = outputs_of(body, OUTPUTS[info.task])
                wanted = requested(names, info)
                texts = read_texts(body, binary, input_name(info.task))
                options = parameters_of(body.get("parameters"), PARAMETERS[info.task])
                tensors, usage = await infer(core, info, texts, options, call.record)
                return infer_answer(body, info.name, [t for t in tensors if t.name in wanted], binary_outputs, usage)

            return await handle(core, request, FIELD_NAMES, work, KSERVE)
