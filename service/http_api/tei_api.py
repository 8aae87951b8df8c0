"""Text Embeddings Inference's HTTP API on the HTTP port, so that TEI's clients (huggingface_hub's
InferenceClient, LangChain's and LlamaIndex's TEI integrations) work unchanged: /embed, /embed_sparse,
/embed_all, /rerank, /predict, /similarity, /tokenize, /decode, /info, and POST /, which answers by the
body's shape (InferenceClient posts every task to the base URL). Scores are TEI's: a sigmoid of one logit,
a softmax of several. Errors in TEI's shape, {"error", "error_type"}, with its statuses."""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from fastapi import FastAPI, Request
from pydantic import ValidationError
from starlette.responses import Response

from ..core.calls.lifecycle import Call, StatusTable
from ..core.embedding.embeddings import EmbedRequest, EmbedResult
from ..core.ranking.cross_encoding import ClassifyRequest, RerankRequest
from ..core.ranking.zero_shot import DEFAULT_TEMPLATE
from ..core.serving import ServingCore
from ..errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Overloaded,
    RequestTooLarge,
    Unauthenticated,
    Unavailable,
    invalid,
)
from .call_handling import FastJSONResponse, HttpApi, TextError, body_error, handle
from .openapi_document import FILL, JSON, REF, answers, request_body
from .request_fields import json_fields
from .tei_answers import INFO, LABELLED, NUMBERS, RANKED, SPARSE, TOKENS, VECTORS
from .tei_choices import characters, classifier, giving, labelled, sigmoid, tei_scores, timing_headers
from .tei_info import tei_info
from .tei_types import (
    ClassificationBody,
    ClassificationParameters,
    DecodeBody,
    EmbedAllBody,
    PredictBody,
    SimilarityBody,
    SimilarityParameters,
    SparseBody,
    TeiEmbedBody,
    TeiRerankBody,
    TokenizeBody,
    ZeroShotBody,
    predict_inputs,
)

TEI_STATUSES = StatusTable(
    ok="200",
    cancelled="499",
    statuses={
        InvalidArgument: (422, "Validation"),
        RequestTooLarge: (413, "Validation"),
        NotFound: (404, "Validation"),
        Overloaded: (429, "Overloaded"),
        Unavailable: (503, "Unhealthy"),
        FailedPrecondition: (424, "Backend"),
        DeadlineExceeded: (504, "Backend"),
        Unauthenticated: (401, "Unauthorized"),
    },
    internal=(500, "Backend"),
    code=lambda status: str(status[0]),
)


class TeiError(TextError):
    """TEI's error body."""

    error_type: Literal["Validation", "Overloaded", "Unhealthy", "Backend", "Unauthorized"]


TEI = HttpApi(
    "tei", TEI_STATUSES, lambda refusal: {"error": refusal.message, "error_type": refusal.status[1]}, TeiError
)
PATHS = (
    "/",
    "/embed",
    "/embed_sparse",
    "/embed_all",
    "/rerank",
    "/predict",
    "/similarity",
    "/tokenize",
    "/decode",
    "/info",
)
NAMES = {"documents": "texts"}


def add_tei_routes(app: FastAPI, core: ServingCore) -> None:
    async def embed(body: EmbedAllBody, output: str, call: Call, **fields) -> tuple[EmbedResult, dict]:
        request = EmbedRequest(
            model=giving(core, body.model, output),
            inputs=[body.inputs]
            if isinstance(body.inputs, str) or (body.inputs and isinstance(body.inputs[0], int))
            else body.inputs,
            truncate=body.cut,
            prompt_name=body.prompt_name,
            truncation_direction=body.direction,
            outputs=(output,),
            **fields,
        )
        started = time.perf_counter()
        result = await core.embeddings.embed(request, call.record)
        return result, timing_headers(result, started, result.usage.prompt_tokens, characters(body.inputs))

    async def dense(body: TeiEmbedBody, call: Call) -> Response:
        result, headers = await embed(body, "dense", call, normalize=body.normalize, dimensions=body.dimensions)
        return FastJSONResponse(result.vectors.tolist(), headers=headers)

    async def sparse(body: SparseBody, call: Call) -> Response:
        result, headers = await embed(body, "sparse", call)
        rows = [[{"index": int(i), "value": float(v)} for i, v in zip(s.indices, s.values)] for s in result.sparse]
        return FastJSONResponse(rows, headers=headers)

    async def every_token(body: EmbedAllBody, call: Call) -> Response:
        result, headers = await embed(body, "token_embeddings", call)
        return FastJSONResponse([states.tolist() for states in result.token_embeddings], headers=headers)

    async def rerank(body: TeiRerankBody, call: Call) -> Response:
        started = time.perf_counter()
        request = RerankRequest(
            model=classifier(core, body.model, "one"),
            query=body.query,
            documents=body.texts,
            return_documents=body.return_text,
            raw_scores=True,
            truncate=body.cut,
            truncation_direction=body.direction,
        )
        result = await core.cross_encoding.rerank(request, call.record)
        ranked = []
        for r in result.results:  # by logit: the sigmoid keeps the order
            entry = {"index": r.index, "score": r.score if body.raw_scores else float(sigmoid(np.float64(r.score)))}
            if r.document is not None:
                entry["text"] = r.document
            ranked.append(entry)
        used = len(body.query) * len(body.texts) + sum(len(t) for t in body.texts)
        return FastJSONResponse(ranked, headers=timing_headers(None, started, result.prompt_tokens, used))

    async def classified(body, inputs, call: Call, function: str | None = None):
        request = ClassifyRequest(
            model=classifier(core, body.model, "several"),
            inputs=inputs,
            raw_scores=True,
            truncate=body.cut,
            truncation_direction=body.direction,
        )
        result = await core.cross_encoding.classify(request, call.record)
        return result, tei_scores(result.scores.astype(np.float64), function)

    async def predict(body: PredictBody, call: Call) -> Response:
        started = time.perf_counter()
        inputs, batch = predict_inputs(body.inputs)
        result, scores = await classified(body, inputs, call, "none" if body.raw_scores else None)
        rows = [labelled(result.labels, row) for row in scores]
        used = sum(len(i) if isinstance(i, str) else len(i[0]) + len(i[1]) for i in inputs)
        return FastJSONResponse(
            rows if batch else rows[0], headers=timing_headers(None, started, result.prompt_tokens, used)
        )

    async def text_classification(body: ClassificationBody, call: Call) -> Response:
        """huggingface_hub's text_classification: a list of labels per input, best first."""
        inputs = [body.inputs] if isinstance(body.inputs, str) else body.inputs
        p = body.parameters or ClassificationParameters()
        result, scores = await classified(body, inputs, call, p.function_to_apply)
        return FastJSONResponse([labelled(result.labels, row, p.top_k) for row in scores])

    async def zero_shot_classification(body: ZeroShotBody, call: Call) -> Response:
        """huggingface_hub's zero_shot_classification: each text's candidate labels, best first, scored as
        transformers' pipeline scores them."""
        p = body.parameters
        request = ClassifyRequest(
            model=classifier(core, body.model, "entailment"),
            inputs=[body.inputs] if isinstance(body.inputs, str) else body.inputs,
            truncate=body.cut,
            truncation_direction=body.direction,
            candidate_labels=p.labels,
            hypothesis_template=DEFAULT_TEMPLATE if p.hypothesis_template is None else p.hypothesis_template,
            multi_label=bool(p.multi_label),
        )
        result = await core.cross_encoding.classify(request, call.record)
        rows = [labelled(result.labels, row) for row in result.scores.astype(np.float64)]
        return FastJSONResponse(rows[0] if isinstance(body.inputs, str) else rows)

    async def similarity(body: SimilarityBody, call: Call) -> Response:
        p = body.parameters or SimilarityParameters()
        if not body.inputs.sentences:
            raise invalid("inputs.sentences", "empty; send 1 or more")
        texts = [body.inputs.source_sentence, *body.inputs.sentences]
        embedded = EmbedAllBody(
            model=body.model,
            inputs=texts,
            truncate=p.truncate,
            truncation_direction=p.truncation_direction,
            prompt_name=p.prompt_name,
        )
        result, headers = await embed(embedded, "dense", call, normalize=True)
        return FastJSONResponse((result.vectors[1:] @ result.vectors[0]).tolist(), headers=headers)

    async def tokenize(body: TokenizeBody, call: Call) -> Response:
        texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
        result = await core.tokenization.spans(
            body.model, texts, body.add_special_tokens, body.prompt_name, call.record
        )
        return FastJSONResponse([[vars(token) for token in tokens] for tokens in result])

    async def decode(body: DecodeBody, call: Call) -> Response:
        ids = [body.ids] if not body.ids or isinstance(body.ids[0], int) else body.ids
        return FastJSONResponse(await core.tokenization.decode(body.model, ids, body.skip_special_tokens, call.record))

    routes = {
        "/embed": (TeiEmbedBody, dense, VECTORS),
        "/embed_sparse": (SparseBody, sparse, SPARSE),
        "/embed_all": (EmbedAllBody, every_token, {"type": "array", "items": VECTORS}),
        "/rerank": (TeiRerankBody, rerank, RANKED),
        "/predict": (PredictBody, predict, {"anyOf": [LABELLED, {"type": "array", "items": LABELLED}]}),
        "/similarity": (SimilarityBody, similarity, NUMBERS),
        "/tokenize": (TokenizeBody, tokenize, TOKENS),
        "/decode": (DecodeBody, decode, {"type": "array", "items": {"type": "string"}}),
    }

    async def answer(request: Request, kind, work) -> Response:
        async def run(call: Call) -> Response:
            fields = await json_fields(request)
            try:
                body = kind.model_validate(fields)
            except ValidationError as error:
                raise body_error(error) from None
            return await work(body, call)

        return await handle(core, request, NAMES, run, TEI)

    def route(kind, work):
        async def endpoint(request: Request) -> Response:
            return await answer(request, kind, work)

        return endpoint

    for path, (kind, work, shape) in routes.items():
        documented = request_body(app, kind)
        app.add_api_route(
            path, route(kind, work), methods=["POST"], responses=answers(TEI, shape), openapi_extra=documented
        )

    async def embedding(body: TeiEmbedBody, call: Call) -> Response:
        model = core.model_for(body.model, "embedding", call.record.rpc)
        return await (sparse if model.outputs[0] == "sparse" else dense)(body, call)

    # InferenceClient's tasks on the base URL, told apart by their bodies, in this order: the first kind the
    # body fits answers (sentence_similarity's inputs are an object; zero_shot_classification's parameters
    # have candidate_labels; text_classification sends other "parameters";
    # a query and texts are a rerank; the rest is embedding, sparse where the model's first output is).
    by_shape = [
        (SimilarityBody, similarity),
        (ZeroShotBody, zero_shot_classification),
        (ClassificationBody, text_classification),
        (TeiRerankBody, rerank),
        (TeiEmbedBody, embedding),
    ]
    root_body = {"anyOf": [{"$ref": REF.format(model=kind.__name__)} for kind, _ in by_shape]}
    for kind, _ in by_shape:
        request_body(app, kind)

    @app.post(
        "/",
        responses=answers(
            TEI, {"anyOf": [NUMBERS, LABELLED, {"type": "array", "items": LABELLED}, RANKED, VECTORS, SPARSE]}
        ),
        openapi_extra={"requestBody": {"required": True, "content": {JSON: {"schema": root_body}}}},
    )
    async def root(request: Request) -> Response:
        async def run(call: Call) -> Response:
            fields = await json_fields(request)
            errors = []
            for kind, work in by_shape:
                try:
                    body = kind.model_validate(fields)
                except ValidationError as error:
                    errors.append(error)
                    continue
                return await work(body, call)
            # Fitting none: the error of the kind the body looks most like (the last, embedding, by default).
            parameters = fields.get("parameters")
            zero_shot_like = isinstance(parameters, dict) and "candidate_labels" in parameters
            looks = [
                isinstance(fields.get("inputs"), dict),
                zero_shot_like,
                "parameters" in fields,
                "query" in fields,
                True,
            ]
            raise body_error(errors[looks.index(True)]) from None

        return await handle(core, request, NAMES, run, TEI)

    model_query = {"name": "model", "in": "query", "required": False, "schema": {"type": "string", FILL: "any_model"}}

    @app.get("/info", responses=answers(TEI, INFO), openapi_extra={"parameters": [model_query]})
    async def info(request: Request) -> Response:
        """The model a TEI route answers with (attnserve's `model`: the named one)."""

        async def describe(call: Call) -> Response:
            return FastJSONResponse(tei_info(core, request.query_params.get("model", "")))

        return await handle(core, request, {}, describe, TEI)
