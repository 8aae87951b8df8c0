"""A translation API's request fields, however the caller sent them: a JSON object, a form body
(application/x-www-form-urlencoded, where a field may repeat), or the query string (a GET), and each
field read as the type it must have, refused by name where it has another."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from starlette.requests import Request

from ..errors import invalid
from .call_handling import BodyTooLarge

FORM = "application/x-www-form-urlencoded"
TRUE, FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


async def request_fields(request: Request) -> dict[str, object]:
    """The query string's fields, then the body's over them. A form field sent once is a string, sent
    several times a list of strings; a JSON body keeps its own types."""
    fields: dict[str, object] = {k: v[0] if len(v) == 1 else v for k, v in parse_qs(request.url.query).items()}
    try:
        body = await request.body()
    except BodyTooLarge as error:  # read here, inside the call: refused as the call's own outcome
        raise error.error() from None
    if not body.strip():
        return fields
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == FORM or (not kind and not body.lstrip().startswith(b"{")):
        try:
            form = parse_qs(body.decode(), keep_blank_values=True, strict_parsing=True)
        except (UnicodeDecodeError, ValueError) as error:
            raise invalid("body", f"not a valid form body: {error}") from None
        fields.update({k: v[0] if len(v) == 1 else v for k, v in form.items()})
        return fields
    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise invalid("body", f"not valid JSON ({kind or 'no content type'}): {error}") from None
    if not isinstance(parsed, dict):
        raise invalid("body", f"a JSON object is required, not {type(parsed).__name__}")
    fields.update(parsed)
    return fields


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
    """true/false in JSON; 1/0, true/false in a form."""
    value = fields.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in TRUE + FALSE:
        return value.lower() in TRUE
    raise invalid(name, f"{value!r}: true or false (1 or 0)")


def int_field(fields: dict, name: str, default: int, low: int, high: int) -> int:
    value = fields.get(name, default)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, f"{value!r}: an integer from {low} to {high}")
    if not low <= value <= high:
        raise invalid(name, f"{value}; from {low} to {high}")
    return value
