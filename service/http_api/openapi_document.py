"""The HTTP port's OpenAPI document as the server answers: FastAPI's, with the bodies of the routes that
read their request themselves (each content type they take), and the figures the schemas name filled in
from what is served (the batch limit, the languages, the models' vocabularies)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ..core.serving import ServingCore
from .call_handling import HttpApi
from .request_fields import FALSE, FORM, TRUE

JSON = "application/json"
MULTIPART = "multipart/form-data"
REF = "#/components/schemas/{model}"
FILL = "x-filled-from"  # a schema's keywords that depend on what is served: the fill's name

# A fill: the schema keywords (an enum, a maximum) computed from the core, by the name a schema gives.
Fill = Callable[[ServingCore], dict]


def request_body(app: FastAPI, model: type[BaseModel], *content_types: str, required: bool = True) -> dict:
    """openapi_extra for a route that reads its body itself: the body is `model`, in each content type
    (JSON unless others are named)."""
    app.state.documented_bodies = [*getattr(app.state, "documented_bodies", []), model]
    schema = {"$ref": REF.format(model=model.__name__)}
    types = content_types or (JSON,)
    return {"requestBody": {"required": required, "content": {kind: {"schema": schema} for kind in types}}}


def answers(api: HttpApi, schema: dict, description: str = "The answer") -> dict:
    """A route's responses (FastAPI's `responses`): its answer's shape, and its API's errors."""
    return {200: {"description": description, "content": {JSON: {"schema": schema}}}, **api.error_responses()}


def json_or_form(app: FastAPI, model: type[BaseModel], required: bool = True) -> dict:
    """A translation API's body: JSON, or a form whose repeated fields are lists."""
    return request_body(app, model, JSON, FORM, required=required)


def filled(schema: object, core: ServingCore, fills: Mapping[str, Fill]) -> None:
    """Every schema with a FILL name gets that fill's keywords, in place."""
    if isinstance(schema, dict):
        if isinstance(schema.get(FILL), str):
            schema.update(fills[schema[FILL]](core))
        for value in schema.values():
            filled(value, core, fills)
    elif isinstance(schema, list):
        for value in schema:
            filled(value, core, fills)


def as_form(schema: object) -> object:
    """A schema as a form sends it, where every value is text: no null (a field left out is unset), a
    boolean one of the words read as one, a bounded integer its digits."""
    if isinstance(schema, list):
        return [as_form(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {k: as_form(v) for k, v in schema.items() if not (k == "default" and v is None)}
    if "anyOf" in copy:
        options = [o for o in copy["anyOf"] if o != {"type": "null"}]
        if len(options) == 1:
            del copy["anyOf"]
            copy.update(options[0])
        elif options:
            copy["anyOf"] = options
        else:  # null only: a form cannot send it
            del copy["anyOf"]
            copy["not"] = {}
    if copy.get("type") == "boolean":
        copy.update(type="string", enum=[*TRUE, *FALSE])
        copy.pop("default", None)
    if copy.get("type") == "integer" and "minimum" in copy and "maximum" in copy:
        copy.update(type="string", enum=[str(n) for n in range(int(copy["minimum"]), int(copy["maximum"]) + 1)])
        copy.pop("default", None)
    return copy


def form_bodies(doc: dict) -> None:
    """Each form body's schema (urlencoded or multipart): its JSON schema without nulls, as <name>Form."""
    schemas = doc["components"]["schemas"]
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            for kind in (FORM, MULTIPART):
                form = operation.get("requestBody", {}).get("content", {}).get(kind)
                if form and "$ref" in form["schema"]:
                    name = form["schema"]["$ref"].rsplit("/", 1)[1]
                    schemas[name + "Form"] = as_form(schemas[name])
                    form["schema"] = {"$ref": REF.format(model=name + "Form")}


def without_framework_errors(doc: dict) -> None:
    """FastAPI's 422 for bodies it validates goes: those are refused in their API's shape and status, which
    each route's responses say."""
    framework = "#/components/schemas/HTTPValidationError"
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            error = operation.get("responses", {}).get("422", {})
            if error.get("content", {}).get(JSON, {}).get("schema", {}).get("$ref") == framework:
                del operation["responses"]["422"]
    for name in ("HTTPValidationError", "ValidationError"):
        doc.get("components", {}).get("schemas", {}).pop(name, None)


def serve_document(app: FastAPI, core: ServingCore, fills: Mapping[str, Fill]) -> None:
    """app.openapi() builds the whole document; it is kept once the core is ready (the languages and limits
    are known then), and rebuilt on each call before."""

    def document() -> dict:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title, version=app.version, summary=app.summary, description=app.description, routes=app.routes
        )
        bodies = getattr(app.state, "documented_bodies", [])
        _, definitions = models_json_schema([(m, "validation") for m in bodies], ref_template=REF)
        doc.setdefault("components", {}).setdefault("schemas", {}).update(definitions.get("$defs", {}))
        without_framework_errors(doc)
        form_bodies(doc)
        filled(doc, core, fills)
        if core.ready():
            app.openapi_schema = doc
        return doc

    app.openapi = document
