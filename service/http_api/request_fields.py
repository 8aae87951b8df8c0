"""A translation API's request fields, however the caller sent them: a JSON object, a form body
(application/x-www-form-urlencoded, where a field may repeat), or the query string (a GET), and each
field read as the type it must have, refused by name where it has another."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs

from starlette.requests import Request

from ..errors import invalid
from .call_handling import BodyTooLarge

FORM = "application/x-www-form-urlencoded"
TRUE, FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


class FormText(str):
    """A value sent in a form or the query string, where every value is text: read as the number or
    boolean a field needs. (In a JSON body, a number or boolean must be one.)"""


def form_values(pairs: dict[str, list[str]]) -> dict[str, object]:
    return {k: FormText(v[0]) if len(v) == 1 else [FormText(x) for x in v] for k, v in pairs.items()}


async def body_of(request: Request) -> bytes:
    try:
        return await request.body()
    except BodyTooLarge as error:  # read here, inside the call: refused as the call's own outcome
        raise error.error() from None


def json_object(body: bytes, kind: str) -> dict:
    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise invalid("body", f"not valid JSON ({kind or 'no content type'}): {error}") from None
    if not isinstance(parsed, dict):
        raise invalid("body", f"a JSON object is required, not {type(parsed).__name__}")
    return parsed


async def request_fields(request: Request) -> dict[str, object]:
    """The query string's fields, then the body's over them. A form field sent once is a string, sent
    several times a list of strings; a JSON body keeps its own types."""
    fields = form_values(parse_qs(request.url.query, keep_blank_values=True))
    body = await body_of(request)
    if not body.strip():
        return fields
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == FORM or (not kind and not body.lstrip().startswith(b"{")):
        try:
            form = parse_qs(body.decode(), keep_blank_values=True, strict_parsing=True)
        except (UnicodeDecodeError, ValueError) as error:
            raise invalid("body", f"not a valid form body: {error}") from None
        fields.update(form_values(form))
        return fields
    fields.update(json_object(body, kind))
    return fields


async def json_fields(request: Request) -> dict[str, object]:
    """A JSON API's body (TEI's, Cohere's), read as JSON whatever its content type says (curl's -d says
    it is a form); an empty body has no fields."""
    body = await body_of(request)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return json_object(body, kind) if body.strip() else {}


def texts_field(fields: dict, name: str, required: bool = True) -> tuple[list[str], bool]:
    """A field of one text or several: -> the texts, and whether several were sent (a list)."""
    value = fields.get(name)
    if value is None:
        if required:
            raise invalid(name, "required")
        return [], False
    if isinstance(value, str):
        return [value], False
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(name, "a text or a list of texts")
    return value, True


def string_field(fields: dict, name: str, default: str | None = None) -> str | None:
    value = fields.get(name, default)
    if value is not None and not isinstance(value, str):
        raise invalid(name, f"a string, not {type(value).__name__}")
    return value


def bool_field(fields: dict, name: str, default: bool = False) -> bool:
    """true/false in JSON; 1/0, true/false (yes/no, on/off) in a form."""
    value = fields.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, FormText) and value in TRUE + FALSE:
        return value in TRUE
    raise invalid(name, f"{value!r}: true or false (1 or 0 in a form)")


def int_field(fields: dict, name: str, default: int, low: int, high: int) -> int:
    value = fields.get(name, default)
    if isinstance(value, FormText) and re.fullmatch("-?(0|[1-9][0-9]*)", value):  # as int() writes it
        value = int(value)
    if type(value) is float and value.is_integer():  # JSON Schema's integers include 3.0
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, f"{value!r}: an integer from {low} to {high}")
    if not low <= value <= high:
        raise invalid(name, f"{value}; from {low} to {high}")
    return value


def names_field(fields: dict, name: str) -> frozenset[str]:
    """A list of names, as a comma-separated string (DeepL's form) or a list of strings (each may be
    comma-separated too)."""
    value = fields.get(name)
    if value is None:
        return frozenset()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise invalid(name, "a comma-separated string of tag names, or a list of them")
    return frozenset(n.strip() for v in values for n in v.split(",") if n.strip())
