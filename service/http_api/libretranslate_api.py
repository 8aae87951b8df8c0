"""LibreTranslate's API on the HTTP port (/translate, /detect, /languages), as the apps and plugins that
speak it call it: its fields (JSON or form bodies, `api_key` in the body or a bearer token), its language
codes ("auto" to detect), its response shapes (detectedLanguage's confidence in percent) and its error
shape ({"error": ...})."""

from __future__ import annotations

import functools
import hmac
from typing import Annotated

import langcodes
from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from starlette.responses import JSONResponse, Response

from modeldir.languages import language_name, language_tag

from ..core.calls.lifecycle import Call, Refusal
from ..core.serving import ServingCore
from ..core.translation.files.formats import FORMATS as FILE_FORMATS
from ..core.translation.languages import AUTO
from ..core.translation.markup import HTML, MarkupRules
from ..core.translation.translation import TranslateRequest, TranslationOptions
from ..errors import Unauthenticated, invalid
from ..ops.auth import REQUIRED, bearer_allowed
from .call_handling import KEY_STATUSES, HttpApi, TextError, handle
from .documented_types import NULL, SourceTexts, Text
from .openapi_document import FILL, answers, json_or_form
from .request_fields import int_field, request_fields, string_field, texts_field
from .schema_shapes import BOOLEAN, INTEGER, NUMBER, OBJECT, STRING, array, obj


def libretranslate_error(refusal: Refusal) -> dict:
    return {"error": refusal.message}


def route_name(path: str) -> str:
    """A LibreTranslate path's name in call records and metrics, a download's file name (its key) left out."""
    if path.startswith(DOWNLOAD_PREFIX):
        return "libretranslate.download_file"
    return f"libretranslate.{path.rsplit('/', 1)[-1] or 'root'}"


LIBRETRANSLATE = HttpApi(
    "libretranslate", KEY_STATUSES, libretranslate_error, TextError, key_in_body=True, route_name=route_name
)
PATHS = ("/translate", "/detect", "/languages", "/frontend/settings", "/translate_file")
DOWNLOAD_PREFIX = "/download_file/"  # a translated file's path: its id and key in it
NAMES = {"texts": "q", "source_language": "source", "target_language": "target"}
TRANSLATE_FIELDS = {"q", "source", "target", "format", "alternatives", "api_key", "model"}
MAX_ALTERNATIVES = 3  # LibreTranslate's own cap
FORMATS = ("text", "html")
API_KEY = "the server's token, where it requires one (or send it as a bearer token)"


class LibreTranslateBody(BaseModel):
    """/translate's fields, for the OpenAPI document (translate_request reads them, JSON or form)."""

    model_config = ConfigDict(extra="forbid")

    q: SourceTexts
    source: Annotated[
        str | None, WithJsonSchema({"anyOf": [{"type": "string", FILL: "libretranslate_sources"}, NULL]})
    ] = AUTO
    target: Annotated[str, WithJsonSchema({"type": "string", FILL: "libretranslate_targets"})]
    format: Annotated[str, WithJsonSchema({"enum": list(FORMATS)})] = "text"
    alternatives: Annotated[int, WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_ALTERNATIVES})] = 0
    api_key: str | None = Field(None, description=API_KEY)
    model: Annotated[str | None, WithJsonSchema({"anyOf": [{"type": "string", FILL: "translating_models"}, NULL]})] = (
        None
    )


class LibreDetectBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    q: Text
    api_key: str | None = Field(None, description=API_KEY)


TRANSLATED = obj(
    ("translatedText",),
    translatedText={"anyOf": [STRING, array(STRING)]},
    detectedLanguage={"anyOf": [OBJECT, array(OBJECT)]},
    alternatives={"type": "array"},
)
DETECTED = array(obj(("confidence", "language"), confidence=NUMBER, language=STRING))
LANGUAGES = array(obj(("code", "name", "targets"), code=STRING, name=STRING, targets=array(STRING)))
CODE_NAME = obj(("code", "name"), code=STRING, name=STRING)
SETTINGS = obj(
    ("charLimit", "apiKeys", "keyRequired", "suggestions", "filesTranslation", "supportedFilesFormat", "language"),
    charLimit=INTEGER,
    frontendTimeout=INTEGER,
    apiKeys=BOOLEAN,
    keyRequired=BOOLEAN,
    suggestions=BOOLEAN,
    filesTranslation=BOOLEAN,
    supportedFilesFormat=array(STRING),
    language=obj(("source", "target"), source=CODE_NAME, target=CODE_NAME),
)


@functools.cache
def language_code(code: str | None) -> str:
    """A model's code as LibreTranslate names it: fra_Latn -> fr, zho_Hant -> zh-Hant, zxx_Zyyy -> zxx,
    pt_XX -> pt."""
    tag = language_tag(code) if code else None
    if not tag or not tag.language:
        return code or ""
    script = None if tag.script == "Zyyy" else tag.script  # "Common": no script of its own (zxx_Zyyy: digits)
    return (
        langcodes.Language.make(language=tag.language, script=script, territory=tag.territory)
        .simplify_script()
        .to_tag()
    )


def confidence(value: float | None) -> float:
    """A confidence in percent, as LibreTranslate gives it."""
    return round(100.0 * (1.0 if value is None else value), 1)


def languages_listing(core: ServingCore) -> list[dict]:
    """Each language some served model reads, with the languages it can be translated into."""
    targets: dict[str, set[str]] = {}
    for model in core.translation_languages():
        into = {language_code(c) for c in model.targets}
        for code in model.sources:
            source = language_code(code)
            targets.setdefault(source, set()).update(into - {source})
    return [{"code": code, "name": language_name(code), "targets": sorted(targets[code])} for code in sorted(targets)]


class KeyCheck:
    """The server's tokens, sent as a bearer token or as LibreTranslate's api_key field."""

    def __init__(self, tokens: list[bytes] | None):
        self.tokens = tokens

    def check(self, request: Request, fields: dict) -> None:
        if fields.get("api_key") is not None and not isinstance(fields["api_key"], str):
            raise invalid("api_key", f"a string, not {type(fields['api_key']).__name__}")
        if not self.tokens or bearer_allowed(request.headers.get("authorization"), self.tokens):
            return
        key = fields.get("api_key")
        presented = key.encode() if isinstance(key, str) else b""
        if not (presented and any([hmac.compare_digest(presented, token) for token in self.tokens])):
            raise Unauthenticated(f"api_key: a valid key is required (or {REQUIRED})", "api_key")


def translate_request(fields: dict) -> tuple[TranslateRequest, bool]:
    """LibreTranslate's fields as a translation request, and whether q was a list."""
    for name in fields:
        if name not in TRANSLATE_FIELDS:
            raise invalid(name, "not a field of /translate")
    texts, several = texts_field(fields, "q")
    source = string_field(fields, "source", AUTO)
    if source == "":
        raise invalid("source", f"empty; {AUTO!r} detects the language")
    source = source or AUTO
    target = string_field(fields, "target")
    if not target:
        raise invalid("target", "required")
    text_format = string_field(fields, "format", "text")
    if text_format not in FORMATS:
        raise invalid("format", f"{text_format!r}; one of {', '.join(FORMATS)}")
    alternatives = int_field(fields, "alternatives", 0, 0, MAX_ALTERNATIVES)
    markup = MarkupRules(tag_handling=HTML) if text_format == "html" else None
    options = TranslationOptions(alternatives=alternatives, markup=markup)
    model = string_field(fields, "model", "") or ""
    return TranslateRequest(
        texts=texts, target_language=target, source_language=source, model=model, options=options
    ), several


def add_libretranslate_routes(app: FastAPI, core: ServingCore, tokens: list[bytes] | None) -> None:
    keys = KeyCheck(tokens)

    @app.post(
        "/translate", responses=answers(LIBRETRANSLATE, TRANSLATED), openapi_extra=json_or_form(app, LibreTranslateBody)
    )
    async def translate(request: Request) -> Response:
        async def work(call: Call) -> Response:
            fields = await request_fields(request)
            keys.check(request, fields)
            translation, several = translate_request(fields)
            results = await core.translation.translate(translation, call.record)
            answers = [{"translatedText": r.text} for r in results]
            if translation.source_language.lower() == AUTO:
                for answer, r in zip(answers, results):
                    detected = {
                        "confidence": confidence(r.detected_confidence),
                        "language": language_code(r.source_language),
                    }
                    answer["detectedLanguage"] = detected
            if translation.options.alternatives:
                for answer, r in zip(answers, results):
                    answer["alternatives"] = list(r.alternatives)
            if not several:
                return JSONResponse(answers[0])
            return JSONResponse({key: [a[key] for a in answers] for key in answers[0]})

        return await handle(core, request, NAMES, work, LIBRETRANSLATE)

    @app.post("/detect", responses=answers(LIBRETRANSLATE, DETECTED), openapi_extra=json_or_form(app, LibreDetectBody))
    async def detect(request: Request) -> Response:
        async def work(call: Call) -> Response:
            fields = await request_fields(request)
            keys.check(request, fields)
            for name in fields:
                if name not in ("q", "api_key"):
                    raise invalid(name, "not a field of /detect")
            texts, several = texts_field(fields, "q")
            if several:
                raise invalid("q", "one text")
            ranked = core.detect_languages(texts[0])
            return JSONResponse(
                [{"confidence": confidence(d.confidence), "language": language_code(d.code)} for d in ranked]
            )

        return await handle(core, request, NAMES, work, LIBRETRANSLATE)

    @app.get("/languages", responses=answers(LIBRETRANSLATE, LANGUAGES))
    async def languages(request: Request) -> Response:
        async def work(call: Call) -> Response:
            return JSONResponse(languages_listing(core))

        return await handle(core, request, {}, work, LIBRETRANSLATE)

    @app.get("/frontend/settings", responses=answers(LIBRETRANSLATE, SETTINGS))
    async def frontend_settings(request: Request) -> Response:
        """What LibreTranslate's web page and its clients read first: the limits, whether a key is needed,
        and the languages to start from (detect; the first target served)."""

        async def work(call: Call) -> Response:
            targets = libretranslate_languages(core, target=True)["enum"]
            first = targets[0] if targets else ""
            return JSONResponse(
                {
                    "charLimit": core.limits().translation_max_characters,
                    "frontendTimeout": 500,  # LibreTranslate's default: ms before the page translates as one types
                    "apiKeys": tokens is not None,
                    "keyRequired": tokens is not None,
                    "suggestions": False,
                    "filesTranslation": True,
                    "supportedFilesFormat": [f".{name}" for name in FILE_FORMATS],
                    "language": {
                        "source": {"code": AUTO, "name": "Auto Detect"},
                        "target": {"code": first, "name": language_name(first) if first else ""},
                    },
                }
            )

        return await handle(core, request, {}, work, LIBRETRANSLATE)


def libretranslate_languages(core: ServingCore, target: bool) -> dict:
    """The codes served, as a schema's enum ("auto" among the sources: detect it)."""
    listing = languages_listing(core)
    codes = (
        sorted({t for entry in listing for t in entry["targets"]}) if target else [AUTO] + [e["code"] for e in listing]
    )
    return {"enum": codes}


FILLS = {
    "libretranslate_sources": lambda core: libretranslate_languages(core, target=False),
    "libretranslate_targets": lambda core: libretranslate_languages(core, target=True),
}
