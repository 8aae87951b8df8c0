"""The attnserve.v1.Inference servicer: protobuf in, core types; core results out, protobuf. Nothing else:
validation, limits and policy are the core's, and status codes are call_handling.py's."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..core.attention.maps import CROSS, DECODER_SELF, ENCODER_SELF, AttentionRequest, AttentionResult
from ..core.calls.lifecycle import Call
from ..core.calls.validation import GenerationOptions
from ..core.embedding.embeddings import EmbedRequest
from ..core.generation.generation import CANCELLED, EOS, LENGTH, STOP, GenerateRequest, GenerationUsage
from ..core.info import ModelInfo
from ..core.ranking.cross_encoding import ClassifyRequest, RerankRequest
from ..core.ranking.zero_shot import DEFAULT_TEMPLATE
from ..core.serving import ServingCore
from .call_handling import handler
from .pb import inference_pb2 as pb
from .pb import inference_pb2_grpc as pb_grpc
from .transcription_messages import gathered_request, stream_messages, transcribe_request, transcript_message
from .translation_messages import translate_request, translation_message

TASKS = {"embedding": pb.TASK_EMBEDDING, "seq2seq": pb.TASK_SEQ2SEQ, "classification": pb.TASK_CLASSIFICATION}
PAIR_TRUNCATIONS = {
    pb.PAIR_TRUNCATION_LONGEST_FIRST: "longest_first",
    pb.PAIR_TRUNCATION_ONLY_DOCUMENT: "only_document",
}
FINISH_REASONS = {
    LENGTH: pb.FINISH_REASON_LENGTH,
    EOS: pb.FINISH_REASON_EOS,
    STOP: pb.FINISH_REASON_STOP,
    CANCELLED: pb.FINISH_REASON_CANCELLED,
}
ATTENTION_KINDS = {
    ENCODER_SELF: pb.ATTENTION_KIND_ENCODER_SELF,
    DECODER_SELF: pb.ATTENTION_KIND_DECODER_SELF,
    CROSS: pb.ATTENTION_KIND_CROSS,
}
EARLY_STOPPING = {
    pb.EARLY_STOPPING_HEURISTIC: "false",
    pb.EARLY_STOPPING_ON: "true",
    pb.EARLY_STOPPING_NEVER: "never",
}

TRUNCATION_DIRECTIONS = {pb.TRUNCATION_DIRECTION_RIGHT: "right", pb.TRUNCATION_DIRECTION_LEFT: "left"}
EMBEDDING_OUTPUTS = {
    pb.EMBEDDING_OUTPUT_DENSE: "dense",
    pb.EMBEDDING_OUTPUT_SPARSE: "sparse",
    pb.EMBEDDING_OUTPUT_MULTI_VECTOR: "multi_vector",
    pb.EMBEDDING_OUTPUT_TOKEN_EMBEDDINGS: "token_embeddings",
}
OUTPUT_ENUMS = {name: number for number, name in EMBEDDING_OUTPUTS.items()}
EMBEDDING_TYPES = {
    pb.EMBEDDING_TYPE_FLOAT: "float",
    pb.EMBEDDING_TYPE_INT8: "int8",
    pb.EMBEDDING_TYPE_UINT8: "uint8",
    pb.EMBEDDING_TYPE_BINARY: "binary",
    pb.EMBEDDING_TYPE_UBINARY: "ubinary",
}


def generation_options(p: pb.GenerationParams) -> GenerationOptions:
    early = EARLY_STOPPING.get(p.early_stopping, str(p.early_stopping)) if p.early_stopping else None
    return GenerationOptions(
        max_new_tokens=p.max_new_tokens,
        temperature=p.temperature,
        top_k=p.top_k,
        top_p=p.top_p,
        repetition_penalty=p.repetition_penalty,
        min_p=p.min_p,
        presence_penalty=p.presence_penalty,
        frequency_penalty=p.frequency_penalty,
        seed=p.seed if p.HasField("seed") else None,
        stop=tuple(p.stop),
        ignore_eos=p.ignore_eos,
        num_beams=p.num_beams,
        length_penalty=p.length_penalty if p.HasField("length_penalty") else None,
        early_stopping=early,
        num_return_sequences=p.num_return_sequences,
    )


def generate_request(request: pb.GenerateRequest) -> GenerateRequest:
    options = dataclasses.replace(
        generation_options(request.params),
        source_language=request.source_language or None,
        target_language=request.target_language or None,
    )
    return GenerateRequest(model=request.model, input=request.input, options=options)


def embedding_messages(vectors: np.ndarray) -> list[pb.Embedding]:
    """(n, d) float32 -> values; packed bits (uint8, or int8 for binary) -> their bytes."""
    if vectors.dtype == np.float32:
        return [pb.Embedding(values=v) for v in vectors.tolist()]
    return [pb.Embedding(packed=row.tobytes()) for row in vectors]


def model_info(m: ModelInfo) -> pb.ModelInfo:
    source, target = m.language_pair or ("", "")
    return pb.ModelInfo(
        name=m.name,
        task=TASKS[m.task],
        dimensions=m.dimensions,
        max_input_tokens=m.max_input_tokens,
        execution_provider=m.provider,
        opset=m.opset,
        is_default=m.is_default,
        languages=m.languages,
        needs_source_language=m.needs_source_language,
        needs_target_language=m.needs_target_language,
        source_language=source,
        target_language=target,
        prompt_names=m.prompt_names,
        default_prompt_name=m.default_prompt_name,
        labels=m.labels,
        outputs=[OUTPUT_ENUMS[name] for name in m.outputs],
    )


def usage_message(usage: GenerationUsage | None) -> pb.GenerateUsage | None:
    if usage is None:
        return None
    return pb.GenerateUsage(
        prompt_tokens=usage.prompt_tokens,
        generated_tokens=usage.generated_tokens,
        time_to_first_token_seconds=usage.time_to_first_token,
        queue_seconds=usage.queue_seconds,
    )


def attention_response(r: AttentionResult) -> pb.AttentionResponse:
    response = pb.AttentionResponse(
        model=r.model,
        source_tokens=r.source.tokens,
        source_ids=r.source.ids,
        source_special=r.source_special,
        attentions=[
            pb.AttentionWeights(
                kind=ATTENTION_KINDS[kind],
                shape=weights.shape,
                data=weights.astype("<f4").tobytes(),
                layers=r.layers[kind],
            )
            for kind, weights in r.weights.items()
        ],
    )
    if r.target_ids is not None:
        response.target_tokens.extend(r.target_tokens)
        response.target_ids.extend(r.target_ids)
        response.target_special.extend(r.target_special)
        response.predicted_tokens.extend(r.predicted_tokens)
        response.predicted_ids.extend(r.predicted_ids)
        response.target_text = r.target_text
    return response


class InferenceServicer(pb_grpc.InferenceServicer):
    # The core's names that differ from this API's.
    field_names = {"split_sentences": "sentence_splitting", "file": "audio"}

    def __init__(self, core: ServingCore):
        self.core = core

    @handler
    async def Embed(self, request: pb.EmbedRequest, context, call: Call) -> pb.EmbedResponse:
        normalize = request.normalize if request.HasField("normalize") else None
        truncate = request.truncate if request.HasField("truncate") else True
        embed = EmbedRequest(
            model=request.model,
            inputs=list(request.inputs),
            normalize=normalize,
            truncate=truncate,
            prompt_name=request.prompt_name if request.HasField("prompt_name") else None,
            input_type=request.input_type if request.HasField("input_type") else None,
            truncation_direction=TRUNCATION_DIRECTIONS.get(
                request.truncation_direction, str(request.truncation_direction)
            ),
            outputs=tuple(EMBEDDING_OUTPUTS.get(o, str(o)) for o in request.outputs),
            embedding_type=EMBEDDING_TYPES.get(request.embedding_type, str(request.embedding_type)),
        )
        result = await self.core.embeddings.embed(embed, call.record)
        u = result.usage
        usage = pb.EmbedUsage(
            prompt_tokens=u.prompt_tokens,
            truncated_inputs=u.truncated_inputs,
            queue_seconds=u.queue_seconds,
            tokenization_seconds=u.tokenization_seconds,
            inference_seconds=u.inference_seconds,
        )
        response = pb.EmbedResponse(model=result.model, usage=usage)
        if result.vectors is not None:
            response.embeddings.extend(embedding_messages(result.vectors))
        for sparse in result.sparse or ():
            response.sparse_embeddings.add(indices=sparse.indices.tolist(), values=sparse.values.tolist())
        for vectors in result.multi_vectors or ():
            response.multi_vectors.add(vectors=embedding_messages(vectors))
        for states in result.token_embeddings or ():
            response.token_embeddings.add(vectors=embedding_messages(states))
        return response

    @handler
    async def Tokenize(self, request: pb.TokenizeRequest, context, call: Call) -> pb.TokenizeResponse:
        result = await self.core.tokenization.tokenize(request.model, list(request.inputs), call.record)
        tokenized = [pb.TokenizedInput(ids=e.ids, tokens=e.tokens, truncated=e.truncated) for e in result.encoded]
        return pb.TokenizeResponse(model=result.model, tokenized=tokenized)

    @handler
    async def Generate(self, request: pb.GenerateRequest, context, call: Call) -> pb.GenerateResponse:
        r = await self.core.generation.generate(generate_request(request), call.record)
        return pb.GenerateResponse(
            model=r.model,
            text=r.text,
            token_ids=r.token_ids,
            finish_reason=FINISH_REASONS[r.finish_reason],
            usage=usage_message(r.usage),
            hypotheses=[
                pb.Hypothesis(
                    text=h.text, token_ids=h.token_ids, finish_reason=FINISH_REASONS[h.finish_reason], score=h.score
                )
                for h in r.hypotheses
            ],
        )

    @handler
    async def GenerateStream(self, request: pb.GenerateRequest, context, call: Call) -> None:
        """Messages are written as the core's stream policy says: one at a time, each within
        stream_write_timeout, so a client that stops reading holds one message, and is given up after the
        timeout (DEADLINE_EXCEEDED; its sequence stops and frees its cache row)."""
        stream = await self.core.generation.stream(generate_request(request), call.record)
        async for event in stream.events:
            message = pb.GenerateStreamResponse(
                model=stream.model,
                text=event.text,
                token_ids=event.token_ids,
                finish_reason=FINISH_REASONS.get(event.finish_reason, pb.FINISH_REASON_UNSPECIFIED),
                usage=usage_message(event.usage),
            )
            await self.core.streams.send(context.write(message), [call.record])

    @handler
    async def ListModels(self, request: pb.ListModelsRequest, context, call: Call) -> pb.ListModelsResponse:
        return pb.ListModelsResponse(models=[model_info(m) for m in self.core.models()])

    @handler
    async def Attention(self, request: pb.AttentionRequest, context, call: Call) -> pb.AttentionResponse:
        target = request.target if request.HasField("target") else None
        attention = AttentionRequest(
            model=request.model,
            input=request.input,
            target=target,
            max_new_tokens=request.max_new_tokens,
            layers=tuple(request.layers),
        )
        return attention_response(await self.core.attention_maps.maps(attention, call.record))

    @handler
    async def Translate(self, request: pb.TranslateRequest, context, call: Call) -> pb.TranslateResponse:
        translation = translate_request(request)
        if request.glossary_id:
            terms = self.core.glossaries.terms_for(
                request.glossary_id, translation.source_language, translation.target_language
            )
            translation = dataclasses.replace(
                translation, options=dataclasses.replace(translation.options, glossary=terms)
            )
        translations = await self.core.translation.translate(translation, call.record)
        return pb.TranslateResponse(translations=[translation_message(t) for t in translations])

    @handler
    async def Rerank(self, request: pb.RerankRequest, context, call: Call) -> pb.RerankResponse:
        rerank = RerankRequest(
            model=request.model,
            query=request.query,
            documents=list(request.documents),
            top_n=request.top_n if request.HasField("top_n") else None,
            return_documents=request.return_documents,
            raw_scores=request.raw_scores,
            truncation=PAIR_TRUNCATIONS.get(request.truncation, str(request.truncation)),
        )
        r = await self.core.cross_encoding.rerank(rerank, call.record)
        ranked = [pb.RankedDocument(index=x.index, score=x.score, document=x.document or "") for x in r.results]
        return pb.RerankResponse(model=r.model, results=ranked, prompt_tokens=r.prompt_tokens)

    @handler
    async def Classify(self, request: pb.ClassifyRequest, context, call: Call) -> pb.ClassifyResponse:
        classify = ClassifyRequest(
            model=request.model,
            inputs=list(request.inputs),
            raw_scores=request.raw_scores,
            candidate_labels=tuple(request.candidate_labels) or None,  # none sent: the model's own labels
            hypothesis_template=request.hypothesis_template
            if request.HasField("hypothesis_template")
            else DEFAULT_TEMPLATE,
            multi_label=request.multi_label,
        )
        r = await self.core.cross_encoding.classify(classify, call.record)
        results = [pb.LabelScores(scores=row.tolist(), label=r.labels[int(row.argmax())]) for row in r.scores]
        return pb.ClassifyResponse(model=r.model, labels=r.labels, results=results, prompt_tokens=r.prompt_tokens)

    @handler
    async def Transcribe(self, request: pb.TranscribeRequest, context, call: Call) -> pb.TranscribeResponse:
        transcript = await self.core.transcription.transcribe(transcribe_request(request), call.record.rpc)
        return transcript_message(transcript)

    @handler
    async def TranscribeStream(self, requests, context, call: Call) -> None:
        """Each window's segments as it is final, written as GenerateStream writes (the core's stream
        policy), then the whole text."""
        transcription = self.core.transcription
        request = await gathered_request(requests, transcription.limits.max_upload_bytes)
        heard = await transcription.prepare(request, call.record.rpc)
        async for message in stream_messages(transcription, heard):
            await self.core.streams.send(context.write(message), [call.record])
