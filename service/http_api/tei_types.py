"""The request bodies of Text Embeddings Inference's HTTP API, as TEI's router (router/src/http/types.rs)
takes them: unknown keys ignored (its clients send some: InferenceClient's encoding_format), an input a text,
token ids, or a list of either; TEI's "Left" and "Right" or their lower-case aliases. `model` is attnserve's
extension: TEI serves one model, attnserve the default of the route's kind unless the body names one."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from ..core.ranking.zero_shot import DEFAULT_TEMPLATE, label_list
from ..errors import invalid
from .documented_types import (
    DIMENSIONS,
    DOCUMENTS,
    NULL,
    PROMPT_NAME,
    STRICT,
    TEXT,
    TEXTS,
    TOKEN_IDS,
    Integer,
    Text,
    TextOrTexts,
    model_field,
)
from .openapi_document import FILL

# A single text, a single input of token ids, or a batch of either (TEI's Input and InputType, untagged).
BATCH = {"type": "array", "items": {"anyOf": [TEXT, TOKEN_IDS]}, "minItems": 1, FILL: "batch"}
Inputs = Annotated[str | list[Integer] | list[str | list[Integer]], WithJsonSchema({"anyOf": [TEXT, TOKEN_IDS, BATCH]})]
# One text, a pair, or a batch of either.
TEXT_OR_PAIR = {"type": "array", "items": TEXT, "minItems": 1, "maxItems": 2}
PREDICT_INPUTS = {"anyOf": [TEXT, TEXT_OR_PAIR, {"type": "array", "items": TEXT_OR_PAIR, "minItems": 1, FILL: "batch"}]}
CANDIDATES = {"type": "array", "items": TEXT, "minItems": 1, FILL: "candidate_labels"}
TEMPLATE = {
    "type": "string",
    "pattern": "[{][}]",
    "description": f"each label's hypothesis, the label at {{}}; unset: {DEFAULT_TEMPLATE!r}",
}
# The source sentence is one of the call's texts.
SENTENCES = {**TEXTS, FILL: "batch_less_one"}
IDS = {"anyOf": [TOKEN_IDS, {"type": "array", "items": TOKEN_IDS, "minItems": 1, FILL: "batch"}]}
Direction = Literal["Left", "Right", "left", "right"]
MODEL = "attnserve's: a served model; empty: the default one of the route's kind"


class TeiBody(BaseModel):
    model_config = ConfigDict(extra="ignore", **STRICT)

    model: Annotated[str, model_field("dense_models")] = Field("", description=MODEL)


class Truncation(TeiBody):
    truncate: bool | None = Field(None, description="cut inputs longer than the model takes; unset: true")
    truncation_direction: Direction = "Right"

    @property
    def direction(self) -> str:
        return self.truncation_direction.lower()

    @property
    def cut(self) -> bool:
        return self.truncate is not False  # TEI's auto_truncate, on by default


class EmbedAllBody(Truncation):
    """/embed_all's (every token's vector); /embed_sparse's is SparseBody."""

    model: Annotated[str, model_field("token_embedding_models")] = Field("", description=MODEL)
    inputs: Inputs
    prompt_name: Annotated[str | None, PROMPT_NAME] = None


class SparseBody(EmbedAllBody):
    model: Annotated[str, model_field("sparse_models")] = Field("", description=MODEL)


class TeiEmbedBody(EmbedAllBody):
    model: Annotated[str, model_field("dense_models")] = Field("", description=MODEL)
    normalize: bool = True
    dimensions: Annotated[Integer | None, DIMENSIONS] = None


class PredictBody(Truncation):
    model: Annotated[str, model_field("tei_classifying_models")] = Field("", description=MODEL)
    inputs: Annotated[str | list[str] | list[list[str]], WithJsonSchema(PREDICT_INPUTS)] = Field(
        description="a text, a pair [a, b], or a list of either"
    )
    raw_scores: bool = False


class TeiRerankBody(Truncation):
    model: Annotated[str, model_field("reranking_models")] = Field("", description=MODEL)
    query: Text
    texts: Annotated[list[str], WithJsonSchema({"type": "array", "items": TEXT, **DOCUMENTS})]
    raw_scores: bool = False
    return_text: bool = False


class SimilarityInputs(BaseModel):
    model_config = STRICT

    source_sentence: Text
    sentences: Annotated[list[str], WithJsonSchema(SENTENCES)]


class SimilarityParameters(BaseModel):
    model_config = ConfigDict(extra="ignore", **STRICT)

    truncate: bool | None = None
    truncation_direction: Direction = "Right"
    prompt_name: Annotated[str | None, PROMPT_NAME] = None


class SimilarityBody(TeiBody):
    inputs: SimilarityInputs
    parameters: SimilarityParameters | None = None


class TokenizeBody(TeiBody):
    model: Annotated[str, model_field("tokenizing_models")] = Field("", description=MODEL)
    inputs: TextOrTexts
    add_special_tokens: bool = True
    prompt_name: Annotated[str | None, PROMPT_NAME] = None


class DecodeBody(TeiBody):
    model_config = ConfigDict(json_schema_extra={FILL: "decode_rules"})

    model: Annotated[str, model_field("any_model")] = Field("", description=MODEL)
    ids: Annotated[list[Integer] | list[list[Integer]], WithJsonSchema(IDS)]
    skip_special_tokens: bool = True


class ClassificationParameters(BaseModel):
    """huggingface_hub's text_classification parameters (POST / with a "parameters" object)."""

    model_config = ConfigDict(extra="ignore", **STRICT)

    top_k: Integer | None = Field(None, ge=1)
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None


class ZeroShotParameters(BaseModel):
    """huggingface_hub's zero_shot_classification parameters (POST / with a "parameters" object): the labels
    a list, or one string of comma-separated labels, as the pipeline takes them."""

    model_config = ConfigDict(extra="ignore", **STRICT)

    candidate_labels: Annotated[list[str] | str, WithJsonSchema({"anyOf": [CANDIDATES, TEXT]})]
    multi_label: bool | None = False
    hypothesis_template: Annotated[str | None, WithJsonSchema({"anyOf": [TEMPLATE, NULL]})] = None

    @property
    def labels(self) -> tuple[str, ...]:
        return (
            label_list(self.candidate_labels)
            if isinstance(self.candidate_labels, str)
            else tuple(self.candidate_labels)
        )


class ZeroShotBody(Truncation):
    model: Annotated[str, model_field("nli_models")] = Field("", description=MODEL)
    inputs: TextOrTexts
    parameters: ZeroShotParameters = Field(description="sent by zero_shot_classification: tells it apart")


class ClassificationBody(Truncation):
    model: Annotated[str, model_field("tei_classifying_models")] = Field("", description=MODEL)
    inputs: TextOrTexts
    parameters: ClassificationParameters | None = Field(description="sent by text_classification: tells it apart")


def predict_inputs(inputs: str | list[str] | list[list[str]]) -> tuple[list[str | tuple[str, str]], bool]:
    """TEI's PredictInput: -> (the texts and pairs, whether a batch was sent). "a" and ["a"] are one text,
    ["a", "b"] one pair, [["a"], ["q", "d"]] a batch of a text and a pair."""
    if isinstance(inputs, str):
        return [inputs], False
    if all(isinstance(item, str) for item in inputs):
        if len(inputs) == 1:
            return [inputs[0]], False
        if len(inputs) == 2:
            return [(inputs[0], inputs[1])], False
        raise invalid("inputs", f"{len(inputs)} texts; one text, a pair of two, or a list of those")
    batch = []
    for i, item in enumerate(inputs):
        if not isinstance(item, list) or len(item) not in (1, 2):
            raise invalid(f"inputs[{i}]", "a list of one text or a pair of two")
        batch.append(item[0] if len(item) == 1 else (item[0], item[1]))
    return batch, True
