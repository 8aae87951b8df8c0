"""Builders of the JSON Schemas the OpenAPI document gives for answers: an object of named properties, an
array of one kind of item, and the plain types."""

from __future__ import annotations

STRING, NUMBER, INTEGER, BOOLEAN = ({"type": t} for t in ("string", "number", "integer", "boolean"))
OBJECT = {"type": "object"}


def obj(required: tuple[str, ...] = (), **properties: dict) -> dict:
    """An object with these properties; those named in `required` always come."""
    return {"type": "object", "properties": properties, "required": list(required)}


def array(items: dict) -> dict:
    return {"type": "array", "items": items}
