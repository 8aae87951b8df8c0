"""DeepL's document translation on the HTTP port, as its SDKs' translate_document calls it: upload a file
(multipart: file, target_lang, source_lang, formality, glossary_id, filename, output_format) for a
document_id and document_key, ask its status with the key (queued, translating, done or error, with
seconds_remaining and billed_characters), download the result once. The jobs are the core's
(core/translation/document_jobs.py): durable under --data-dir."""

from __future__ import annotations

import re
from pathlib import PurePath
from urllib.parse import quote

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartParser
from starlette.responses import JSONResponse, Response

from modeldir.languages import language_tag

from ..core.calls.lifecycle import Call
from ..core.serving import ServingCore
from ..core.translation.document_jobs import DocumentJobs
from ..core.translation.document_store import DONE, ERROR, Job
from ..core.translation.files.formats import FORMATS, format_of, media_type, same_format
from ..errors import invalid
from .call_handling import BodyTooLarge, handle
from .deepl_api import DEEPL, NAMES, check_formality, language_in
from .openapi_document import FILL, MULTIPART, answers, json_or_form, request_body
from .request_fields import request_fields, string_field
from .schema_shapes import INTEGER, STRING, obj

PREFIX = "/v2/document"
FORM_ROOM = 64 * 1024  # bytes of an upload's body beside its file: the other fields, the parts' headers
UPLOAD_FIELDS = ("target_lang", "source_lang", "formality", "glossary_id", "filename", "output_format")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\"\\/]")
HANDLE = obj(("document_id", "document_key"), document_id=STRING, document_key=STRING)
STATUS = obj(
    ("document_id", "status"),
    document_id=STRING,
    status={"enum": ["queued", "translating", "done", "downloaded", "error"]},
    seconds_remaining=INTEGER,
    billed_characters=INTEGER,
    error_message=STRING,
)


class DeeplDocumentUpload(BaseModel):
    """/v2/document's multipart body."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(json_schema_extra={"contentMediaType": "application/octet-stream"})
    target_lang: str = Field(json_schema_extra={FILL: "deepl_targets"})
    source_lang: str | None = None
    formality: str = "default"
    glossary_id: str | None = None
    filename: str | None = Field(None, description=f"the file's name; its extension one of {', '.join(FORMATS)}")
    output_format: str | None = Field(None, description="the file's own format (a document comes back as it went)")


class DeeplDocumentKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document_key: str = Field(min_length=1, description="the key the upload answered with")


async def read_upload(request: Request, known: tuple[str, ...], room: int) -> tuple[dict[str, str], str, bytes]:
    """A multipart upload's fields (refused where not `known`), its file's name and its bytes. The body
    (at most `room` bytes: the guard counts it) is kept in memory, so that no upload is ever written
    outside the data directory (Starlette's own form would spool a file over 1 MiB to the system's temp)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != MULTIPART:
        raise invalid("file", "required: the document, as a file part of a multipart/form-data body")
    parser = MultiPartParser(request.headers, request.stream(), max_files=1, max_fields=len(known) + 1)
    parser.spool_max_size = room
    try:
        form = await parser.parse()
    except BodyTooLarge as error:
        raise error.error() from None
    except Exception as error:  # the multipart parser's own errors: a body that is not a form
        raise invalid("body", f"not a multipart/form-data body: {error}") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise invalid("file", "required: the document, as a file part of a multipart/form-data body")
    fields = {key: value for key, value in form.multi_items() if isinstance(value, str)}
    for key in fields:
        if key not in known:
            raise invalid(key, "not a field of this call")
    return fields, upload.filename or "", await upload.read()


def upload_room(core: ServingCore) -> int:
    """The most bytes an upload's body holds: the document and the form's other fields."""
    return core.limits().document_max_bytes + FORM_ROOM


def safe_filename(name: str) -> str:
    """A file name as it may be sent back in a header: its last part, without controls or quotes."""
    return _UNSAFE.sub("_", PurePath(name.replace("\\", "/")).name)[:255] or "document"


def check_target(core: ServingCore, target_language: str) -> None:
    """A target some served model translates into: an upload into any other is refused at once, as
    DeepL's (a model that names no languages takes any)."""
    served = core.translation_languages()
    if not served or any(not model.targets for model in served):
        return
    tag = language_tag(target_language)
    bases = {found.language for model in served for code in model.targets if (found := language_tag(code))}
    if not tag or tag.language not in bases:
        raise invalid("target_language", f"{target_language!r}: no served model translates into it")


async def submit(
    core: ServingCore, data: bytes, filename: str, target_language: str, source_language: str | None, **order
) -> Job:
    """A document job for an upload (its target and glossary_id checked against its languages), read and
    checked first."""
    document_format = format_of(filename)
    check_target(core, target_language)
    if order.get("glossary_id") is not None:
        core.glossaries.terms_for(order["glossary_id"], source_language, target_language)
    jobs: DocumentJobs = core.documents
    document = await jobs.check(document_format, data)
    return await jobs.submit(
        data,
        document.characters,
        filename=safe_filename(filename),
        format=document_format,
        target_language=target_language,
        source_language=source_language,
        glossary_id=order.get("glossary_id"),
    )


def status_of(jobs: DocumentJobs, job: Job) -> dict:
    status = {"document_id": job.document_id, "status": job.status}
    seconds = jobs.seconds_remaining(job)
    if seconds is not None:
        status["seconds_remaining"] = seconds
    if job.status == DONE:
        status["billed_characters"] = job.characters
    if job.status == ERROR:
        status["error_message"] = job.error
    return status


def download(job: Job, data: bytes) -> Response:
    """The file, named as uploaded (in ASCII for old clients, and in UTF-8 as RFC 6266 says)."""
    fallback = job.filename.encode("ascii", "replace").decode().replace("?", "_")
    disposition = f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(job.filename)}"
    return Response(data, media_type=media_type(job.format), headers={"Content-Disposition": disposition})


def add_document_routes(app: FastAPI, core: ServingCore) -> None:
    jobs: DocumentJobs = core.documents
    upload_body = request_body(app, DeeplDocumentUpload, MULTIPART)

    @app.post(PREFIX, responses=answers(DEEPL, HANDLE), openapi_extra=upload_body)
    async def upload(request: Request) -> Response:
        async def work(call: Call) -> Response:
            fields, name, data = await read_upload(request, UPLOAD_FIELDS, upload_room(core))
            filename = fields.get("filename") or name
            asked = fields.get("output_format")
            if asked and not same_format(asked, format_of(filename)):
                raise invalid("output_format", f"{asked!r}: a document comes back in its own format")
            check_formality(fields)
            target, source = fields.get("target_lang"), fields.get("source_lang") or None
            if not target:
                raise invalid("target_lang", "required")
            target_language = language_in(target, target=True)
            source_language = language_in(source, target=False) if source else None
            glossary_id = fields.get("glossary_id") or None
            job = await submit(core, data, filename, target_language, source_language, glossary_id=glossary_id)
            return JSONResponse({"document_id": job.document_id, "document_key": job.document_key})

        return await handle(core, request, NAMES, work, DEEPL)

    key_body = json_or_form(app, DeeplDocumentKey)

    @app.post(PREFIX + "/{document_id}", responses=answers(DEEPL, STATUS), openapi_extra=key_body)
    async def status(request: Request, document_id: str) -> Response:
        async def work(call: Call) -> Response:
            return JSONResponse(status_of(jobs, jobs.store.check_key(document_id, await document_key(request))))

        return await handle(core, request, {}, work, DEEPL)

    result_answers = answers(DEEPL, STRING, "The translated document, in its own format")
    result_answers[200]["content"] = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}

    @app.post(
        PREFIX + "/{document_id}/result", responses=result_answers, openapi_extra=key_body, response_class=Response
    )
    async def result(request: Request, document_id: str) -> Response:
        async def work(call: Call) -> Response:
            job, data = await jobs.take_result(document_id, await document_key(request))
            return download(job, data)

        return await handle(core, request, {}, work, DEEPL)


async def document_key(request: Request) -> str:
    fields = await request_fields(request)
    for name in fields:
        if name != "document_key":
            raise invalid(name, "not a parameter of this call")
    key = string_field(fields, "document_key")
    if not key:
        raise invalid("document_key", "required")
    return key
