"""/v1/rerank on the HTTP port, in the shape Cohere's, Jina's and vLLM's rerank APIs share: a query and its
documents (texts, or objects with a text) in; results with each document's index and relevance score, best
first, out. Errors in the OpenAI door's shape."""

from __future__ import annotations

import uuid

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response

from ..core.calls.lifecycle import Call
from ..core.ranking.cross_encoding import RerankRequest
from ..core.serving import ServingCore
from ..errors import invalid
from .call_handling import handle


class RerankDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str


class RerankBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str
    documents: list[str | RerankDocument] = Field(description="texts, or objects with a text (Cohere's, Jina's)")
    model: str = Field("", description="a served cross-encoder; empty: the default one")
    top_n: int | None = Field(None, description="only the best n")
    return_documents: bool = False
    raw_scores: bool = Field(False, description="attnserve's: the logits, without the checkpoint's activation")
    truncation: str = Field("longest_first", description="attnserve's: longest_first, or only_document")
    max_chunks_per_doc: int | None = Field(None, description="Cohere's; refused when set: no chunking here")


def add_rerank_routes(app: FastAPI, core: ServingCore) -> None:
    @app.post("/v1/rerank")
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
            results = []
            for r in result.results:
                entry = {"index": r.index, "relevance_score": r.score}
                if r.document is not None:
                    entry["document"] = {"text": r.document}
                results.append(entry)
            usage = {"total_tokens": result.prompt_tokens}
            return JSONResponse(
                {"id": f"rerank-{uuid.uuid4().hex}", "model": result.model, "results": results, "usage": usage}
            )

        return await handle(core, request, {}, work)
