"""The shapes of TEI's answers, as the OpenAPI document gives them (TEI's own, with attnserve's fields)."""

from __future__ import annotations

from .schema_shapes import BOOLEAN, INTEGER, NUMBER, OBJECT, STRING, array, obj

NUMBERS = array(NUMBER)
VECTORS = array(NUMBERS)
SPARSE = array(array(obj(("index", "value"), index=INTEGER, value=NUMBER)))
RANKED = array(obj(("index", "score"), index=INTEGER, score=NUMBER, text=STRING))
LABELLED = array(obj(("label", "score"), label=STRING, score=NUMBER))
OFFSET = {"type": ["integer", "null"], "description": "a byte offset; null for a special token added"}
TOKENS = array(
    array(
        obj(
            ("id", "text", "special", "start", "stop"),
            id=INTEGER,
            text=STRING,
            special=BOOLEAN,
            start=OFFSET,
            stop=OFFSET,
        )
    )
)
INFO = obj(
    ("model_id", "model_type", "max_input_length", "max_client_batch_size", "version"),
    model_id=STRING,
    model_type=OBJECT,
    max_input_length=INTEGER,
    max_client_batch_size=INTEGER,
    version=STRING,
)
