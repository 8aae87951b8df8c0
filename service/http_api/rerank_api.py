"""/v1/rerank on the HTTP port, in the shape Cohere's, Jina's and vLLM's rerank APIs share: a query and its
documents (texts, or objects with a text) in; results with each document's index and relevance score, best
first, out. Errors in the OpenAI door's shape."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from starlette.responses import JSONResponse, Response

from ..core.calls.lifecycle import Call
from ..core.ranking.cross_encoding import TRUNCATIONS, RerankRequest, RerankResult
from ..core.serving import ServingCore
from ..errors import invalid
from .call_handling import OPENAI, handle
from .documented_types import DOCUMENTS as LIMITED_DOCUMENTS
from .documented_types import NULL, STRICT, TEXT, Integer, Text, model_field
from .openai_types import RERANKED
from .openapi_document import answers


class RerankDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)

    text: Text


DOCUMENT = {
    "type": "object",
    "properties": {"text": TEXT},
    "required": ["text"],
    "additionalProperties": False,
}
DOCUMENTS = {"type": "array", "items": {"anyOf": [TEXT, DOCUMENT]}, **LIMITED_DOCUMENTS}


class RerankBody(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)

    query: Text
    documents: Annotated[list[str | RerankDocument], WithJsonSchema(DOCUMENTS)] = Field(
        description="texts, or objects with a text (Cohere's, Jina's)"
    )
    model: Annotated[str, model_field("reranking_models")] = Field(
        "", description="a served cross-encoder; empty: the default one"
    )
    top_n: Annotated[Integer | None, WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, NULL]})] = Field(
        None, description="only the best n"
    )
    return_documents: bool = False
    raw_scores: bool = Field(False, description="attnserve's: the logits, without the checkpoint's activation")
    truncation: Annotated[str, WithJsonSchema({"enum": list(TRUNCATIONS)})] = Field(
        "longest_first", description="attnserve's: where a pair too long is cut"
    )
    max_chunks_per_doc: Annotated[Integer | None, WithJsonSchema(NULL)] = Field(
        None, description="Cohere's; refused when set: no chunking here"
    )


def ranked_documents(result: RerankResult) -> list[dict]:
    """The results in the form Cohere's and Jina's rerank answers share: index, relevance_score, and the
    document's text where it was asked for."""
    entries = []
    for r in result.results:
        entry = {"index": r.index, "relevance_score": r.score}
        if r.document is not None:
            entry["document"] = {"text": r.document}
        entries.append(entry)
    return entries


def add_rerank_routes(app: FastAPI, core: ServingCore) -> None:
    @app.post("/v1/rerank", responses=answers(OPENAI, RERANKED))
    async def rerank(body: RerankBody, request: Request) -> Response:
        async def work(call: Call) -> Response:
            if body.max_chunks_per_doc is not None:
                raise invalid("max_chunks_per_doc", "not served: documents are not chunked; send shorter ones")
            documents = [d if isinstance(d, str) else d.text for d in body.documents]
            ranked = RerankRequest(
                model=body.model,
                query=body.query,
                documents=documents,
                top_n=body.top_n,
                return_documents=body.return_documents,
                raw_scores=body.raw_scores,
                truncation=body.truncation,
            )
            result = await core.cross_encoding.rerank(ranked, call.record)
            results = ranked_documents(result)
            usage = {"total_tokens": result.prompt_tokens}
            return JSONResponse(
                {"id": f"rerank-{uuid.uuid4().hex}", "model": result.model, "results": results, "usage": usage}
            )

        return await handle(core, request, {}, work)
