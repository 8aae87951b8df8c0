"""DeepL's API on the HTTP port (/v2/translate, /v2/languages, /v2/usage), as DeepL's own client libraries call it
with a server URL: its parameters (JSON or form bodies; XML and HTML with tag_handling), language codes,
response and error shapes and statuses (403 for a missing or wrong key, sent as 'DeepL-Auth-Key
<token>'). Options attnserve does not serve are refused by name, never ignored."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, WithJsonSchema
from starlette.responses import JSONResponse, Response

from modeldir.languages import language_name, language_tag

from ..core.calls.lifecycle import Call, Refusal
from ..core.serving import ServingCore
from ..core.translation.documents import SPLIT_MODES
from ..core.translation.markup import TAG_HANDLINGS, MarkupRules
from ..core.translation.translation import TranslateRequest, TranslationOptions
from ..errors import invalid
from ..ops.auth import BEARER
from .call_handling import KEY_STATUSES, HttpApi, MessageError, handle
from .documented_types import NULL, SourceTexts, TagNames
from .openapi_document import FILL, answers, json_or_form
from .request_fields import bool_field, names_field, request_fields, string_field, texts_field
from .schema_shapes import BOOLEAN, INTEGER, STRING, array, obj


def deepl_error(refusal: Refusal) -> dict:
    return {"message": refusal.message}


def route_name(path: str) -> str:
    """A DeepL path's name in call records and metrics, a glossary's or a document's id left out."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["v2", "glossaries"] and len(parts) > 2:
        return "deepl.glossary_entries" if parts[3:] == ["entries"] else "deepl.glossary"
    if parts[:2] == ["v3", "glossaries"] and len(parts) > 2:
        own = {(): "v3_glossary", ("entries",): "v3_glossary_entries", ("dictionaries",): "v3_glossary_dictionaries"}
        return f"deepl.{own.get(tuple(parts[3:]), 'unknown')}"
    if parts[:2] == ["v2", "document"] and len(parts) > 2:
        return "deepl.document_result" if parts[3:] == ["result"] else "deepl.document_status"
    return f"deepl.{'v3_' if parts[0] == 'v3' else ''}{parts[-1] or 'root'}"


DEEPL = HttpApi(
    "deepl", KEY_STATUSES, deepl_error, MessageError, auth_schemes=("DeepL-Auth-Key ", BEARER), route_name=route_name
)
PATHS = (
    "/v2/translate",
    "/v2/languages",
    "/v2/usage",
    "/v2/glossaries",
    "/v2/glossary-language-pairs",
    "/v2/document",
    "/v3/glossaries",
)
# A glossary's and a document's own paths, its id in them.
OWN_PATHS = ("/v2/glossaries/", "/v2/document/", "/v3/glossaries/")
NAMES = {"texts": "text", "source_language": "source_lang", "target_language": "target_lang"}

SERVED = {
    "text",
    "source_lang",
    "target_lang",
    "split_sentences",
    "preserve_formatting",
    "formality",
    "show_billed_characters",
    "glossary_id",
    "context",  # read and checked, not used: no served model takes a context (the README says so)
    "model",  # attnserve's: a served model by name, instead of the one that covers the pair
    "tag_handling",
    "tag_handling_version",
    "outline_detection",
    "splitting_tags",
    "non_splitting_tags",
    "ignore_tags",
}
# DeepL's parameters that attnserve does not serve: refused by name.
NOT_SERVED = {
    "model_type": "model types are not served: the model is the one that covers the pair (or 'model')",
    "custom_instructions": "custom instructions are not served",
    "style_id": "style rules are not served",
    "translation_memory_id": "translation memories are not served",
    "translation_memory_threshold": "translation memories are not served",
    "auth_key": "send the key in the Authorization header: 'DeepL-Auth-Key <key>'",
}
TAG_HANDLING_VERSIONS = ("v1", "v2")  # both read as one: inline tags placed through the alignment
# prefer_*: DeepL too falls back to the default
FORMALITY = ("default", "prefer_more", "prefer_less")
# /v2/usage's character_limit: this server counts characters but sets no limit
NO_LIMIT = 10**12
VARIANTS = {"en": ("EN-GB", "EN-US"), "pt": ("PT-BR", "PT-PT")}  # DeepL lists no bare EN or PT target


class DeeplTranslateBody(BaseModel):
    """/v2/translate's fields, for the OpenAPI document (translate_request reads them, JSON or form)."""

    model_config = ConfigDict(extra="forbid")

    text: SourceTexts
    target_lang: Annotated[str, WithJsonSchema({"type": "string", FILL: "deepl_targets"})]
    source_lang: Annotated[str | None, WithJsonSchema({"anyOf": [{"type": "string", FILL: "deepl_sources"}, NULL]})] = (
        None
    )
    split_sentences: Annotated[str, WithJsonSchema({"enum": list(SPLIT_MODES)})] = "1"
    preserve_formatting: bool = False
    formality: Annotated[str, WithJsonSchema({"enum": list(FORMALITY)})] = "default"
    show_billed_characters: bool = False
    context: str | None = None
    glossary_id: str | None = None
    model: Annotated[str | None, WithJsonSchema({"anyOf": [{"type": "string", FILL: "translating_models"}, NULL]})] = (
        None
    )
    tag_handling: Annotated[str | None, WithJsonSchema({"anyOf": [{"enum": list(TAG_HANDLINGS)}, NULL]})] = None
    tag_handling_version: Annotated[
        str | None, WithJsonSchema({"anyOf": [{"enum": list(TAG_HANDLING_VERSIONS)}, NULL]})
    ] = None
    outline_detection: bool = True
    splitting_tags: TagNames = None
    non_splitting_tags: TagNames = None
    ignore_tags: TagNames = None


class DeeplLanguagesBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Annotated[str, WithJsonSchema({"enum": ["source", "target"]})] = "source"


TRANSLATED = obj(
    ("translations",),
    translations=array(
        obj(
            ("detected_source_language", "text"),
            detected_source_language=STRING,
            text=STRING,
            billed_characters=INTEGER,
        )
    ),
)
LANGUAGES = array(obj(("language", "name"), language=STRING, name=STRING, supports_formality=BOOLEAN))
USAGE = obj(("character_count", "character_limit"), character_count=INTEGER, character_limit=INTEGER)


def language_in(code: str, target: bool) -> str:
    """A DeepL code as BCP-47: EN-GB -> en-GB, ZH-HANT -> zh-Hant; a bare target ZH is Simplified, as
    DeepL has it."""
    upper = code.strip().upper()
    if target and upper == "ZH":
        return "zh-Hans"
    language, _, rest = upper.partition("-")
    if not rest:
        return language.lower()
    return f"{language.lower()}-{rest.title() if len(rest) == 4 else rest}"


def language_out(code: str | None) -> str:
    """A model's code as DeepL names a source language: fra_Latn -> FR."""
    tag = language_tag(code) if code else None
    return tag.language.upper() if tag and tag.language else (code or "").upper()


def deepl_codes(code: str, target: bool) -> list[str]:
    """The DeepL codes that name a model's language: a target's variants (EN-GB, EN-US; ZH, ZH-HANS)."""
    tag = language_tag(code)
    if not tag or not tag.language:
        return []
    language = tag.language
    if not target:
        return [language.upper()]
    if language in VARIANTS:
        return list(VARIANTS[language])
    if language == "zh":
        return ["ZH-HANT"] if tag.script == "Hant" else ["ZH", "ZH-HANS"]
    return [language.upper()]


def language_listing(core: ServingCore, target: bool) -> list[dict]:
    """Every language some served model translates from (or into), as DeepL lists them, sorted."""
    found = {}
    for model in core.translation_languages():
        for code in model.targets if target else model.sources:
            for deepl in deepl_codes(code, target):
                found.setdefault(deepl, language_name(language_in(deepl, target)))
    entries = []
    for deepl, name in sorted(found.items()):
        entry = {"language": deepl, "name": name}
        if target:
            entry["supports_formality"] = False
        entries.append(entry)
    return entries


def markup_rules(fields: dict) -> MarkupRules | None:
    """DeepL's tag-handling fields as the rules markup is read by (None: plain text)."""
    tag_handling = string_field(fields, "tag_handling")
    if tag_handling is not None and tag_handling not in TAG_HANDLINGS:
        raise invalid("tag_handling", f"{tag_handling!r}; one of {', '.join(TAG_HANDLINGS)}")
    version = string_field(fields, "tag_handling_version")  # null: v1, as left out
    if version is not None and version not in TAG_HANDLING_VERSIONS:
        raise invalid("tag_handling_version", f"{version!r}; one of {', '.join(TAG_HANDLING_VERSIONS)}")
    rules = MarkupRules(  # read (and checked) with or without tag_handling: as DeepL, no effect on plain text
        tag_handling=tag_handling or "",
        outline_detection=bool_field(fields, "outline_detection", True),
        splitting_tags=names_field(fields, "splitting_tags"),
        non_splitting_tags=names_field(fields, "non_splitting_tags"),
        ignore_tags=names_field(fields, "ignore_tags"),
    )
    return rules if tag_handling else None


def check_formality(fields: dict) -> None:
    """DeepL's formality: its prefer_ values fall back to the default; more and less refused, in DeepL's
    own words where a target has no formality (no served model has one)."""
    formality = string_field(fields, "formality", "default")
    if formality in ("more", "less"):
        raise invalid("formality", "'formality' is not supported for given 'target_lang'.")
    if formality not in FORMALITY:
        raise invalid("formality", f"{formality!r}: one of {', '.join(FORMALITY)} (no served model has a formality)")


def translate_request(fields: dict) -> tuple[TranslateRequest, bool]:
    """DeepL's fields as a translation request, and whether billed characters are asked for."""
    for name in fields:
        if name in NOT_SERVED:
            raise invalid(name, NOT_SERVED[name])
        if name not in SERVED:
            raise invalid(name, "not a parameter of /v2/translate")
    texts, _ = texts_field(fields, "text")
    target = string_field(fields, "target_lang")
    if not target:
        raise invalid("target_lang", "required")
    source = string_field(fields, "source_lang")
    if source == "":
        raise invalid("source_lang", "empty; leave it out to have the language detected")
    split = string_field(fields, "split_sentences", "1")
    if split not in SPLIT_MODES:
        raise invalid("split_sentences", f"{split!r}; one of {', '.join(SPLIT_MODES)}")
    bool_field(fields, "preserve_formatting")  # spaces and line breaks are always kept
    check_formality(fields)
    string_field(fields, "context")
    request = TranslateRequest(
        texts=texts,
        target_language=language_in(target, target=True),
        source_language=language_in(source, target=False) if source is not None else None,
        model=string_field(fields, "model", "") or "",
        options=TranslationOptions(split_sentences=split, markup=markup_rules(fields)),
    )
    return request, bool_field(fields, "show_billed_characters")


def with_glossary(core: ServingCore, request: TranslateRequest, glossary_id: str) -> TranslateRequest:
    """The request with the glossary's terms, where its languages are the glossary's (DeepL's rules: the
    source named, the pair the same)."""
    terms = core.glossaries.terms_for(glossary_id, request.source_language, request.target_language)
    options = dataclasses.replace(request.options, glossary=terms)
    return dataclasses.replace(request, options=options)


def add_deepl_routes(app: FastAPI, core: ServingCore) -> None:
    usage = {"characters": 0}  # characters translated on this door since the server started

    @app.post(
        "/v2/translate", responses=answers(DEEPL, TRANSLATED), openapi_extra=json_or_form(app, DeeplTranslateBody)
    )
    async def translate(request: Request) -> Response:
        async def work(call: Call) -> Response:
            fields = await request_fields(request)
            translation, billed = translate_request(fields)
            glossary_id = string_field(fields, "glossary_id")
            if glossary_id is not None:
                translation = with_glossary(core, translation, glossary_id)
            results = await core.translation.translate(translation, call.record)
            usage["characters"] += sum(len(text) for text in translation.texts)
            answers = []
            for text, result in zip(translation.texts, results):
                answer = {"detected_source_language": language_out(result.source_language), "text": result.text}
                if billed:
                    answer["billed_characters"] = len(text)
                answers.append(answer)
            return JSONResponse({"translations": answers})

        return await handle(core, request, NAMES, work, DEEPL)

    type_query = {"name": "type", "in": "query", "required": False, "schema": {"enum": ["source", "target"]}}

    @app.get(
        "/v2/languages",
        operation_id="deepl_languages_get",
        responses=answers(DEEPL, LANGUAGES),
        openapi_extra={"parameters": [type_query]},
    )
    @app.post(  # DeepL's clients send a form body
        "/v2/languages",
        operation_id="deepl_languages_post",
        responses=answers(DEEPL, LANGUAGES),
        openapi_extra=json_or_form(app, DeeplLanguagesBody, required=False),
    )
    async def languages(request: Request) -> Response:
        async def work(call: Call) -> Response:
            fields = await request_fields(request)
            kind = string_field(fields, "type", "source")
            if kind not in ("source", "target"):
                raise invalid("type", f"{kind!r}; source or target")
            return JSONResponse(language_listing(core, kind == "target"))

        return await handle(core, request, {}, work, DEEPL)

    @app.get("/v2/usage", responses=answers(DEEPL, USAGE))  # as DeepL's clients ask for it
    async def usage_route(request: Request) -> Response:
        async def work(call: Call) -> Response:
            for name in await request_fields(request):
                raise invalid(name, "not a parameter of /v2/usage")
            return JSONResponse({"character_count": usage["characters"], "character_limit": NO_LIMIT})

        return await handle(core, request, {}, work, DEEPL)


def deepl_languages(core: ServingCore, target: bool) -> dict:
    """The DeepL codes served, as a schema's enum (and their lower-case spellings, which DeepL takes too)."""
    codes = [entry["language"] for entry in language_listing(core, target)]
    return {"enum": codes + [code.lower() for code in codes]}


FILLS = {
    "deepl_sources": lambda core: deepl_languages(core, target=False),
    "deepl_targets": lambda core: deepl_languages(core, target=True),
}
