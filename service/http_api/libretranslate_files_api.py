"""LibreTranslate's file translation on the HTTP port: /translate_file (multipart: file, source, target,
api_key) answers, once the document is translated, with the URL of /download_file that sends it (once).
The jobs are the core's, as DeepL's /v2/document's."""

from __future__ import annotations

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response

from ..core.calls.lifecycle import Call
from ..core.serving import ServingCore
from ..core.translation.document_store import ERROR
from ..core.translation.files.formats import FORMATS
from ..core.translation.languages import AUTO
from ..errors import NotFound, invalid
from .call_handling import REQUEST_ID_HEADER, handle
from .deepl_documents_api import download, read_upload, submit, upload_room
from .documented_types import NULL
from .libretranslate_api import API_KEY, DOWNLOAD_PREFIX, LIBRETRANSLATE, NAMES, KeyCheck
from .openapi_document import FILL, MULTIPART, answers, request_body
from .schema_shapes import STRING, obj

FILE_PATH = "/translate_file"
SUPPORTED_FORMATS = [f".{name}" for name in FORMATS]  # as LibreTranslate's /frontend/settings lists them
FILE_FIELDS = ("source", "target", "api_key")


class LibreTranslateFileUpload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str = Field(
        json_schema_extra={"contentMediaType": "application/octet-stream"},
        description=f"the document; its name's extension one of {', '.join(SUPPORTED_FORMATS)}",
    )
    source: str | None = Field(
        AUTO, json_schema_extra={"anyOf": [{"type": "string", FILL: "libretranslate_sources"}, NULL]}
    )
    target: str = Field(json_schema_extra={FILL: "libretranslate_targets"})
    api_key: str | None = Field(None, description=API_KEY)


def add_libretranslate_file_routes(app: FastAPI, core: ServingCore, tokens: list[bytes] | None) -> None:
    keys = KeyCheck(tokens)
    translated = answers(LIBRETRANSLATE, obj(("translatedFileUrl",), translatedFileUrl=STRING))

    @app.post(FILE_PATH, responses=translated, openapi_extra=request_body(app, LibreTranslateFileUpload, MULTIPART))
    async def translate_file(request: Request) -> Response:
        """LibreTranslate answers once the file is translated: the upload is one call (admitted and
        recorded), the wait for its job is outside it, so that waiting callers hold no call's place and
        the job's own translation calls find room."""
        submitted = []

        async def work(call: Call) -> Response:
            fields, filename, data = await read_upload(request, FILE_FIELDS, upload_room(core))
            keys.check(request, fields)
            target, source = fields.get("target"), fields.get("source") or AUTO
            if not target:
                raise invalid("target", "required")
            submitted.append(await submit(core, data, filename, target, None if source.lower() == AUTO else source))
            return Response(status_code=202)

        response = await handle(core, request, NAMES, work, LIBRETRANSLATE)
        if not submitted:
            return response
        job = await core.documents.wait(submitted[0].document_id)
        if job.status == ERROR:
            answer = JSONResponse({"error": f"file: not translated: {job.error}"}, status_code=400)
        else:
            name = f"{job.document_id}-{job.document_key}.{job.format}"
            answer = JSONResponse({"translatedFileUrl": f"{str(request.base_url).rstrip('/')}{DOWNLOAD_PREFIX}{name}"})
        answer.headers[REQUEST_ID_HEADER] = response.headers[REQUEST_ID_HEADER]
        return answer

    download_answers = answers(LIBRETRANSLATE, STRING, "The translated document, once")
    download_answers[200]["content"] = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}

    @app.get(DOWNLOAD_PREFIX + "{name}", responses=download_answers, response_class=Response)
    async def download_file(request: Request, name: str) -> Response:
        async def work(call: Call) -> Response:
            document_id, _, rest = name.partition("-")
            key = rest.partition(".")[0]
            if not document_id or not key:
                raise NotFound(f"{name!r}: no such file", "name")
            return download(*await core.documents.take_result(document_id, key))

        return await handle(core, request, {}, work, LIBRETRANSLATE)
