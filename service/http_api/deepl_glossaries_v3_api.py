"""DeepL's v3 multilingual glossaries on the HTTP port, as its SDKs' *_multilingual_glossary helpers call
them: a glossary of dictionaries, one a language pair; create, list, get, rename or merge entries into
dictionaries (PATCH), replace one dictionary (PUT), read a pair's entries, delete a dictionary or the
glossary. The same store as v2's (a v2 glossary is one of one dictionary); a translation names one with
glossary_id and takes its dictionary for the call's pair."""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, WithJsonSchema
from starlette.responses import JSONResponse, Response

from ..core.calls.lifecycle import Call
from ..core.serving import ServingCore
from ..core.translation.glossaries import ENTRIES_FORMATS, Dictionary, Glossary, as_tsv, read_entries
from ..errors import invalid
from .call_handling import handle
from .deepl_api import DEEPL
from .deepl_glossaries_api import DELETED, pair_of
from .documented_types import NULL
from .openapi_document import FILL, answers, request_body
from .request_fields import request_fields, string_field
from .schema_shapes import INTEGER, STRING, array, obj

PREFIX = "/v3/glossaries"
DICTIONARY_FIELDS = ("source_lang", "target_lang", "entries", "entries_format")
DICTIONARY_INFO = obj(
    ("source_lang", "target_lang", "entry_count"), source_lang=STRING, target_lang=STRING, entry_count=INTEGER
)
INFO = obj(
    ("glossary_id", "name", "creation_time", "dictionaries"),
    glossary_id=STRING,
    name=STRING,
    creation_time=STRING,
    dictionaries=array(DICTIONARY_INFO),
)
ENTRIES = obj(
    ("dictionaries",),
    dictionaries=array(
        obj(
            ("source_lang", "target_lang", "entries", "entries_format"),
            source_lang=STRING,
            target_lang=STRING,
            entries=STRING,
            entries_format=STRING,
        )
    ),
)
PAIR_QUERY = [
    {"name": name, "in": "query", "required": True, "schema": {"type": "string", "minLength": 1}}
    for name in ("source_lang", "target_lang")
]


class DeeplDictionary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source_lang: Annotated[str, WithJsonSchema({"type": "string", FILL: "deepl_sources"})]
    target_lang: Annotated[str, WithJsonSchema({"type": "string", FILL: "deepl_targets"})]
    entries: Annotated[str, WithJsonSchema({"type": "string", "minLength": 1})]
    entries_format: Annotated[str | None, WithJsonSchema({"anyOf": [{"enum": list(ENTRIES_FORMATS)}, NULL]})] = "tsv"


class DeeplMultilingualGlossaryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, WithJsonSchema({"type": "string", "minLength": 1})]
    dictionaries: Annotated[list[DeeplDictionary], WithJsonSchema({"type": "array", "minItems": 1})]


class DeeplGlossaryPatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str | None, WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1}, NULL]})] = None
    dictionaries: list[DeeplDictionary] | None = None


def info(glossary: Glossary) -> dict:
    return {
        "glossary_id": glossary.glossary_id,
        "name": glossary.name,
        "creation_time": glossary.creation_time,
        "dictionaries": [dictionary_info(d) for d in glossary.dictionaries],
    }


def dictionary_info(d: Dictionary) -> dict:
    return {"source_lang": d.source_lang, "target_lang": d.target_lang, "entry_count": len(d.entries)}


def dictionary_of(core: ServingCore, fields: object, where: str) -> Dictionary:
    """One dictionary's fields (source_lang, target_lang, entries, entries_format), refused naming `where`."""
    if not isinstance(fields, dict):
        raise invalid(where, "an object with source_lang, target_lang and entries")
    for name in fields:
        if name not in DICTIONARY_FIELDS:
            raise invalid(f"{where}.{name}", "not a field of a dictionary")
    source, target = pair_of(core, fields)
    text = string_field(fields, "entries")
    if not text:
        raise invalid(f"{where}.entries", "required")
    return Dictionary(source, target, read_entries(text, string_field(fields, "entries_format") or "tsv"))


def dictionaries_of(core: ServingCore, fields: dict, required: bool) -> tuple[Dictionary, ...]:
    listed = fields.get("dictionaries")
    if listed is None and not required:
        return ()
    if not isinstance(listed, list) or (required and not listed):
        raise invalid("dictionaries", "a list of dictionaries (source_lang, target_lang, entries), at least one")
    return tuple(dictionary_of(core, d, f"dictionaries[{i}]") for i, d in enumerate(listed))


def checked(fields: dict, known: tuple[str, ...]) -> dict:
    for name in fields:
        if name not in known:
            raise invalid(name, "not a parameter of this call")
    return fields


def add_multilingual_glossary_routes(app: FastAPI, core: ServingCore) -> None:
    store = core.glossaries
    created = {201 if status == 200 else status: answer for status, answer in answers(DEEPL, INFO).items()}

    @app.post(
        PREFIX, status_code=201, responses=created, openapi_extra=request_body(app, DeeplMultilingualGlossaryBody)
    )
    async def create(request: Request) -> Response:
        async def work(call: Call) -> Response:
            fields = checked(await request_fields(request), ("name", "dictionaries"))
            name = string_field(fields, "name")
            if not name:
                raise invalid("name", "required")
            glossary = store.create(name, dictionaries_of(core, fields, required=True))
            return JSONResponse(info(glossary), status_code=201)

        return await handle(core, request, {}, work, DEEPL)

    @app.get(PREFIX, responses=answers(DEEPL, obj(("glossaries",), glossaries=array(INFO))))
    async def listed(request: Request) -> Response:
        async def work(call: Call) -> Response:
            return JSONResponse({"glossaries": [info(g) for g in store.all()]})

        return await handle(core, request, {}, work, DEEPL)

    @app.get(PREFIX + "/{glossary_id}", responses=answers(DEEPL, INFO))
    async def one(request: Request, glossary_id: str) -> Response:
        async def work(call: Call) -> Response:
            return JSONResponse(info(store.get(glossary_id)))

        return await handle(core, request, {}, work, DEEPL)

    @app.patch(
        PREFIX + "/{glossary_id}",
        responses=answers(DEEPL, INFO),
        openapi_extra=request_body(app, DeeplGlossaryPatchBody),
    )
    async def update(request: Request, glossary_id: str) -> Response:
        async def work(call: Call) -> Response:
            fields = checked(await request_fields(request), ("name", "dictionaries"))
            name = string_field(fields, "name")
            if name == "":
                raise invalid("name", "empty")
            dictionaries = dictionaries_of(core, fields, required=False)
            if name is None and not dictionaries:
                raise invalid("body", "name or dictionaries: nothing to change")
            return JSONResponse(info(store.update(glossary_id, name, dictionaries)))

        return await handle(core, request, {}, work, DEEPL)

    @app.put(
        PREFIX + "/{glossary_id}/dictionaries",
        responses=answers(DEEPL, DICTIONARY_INFO),
        openapi_extra=request_body(app, DeeplDictionary),
    )
    async def replace(request: Request, glossary_id: str) -> Response:
        async def work(call: Call) -> Response:
            dictionary = dictionary_of(core, await request_fields(request), "body")
            return JSONResponse(dictionary_info(store.replace(glossary_id, dictionary)))

        return await handle(core, request, {}, work, DEEPL)

    @app.get(
        PREFIX + "/{glossary_id}/entries", responses=answers(DEEPL, ENTRIES), openapi_extra={"parameters": PAIR_QUERY}
    )
    async def entries(request: Request, glossary_id: str) -> Response:
        async def work(call: Call) -> Response:
            source, target = await pair_asked(request)
            d = store.dictionary(glossary_id, source, target)
            answer = {"source_lang": d.source_lang, "target_lang": d.target_lang, "entries": as_tsv(d.entries)}
            return JSONResponse({"dictionaries": [{**answer, "entries_format": "tsv"}]})

        return await handle(core, request, {}, work, DEEPL)

    @app.delete(
        PREFIX + "/{glossary_id}/dictionaries",
        status_code=204,
        responses=DELETED,
        openapi_extra={"parameters": PAIR_QUERY},
    )
    async def delete_dictionary(request: Request, glossary_id: str) -> Response:
        async def work(call: Call) -> Response:
            store.delete_dictionary(glossary_id, *(await pair_asked(request)))
            return Response(status_code=204)

        return await handle(core, request, {}, work, DEEPL)

    @app.delete(PREFIX + "/{glossary_id}", status_code=204, responses=DELETED)
    async def delete(request: Request, glossary_id: str) -> Response:
        async def work(call: Call) -> Response:
            store.delete(glossary_id)
            return Response(status_code=204)

        return await handle(core, request, {}, work, DEEPL)


async def pair_asked(request: Request) -> tuple[str, str]:
    fields = checked(await request_fields(request), ("source_lang", "target_lang"))
    pair = tuple(string_field(fields, name) for name in ("source_lang", "target_lang"))
    for name, value in zip(("source_lang", "target_lang"), pair):
        if not value:
            raise invalid(name, "required")
    return pair
