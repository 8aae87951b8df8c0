"""LibreTranslate's API on the HTTP port (/translate, /detect, /languages), as the apps and plugins that
speak it call it: its fields (JSON or form bodies, `api_key` in the body or a bearer token), its language
codes ("auto" to detect), its response shapes (detectedLanguage's confidence in percent) and its error
shape ({"error": ...})."""

from __future__ import annotations

import functools
import hmac

import langcodes
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from modeldir.languages import language_name, language_tag

from ..core.calls.lifecycle import Call, Refusal
from ..core.serving import ServingCore
from ..core.translation.languages import AUTO
from ..core.translation.translation import TranslateRequest, TranslationOptions
from ..errors import Unauthenticated, invalid
from ..ops.auth import REQUIRED, bearer_allowed
from .call_handling import KEY_STATUSES, HttpApi, handle
from .request_fields import int_field, request_fields, string_field, texts_field


def libretranslate_error(refusal: Refusal) -> dict:
    return {"error": refusal.message}


LIBRETRANSLATE = HttpApi("libretranslate", KEY_STATUSES, libretranslate_error, key_in_body=True)
PATHS = ("/translate", "/detect", "/languages")
NAMES = {"texts": "q", "source_language": "source", "target_language": "target"}
TRANSLATE_FIELDS = {"q", "source", "target", "format", "alternatives", "api_key", "model"}
MAX_ALTERNATIVES = 3  # LibreTranslate's own cap


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
    source = string_field(fields, "source", AUTO) or AUTO
    target = string_field(fields, "target")
    if not target:
        raise invalid("target", "required")
    text_format = string_field(fields, "format", "text")
    if text_format != "text":
        raise invalid("format", f"{text_format!r} is not served; send text")
    alternatives = int_field(fields, "alternatives", 0, 0, MAX_ALTERNATIVES)
    options = TranslationOptions(alternatives=alternatives)
    model = string_field(fields, "model", "") or ""
    return TranslateRequest(
        texts=texts, target_language=target, source_language=source, model=model, options=options
    ), several


def add_libretranslate_routes(app: FastAPI, core: ServingCore, tokens: list[bytes] | None) -> None:
    keys = KeyCheck(tokens)

    @app.post("/translate")
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

    @app.post("/detect")
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

    @app.get("/languages")
    async def languages(request: Request) -> Response:
        async def work(call: Call) -> Response:
            return JSONResponse(languages_listing(core))

        return await handle(core, request, {}, work, LIBRETRANSLATE)
