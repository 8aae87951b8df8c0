"""DeepL's v2 glossaries on the HTTP port, as DeepL's clients (its SDKs, Weblate, translate5) manage them:
create from TSV or CSV entries, list, get, read the entries back as TSV, delete, and the language pairs a
glossary may have (those a served model translates). Kept by the core's glossary store (durable under
--data-dir), which v3's multilingual glossaries share: v2 sees the glossaries of one dictionary; a
translation names one with glossary_id."""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, WithJsonSchema
from starlette.responses import JSONResponse, Response

from modeldir.languages import language_tag

from ..core.calls.lifecycle import Call
from ..core.serving import ServingCore
from ..core.translation.glossaries import ENTRIES_FORMATS, Dictionary, Glossary, as_tsv, read_entries
from ..errors import invalid
from .call_handling import handle
from .deepl_api import DEEPL, deepl_codes
from .documented_types import NULL
from .openapi_document import FILL, answers, json_or_form
from .request_fields import request_fields, string_field
from .schema_shapes import BOOLEAN, INTEGER, STRING, array, obj

PREFIX = "/v2/glossaries"
INFO = obj(
    ("glossary_id", "name", "ready", "source_lang", "target_lang", "creation_time", "entry_count"),
    glossary_id=STRING,
    name=STRING,
    ready=BOOLEAN,
    source_lang=STRING,
    target_lang=STRING,
    creation_time=STRING,
    entry_count=INTEGER,
)
PAIRS = obj(
    ("supported_languages",),
    supported_languages=array(obj(("source_lang", "target_lang"), source_lang=STRING, target_lang=STRING)),
)
CREATED = {201 if status == 200 else status: answer for status, answer in answers(DEEPL, INFO).items()}
DELETED = {status: answer for status, answer in answers(DEEPL, STRING).items() if status != 200}
DELETED[204] = {"description": "Deleted"}
CREATE_FIELDS = ("name", "source_lang", "target_lang", "entries", "entries_format")


class DeeplGlossaryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, WithJsonSchema({"type": "string", "minLength": 1})]
    source_lang: Annotated[str, WithJsonSchema({"type": "string", FILL: "deepl_sources"})]
    target_lang: Annotated[str, WithJsonSchema({"type": "string", FILL: "deepl_targets"})]
    entries: Annotated[str, WithJsonSchema({"type": "string", "minLength": 1})]
    entries_format: Annotated[str | None, WithJsonSchema({"anyOf": [{"enum": list(ENTRIES_FORMATS)}, NULL]})] = "tsv"


def info(glossary: Glossary) -> dict:
    """A glossary as v2 shows it: its one dictionary's pair and entries."""
    only = glossary.only
    return {
        "glossary_id": glossary.glossary_id,
        "name": glossary.name,
        "ready": True,
        "source_lang": only.source_lang,
        "target_lang": only.target_lang,
        "creation_time": glossary.creation_time,
        "entry_count": len(only.entries),
    }


def language_pairs(core: ServingCore) -> set[tuple[str, str]]:
    """(source, target) as DeepL's glossaries name them (lower case, no variant), for every pair a served
    model translates."""
    pairs = set()
    for model in core.translation_languages():
        sources = {c.lower() for code in model.sources for c in deepl_codes(code, False)}
        targets = {language_tag(code).language for code in model.targets if language_tag(code)}
        pairs |= {(s, t) for s in sources for t in targets if t and s != t}
    return pairs


def pair_of(core: ServingCore, fields: dict) -> tuple[str, str]:
    source, target = (string_field(fields, name) for name in ("source_lang", "target_lang"))
    for name, value in (("source_lang", source), ("target_lang", target)):
        if not value:
            raise invalid(name, "required")
    pair = (source.lower().split("-")[0], target.lower().split("-")[0])
    if pair not in language_pairs(core):
        raise invalid("target_lang", f"{pair[0]!r} to {pair[1]!r}: no served model translates this pair")
    return pair


def add_glossary_routes(app: FastAPI, core: ServingCore) -> None:
    store = core.glossaries

    @app.post(PREFIX, status_code=201, responses=CREATED, openapi_extra=json_or_form(app, DeeplGlossaryBody))
    async def create(request: Request) -> Response:
        async def work(call: Call) -> Response:
            fields = await request_fields(request)
            for name in fields:
                if name not in CREATE_FIELDS:
                    raise invalid(name, "not a parameter of /v2/glossaries")
            name = string_field(fields, "name")
            if not name:
                raise invalid("name", "required")
            source, target = pair_of(core, fields)
            entries_text = string_field(fields, "entries")
            if not entries_text:
                raise invalid("entries", "required")
            entries = read_entries(entries_text, string_field(fields, "entries_format") or "tsv")
            glossary = store.create(name, (Dictionary(source, target, entries),))
            return JSONResponse(info(glossary), status_code=201)

        return await handle(core, request, {}, work, DEEPL)

    @app.get(PREFIX, responses=answers(DEEPL, obj(("glossaries",), glossaries=array(INFO))))
    async def listed(request: Request) -> Response:
        async def work(call: Call) -> Response:
            one_pair = [g for g in store.all() if len(g.dictionaries) == 1]  # v2 shows one pair a glossary
            return JSONResponse({"glossaries": [info(g) for g in one_pair]})

        return await handle(core, request, {}, work, DEEPL)

    @app.get(PREFIX + "/{glossary_id}", responses=answers(DEEPL, INFO))
    async def one(request: Request, glossary_id: str) -> Response:
        async def work(call: Call) -> Response:
            return JSONResponse(info(store.get(glossary_id)))

        return await handle(core, request, {}, work, DEEPL)

    @app.get(PREFIX + "/{glossary_id}/entries", responses=answers(DEEPL, STRING))
    async def entries(request: Request, glossary_id: str) -> Response:
        async def work(call: Call) -> Response:
            tsv = as_tsv(store.get(glossary_id).only.entries)
            return Response(tsv, media_type="text/tab-separated-values; charset=utf-8")

        return await handle(core, request, {}, work, DEEPL)

    @app.delete(PREFIX + "/{glossary_id}", status_code=204, responses=DELETED)
    async def delete(request: Request, glossary_id: str) -> Response:
        async def work(call: Call) -> Response:
            store.delete(glossary_id)
            return Response(status_code=204)

        return await handle(core, request, {}, work, DEEPL)

    @app.get("/v2/glossary-language-pairs", responses=answers(DEEPL, PAIRS))
    async def pairs(request: Request) -> Response:
        async def work(call: Call) -> Response:
            found = sorted(language_pairs(core))
            return JSONResponse({"supported_languages": [{"source_lang": s, "target_lang": t} for s, t in found]})

        return await handle(core, request, {}, work, DEEPL)
