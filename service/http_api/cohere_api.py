"""Cohere's v2 API on the HTTP port, POST /v2/embed and /v2/rerank, in the shapes Cohere's SDK (ClientV2 with
a base_url) sends and reads: several embedding types from one pass (float, int8, uint8, binary, ubinary as
sentence-transformers' quantize_embeddings makes them; base64, float32's little-endian bytes), input_type
choosing the model's prompt, truncate NONE, START or END. Errors as Cohere's, {"message"}, and its statuses."""

from __future__ import annotations

import base64
import uuid
from typing import Annotated, Literal

import numpy as np
from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema
from starlette.responses import Response

from ..core.calls.lifecycle import Call
from ..core.embedding.embeddings import INPUT_TYPES, EmbedRequest
from ..core.ranking.cross_encoding import RerankRequest
from ..core.serving import ServingCore
from ..errors import invalid
from .call_handling import BEARER_STATUSES, FastJSONResponse, HttpApi, MessageError, body_error, handle
from .documented_types import DIMENSIONS, NULL, STRICT, TEXT, TEXTS, Integer, Text, model_field
from .documented_types import DOCUMENTS as LIMITED_DOCUMENTS
from .openapi_document import FILL, answers, request_body
from .request_fields import json_fields
from .rerank_api import ranked_documents
from .schema_shapes import INTEGER, NUMBER, OBJECT, STRING, array, obj

COHERE = HttpApi("cohere", BEARER_STATUSES, lambda refusal: {"message": refusal.message}, MessageError)
EMBEDDING_TYPES = ("float", "int8", "uint8", "binary", "ubinary", "base64")
PATHS = ("/v2/embed", "/v2/rerank")
EMBED_NAMES = {"inputs": "texts", "dimensions": "output_dimension", "embedding_type": "embedding_types"}
RERANK_NAMES = {}
TRUNCATE = {"NONE": (False, "right"), "START": (True, "left"), "END": (True, "right")}
META = {"api_version": {"version": "2"}}


class CohereBody(BaseModel):
    model_config = ConfigDict(extra="ignore", **STRICT)  # its SDKs send fields of later versions (priority, ...)

    model: Annotated[str, model_field("dense_models")] = Field(
        "", description="a served model; empty: the default one of its kind"
    )


class TextContent(BaseModel):
    model_config = STRICT

    type: Literal["text"]
    text: Text


TEXT_CONTENT = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": TEXT},
    "required": ["type", "text"],
}
CONTENT = {
    "type": "object",
    "properties": {"content": {"type": "array", "items": TEXT_CONTENT, "minItems": 1, "maxItems": 1}},
    "required": ["content"],
}


class Content(BaseModel):
    model_config = STRICT

    content: list[TextContent]


INPUTS = {"type": "array", "items": CONTENT, "minItems": 1, FILL: "batch"}
# texts or inputs, not both; input_type is required (text models: no image)
QUANTIZED = {"type": "array", "contains": {"enum": ["int8", "uint8"]}}
EMBED_RULES = {
    "oneOf": [
        {"properties": {"texts": {"type": "array"}}, "required": ["texts"]},
        {"properties": {"inputs": {"type": "array"}}, "required": ["inputs"]},
    ],
    "required": ["input_type"],
    "if": {"properties": {"embedding_types": QUANTIZED}, "required": ["embedding_types"]},
    "then": {"properties": {"output_dimension": {FILL: "full_dimensions"}}},
}


class CohereEmbedBody(CohereBody):
    model_config = ConfigDict(extra="ignore", json_schema_extra=EMBED_RULES)

    texts: Annotated[list[str] | None, WithJsonSchema({"anyOf": [TEXTS, NULL]})] = None
    inputs: Annotated[list[Content] | None, WithJsonSchema({"anyOf": [INPUTS, NULL]})] = Field(
        None, description="text content only"
    )
    images: Annotated[list[str] | None, WithJsonSchema({"anyOf": [NULL, {"type": "array", "maxItems": 0}]})] = Field(
        None, description="not served: text models only"
    )
    input_type: Annotated[str | None, WithJsonSchema({"enum": list(INPUT_TYPES)})] = None
    embedding_types: Annotated[
        list[str] | None, WithJsonSchema({"anyOf": [NULL, {"type": "array", "items": {"enum": list(EMBEDDING_TYPES)}}]})
    ] = None
    output_dimension: Annotated[Integer | None, DIMENSIONS] = None
    max_tokens: Annotated[Integer | None, WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, NULL]})] = None
    truncate: Literal["NONE", "START", "END"] | None = None


class CohereDocument(BaseModel):
    model_config = STRICT

    text: Text


DOCUMENTS = {
    "type": "array",
    "items": {"anyOf": [TEXT, {"type": "object", "properties": {"text": TEXT}, "required": ["text"]}]},
    **LIMITED_DOCUMENTS,
}


class CohereRerankBody(CohereBody):
    model: Annotated[str, model_field("reranking_models")] = Field(
        "", description="a served cross-encoder; empty: the default one"
    )
    query: Text
    documents: Annotated[list[str | CohereDocument], WithJsonSchema(DOCUMENTS)]
    top_n: Annotated[Integer | None, WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, NULL]})] = None
    max_tokens_per_doc: Annotated[
        Integer | None, WithJsonSchema({"anyOf": [{"type": "integer", FILL: "pair_tokens"}, NULL]})
    ] = Field(None, description="at least the model's own limit: documents are cut there")
    return_documents: bool = False  # the SDKs before 5.14 send it


EMBEDDED = obj(
    ("id", "embeddings", "meta", "response_type"),
    id=STRING,
    embeddings={**OBJECT, "additionalProperties": {"type": "array"}},
    texts=array(STRING),
    meta=OBJECT,
    response_type={"const": "embeddings_by_type"},
)
RERANKED = obj(
    ("id", "results", "meta"),
    id=STRING,
    results=array(obj(("index", "relevance_score"), index=INTEGER, relevance_score=NUMBER, document=OBJECT)),
    meta=OBJECT,
)


def pair_tokens(core) -> dict:
    """max_tokens_per_doc's least: the longest pair a served cross-encoder takes."""
    return {"minimum": max((m.max_input_tokens for m in core.models() if m.task == "classification"), default=1)}


FILLS = {"pair_tokens": pair_tokens}


def texts_of(body: CohereEmbedBody) -> list[str]:
    """texts, or inputs of one text part each."""
    if body.images:
        raise invalid("images", "not served: text models only")
    if body.texts is not None and body.inputs is not None:
        raise invalid("texts", "give texts or inputs, not both")
    if body.inputs is None:
        return body.texts or []
    texts = []
    for i, item in enumerate(body.inputs):
        if len(item.content) != 1:
            raise invalid(f"inputs[{i}].content", f"{len(item.content)} parts; one text part an input")
        texts.append(item.content[0].text)
    return texts


def typed_values(vectors: np.ndarray, kind: str) -> list:
    if kind == "base64":
        return [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
    return vectors.tolist()


def add_cohere_routes(app: FastAPI, core: ServingCore) -> None:
    async def parsed(request: Request, kind):
        try:
            return kind.model_validate(await json_fields(request))
        except ValidationError as error:
            raise body_error(error) from None

    @app.post("/v2/embed", responses=answers(COHERE, EMBEDDED), openapi_extra=request_body(app, CohereEmbedBody))
    async def embed(request: Request) -> Response:
        async def work(call: Call) -> Response:
            body = await parsed(request, CohereEmbedBody)
            if body.input_type is None:  # Cohere's embed models need it; so do prompts and ColBERT's sides
                raise invalid("input_type", "required: search_document, search_query, classification or clustering")
            if body.input_type == "image":
                raise invalid("input_type", "image: not served (text models only)")
            kinds = list(dict.fromkeys(body.embedding_types or ["float"]))
            unknown = [k for k in kinds if k not in EMBEDDING_TYPES]
            if unknown:
                raise invalid("embedding_types", f"{unknown[0]!r}; any of float, int8, uint8, binary, ubinary, base64")
            cut, direction = TRUNCATE[body.truncate or "END"]
            texts = texts_of(body)
            embedded = EmbedRequest(
                model=body.model,
                inputs=texts,
                truncate=cut,
                truncation_direction=direction,
                dimensions=body.output_dimension,
                input_type=body.input_type,
                outputs=("dense",),
                dense_types=tuple(k for k in kinds if k not in ("float", "base64")),
                max_tokens=body.max_tokens,
            )
            result = await core.embeddings.embed(embedded, call.record)
            vectors = {k: result.vectors if k in ("float", "base64") else result.dense_typed[k] for k in kinds}
            return FastJSONResponse(
                {
                    "id": str(uuid.uuid4()),
                    "embeddings": {k: typed_values(v, k) for k, v in vectors.items()},
                    "texts": texts,
                    "meta": {**META, "billed_units": {"input_tokens": result.usage.prompt_tokens}},
                    "response_type": "embeddings_by_type",
                }
            )

        return await handle(core, request, EMBED_NAMES, work, COHERE)

    @app.post("/v2/rerank", responses=answers(COHERE, RERANKED), openapi_extra=request_body(app, CohereRerankBody))
    async def rerank(request: Request) -> Response:
        async def work(call: Call) -> Response:
            body = await parsed(request, CohereRerankBody)
            model = core.model_for(body.model, "classification", call.record.rpc)
            if body.max_tokens_per_doc is not None and body.max_tokens_per_doc < model.max_input_tokens:
                raise invalid(
                    "max_tokens_per_doc",
                    f"{body.max_tokens_per_doc}; documents are cut at model {model.name!r}'s own limit, "
                    f"{model.max_input_tokens} tokens a pair: send at least that, or leave it unset",
                )
            documents = [d if isinstance(d, str) else d.text for d in body.documents]
            ranked = RerankRequest(
                model=model.name,
                query=body.query,
                documents=documents,
                top_n=body.top_n,
                return_documents=body.return_documents,
            )
            result = await core.cross_encoding.rerank(ranked, call.record)
            results = ranked_documents(result)
            meta = {**META, "billed_units": {"search_units": 1}}
            return FastJSONResponse({"id": str(uuid.uuid4()), "results": results, "meta": meta})

        return await handle(core, request, RERANK_NAMES, work, COHERE)
