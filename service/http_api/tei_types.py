"""The request bodies of Text Embeddings Inference's HTTP API, as TEI's router (router/src/http/types.rs)
takes them: unknown keys ignored (its clients send some: InferenceClient's encoding_format), an input a text,
token ids, or a list of either; TEI's "Left" and "Right" or their lower-case aliases. `model` is attnserve's
extension: TEI serves one model, attnserve the default of the route's kind unless the body names one."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import invalid

# A single text, a single input of token ids, or a batch of either (TEI's Input and InputType, untagged).
Inputs = str | list[int] | list[str | list[int]]
Direction = Literal["Left", "Right", "left", "right"]
MODEL = Field("", description="attnserve's: a served model; empty: the default one of the route's kind")


class TeiBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = MODEL


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
    inputs: Inputs
    prompt_name: str | None = None


class TeiEmbedBody(EmbedAllBody):
    normalize: bool = True
    dimensions: int | None = None


class PredictBody(Truncation):
    inputs: str | list[str] | list[list[str]] = Field(description="a text, a pair [a, b], or a list of either")
    raw_scores: bool = False


class TeiRerankBody(Truncation):
    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False


class SimilarityInputs(BaseModel):
    source_sentence: str
    sentences: list[str]


class SimilarityParameters(BaseModel):
    model_config = ConfigDict(extra="ignore")

    truncate: bool | None = None
    truncation_direction: Direction = "Right"
    prompt_name: str | None = None


class SimilarityBody(TeiBody):
    inputs: SimilarityInputs
    parameters: SimilarityParameters | None = None


class TokenizeBody(TeiBody):
    inputs: str | list[str]
    add_special_tokens: bool = True
    prompt_name: str | None = None


class DecodeBody(TeiBody):
    ids: list[int] | list[list[int]]
    skip_special_tokens: bool = True


class ClassificationParameters(BaseModel):
    """huggingface_hub's text_classification parameters (POST / with a "parameters" object)."""

    model_config = ConfigDict(extra="ignore")

    top_k: int | None = Field(None, ge=1)
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = None


class ClassificationBody(Truncation):
    inputs: str | list[str]
    parameters: ClassificationParameters = ClassificationParameters()


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
