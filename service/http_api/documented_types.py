"""The request fields' types as the OpenAPI document states them, with the limits the core applies: a text is
not empty and has no NUL; a call sends 1 to max_client_batch_size texts; token ids are below the served
vocabulary; a route's `model` is one it serves. The limits are declared for the document only: the core keeps
the checks, so that every front door, gRPC's included, names the same field and limit. Numbers and booleans
are taken as JSON Schema has them (3.0 is an integer; 0 is not a boolean)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from pydantic import BeforeValidator, ConfigDict, WithJsonSchema

from modeldir.languages import language_tag

from ..core.embedding.embeddings import INPUT_TYPES
from ..core.info import ModelInfo
from ..core.ranking.zero_shot import is_entailment
from ..core.serving import ServingCore
from ..kserve_protocol import OUTPUTS
from .openapi_document import FILL

STRICT = ConfigDict(strict=True)  # no text read as a number, no number as a boolean
NULL = {"type": "null"}
NAMED = {"type": "string", "minLength": 1}  # a language named (an empty one is unset)
TEXT = {"type": "string", "minLength": 1, "pattern": "^[^\\u0000]*$", "description": "not empty, no NUL"}
TEXTS = {"type": "array", "items": TEXT, "minItems": 1, FILL: "batch", "x-limit": "max_client_batch_size"}
TOKEN_IDS = {
    "type": "array",
    "items": {"type": "integer", "minimum": 0, FILL: "vocabulary"},
    "minItems": 1,
    "description": "the model's own token ids, special tokens included as given",
}


def integral(value: object) -> object:
    """3.0 as 3: JSON Schema's integers include the floats without a fraction."""
    return int(value) if type(value) is float and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(integral)]
Text = Annotated[str, WithJsonSchema(TEXT)]
Texts = Annotated[list[str], WithJsonSchema(TEXTS)]
TextOrTexts = Annotated[str | list[str], WithJsonSchema({"anyOf": [TEXT, TEXTS]})]
# A text to translate: not only whitespace either (Python's, which a schema's \s does not match everywhere).
NOT_BLANK = "".join(f"\\u{ord(c):04x}" for c in map(chr, range(0x3001)) if c.isspace())  # the last is U+3000
SOURCE_TEXT = {
    "type": "string",
    "pattern": f"^[^\\u0000]*[^{NOT_BLANK}\\u0000][^\\u0000]*$",
    "description": "not blank, no NUL",
    FILL: "characters",
}
DOCUMENTS = {"minItems": 1, FILL: "documents", "x-limit": "rerank_max_documents"}
SOURCE_TEXTS = {**TEXTS, "items": SOURCE_TEXT, FILL: "translation_texts", "x-limit": "translation_max_texts"}
SourceTexts = Annotated[str | list[str], WithJsonSchema({"anyOf": [SOURCE_TEXT, SOURCE_TEXTS]})]
# Tag names, comma-separated in one string (DeepL's form) or as a list.
TagNames = Annotated[
    str | list[str] | None,
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, NULL]}),
]


def batch(core: ServingCore) -> dict:
    return {"maxItems": core.limits().max_client_batch_size}


def documents(core: ServingCore) -> dict:
    return {"maxItems": core.limits().rerank_max_documents}


def characters(core: ServingCore) -> dict:
    """A text to translate: the characters of a whole call at most (all its texts together, a 413 above)."""
    return {"maxLength": core.limits().translation_max_characters}


def batch_less_one(core: ServingCore) -> dict:
    return {"maxItems": core.limits().max_client_batch_size - 1}


def vocabulary(core: ServingCore) -> dict:
    """Token ids in: the embedding models' largest vocabulary."""
    return {"maximum": max((m.vocab_size for m in core.models() if m.task == "embedding"), default=1) - 1}


def dimensions(core: ServingCore) -> dict:
    return {"maximum": max((m.dimensions for m in core.models() if m.task == "embedding"), default=1)}


def max_new_tokens(core: ServingCore) -> dict:
    return {"maximum": max((m.max_new_tokens for m in core.models()), default=0)}


def beams(core: ServingCore) -> dict:
    return {"maximum": core.limits().max_beams}


def prompt_names(core: ServingCore) -> dict:
    """Any embedding model's prompt names (a model without the one named refuses it: a 400)."""
    names = sorted({n for m in core.models() for n in m.prompt_names})
    return {"anyOf": [{"type": "string", "enum": names}, NULL]} if names else NULL


def model_languages(core: ServingCore) -> dict:
    """The languages served models read or write, by their checkpoint codes and BCP-47 tags (other spellings
    of them are taken too)."""
    codes = {code for m in core.translation_languages() for code in (*m.sources, *m.targets)}
    tags = {tag.language for tag in map(language_tag, codes) if tag and tag.language}
    return {"enum": ["", *sorted(codes | tags)]}  # empty: unset, as gRPC's empty string is


def model_names(fits: Callable[[ModelInfo], bool]):
    """A route's `model`: the served models it takes, or empty: the route's own choice (a 404 where it has
    none)."""
    return lambda core: {"enum": ["", *(m.name for m in core.models() if fits(m))]}


def decode_rules(core: ServingCore) -> dict:
    """/decode's ids are below the vocabulary of the model named."""
    rules = []
    for i, m in enumerate(core.models()):
        ids = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": m.vocab_size - 1}}
        then = {"properties": {"ids": {"anyOf": [ids, {"type": "array", "items": ids}]}}}
        names = [m.name, ""] if i == 0 else [m.name]  # empty, or no model: the first loaded
        rules.append({"if": {"properties": {"model": {"enum": names}}, "required": ["model"]}, "then": then})
        if i == 0:
            rules.append({"if": {"not": {"required": ["model"]}}, "then": then})
    return {"allOf": rules}


def translating_models(core: ServingCore) -> dict:
    """The translation doors' `model`: one that names its languages; empty: the one that covers the pair."""
    return {"enum": ["", *(m.model for m in core.translation_languages() if m.sources or m.targets)]}


def language_rules(core: ServingCore) -> dict:
    """A named model's languages: one that names none takes neither; one that needs a source or target
    language is sent it (an unnamed model is chosen by the languages, the source detected). A target
    language's code is the first token generated: one new token fewer for the request."""
    rules, forcing = [], []
    for m in core.models():
        if m.task != "seq2seq":
            continue
        if not m.languages:
            unset = {"enum": [None, ""]}
            then = {"properties": {"source_language": unset, "target_language": unset}}
        else:
            needed = [
                name
                for name, need in (
                    ("source_language", m.needs_source_language),
                    ("target_language", m.needs_target_language),
                )
                if need
            ]
            then = {"properties": {n: NAMED for n in needed}, "required": needed}
            if m.needs_target_language:
                forcing.append(m.max_new_tokens - 1)
                then["properties"]["max_tokens"] = {"anyOf": [{"type": "integer", "maximum": forcing[-1]}, NULL]}
        rules.append({"if": {"properties": {"model": {"const": m.name}}, "required": ["model"]}, "then": then})
    if forcing:  # an unnamed model chosen by its target language
        most = {"anyOf": [{"type": "integer", "maximum": max(forcing)}, NULL]}
        targeted = {"properties": {"target_language": NAMED}, "required": ["target_language"]}
        rules.append({"if": targeted, "then": {"properties": {"max_tokens": most}}})
    return {"allOf": rules}


def full_dimensions(core: ServingCore) -> dict:
    """int8 and uint8 vectors keep all their dimensions (their ranges were calibrated on those)."""
    return {"enum": [None, *sorted({m.dimensions for m in core.models() if has_output("dense")(m)})]}


def has_output(output: str) -> Callable[[ModelInfo], bool]:
    return lambda m: m.task == "embedding" and output in m.outputs


def labelled(labels: str) -> Callable[[ModelInfo], bool]:
    return lambda m: m.task == "classification" and (len(m.labels) == 1) == (labels == "one")


EMBEDDING_INPUTS = WithJsonSchema(
    {"anyOf": [TEXT, TEXTS, TOKEN_IDS, {"type": "array", "items": TOKEN_IDS, "minItems": 1, FILL: "batch"}]}
)
DIMENSIONS = WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1, FILL: "dimensions"}, NULL]})
PROMPT_NAME = WithJsonSchema({FILL: "prompt_names"})
INPUT_TYPE = WithJsonSchema({"anyOf": [{"enum": list(INPUT_TYPES)}, NULL]})
MAX_NEW_TOKENS = WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0, FILL: "max_new_tokens"}, NULL]})
LANGUAGE = WithJsonSchema({"anyOf": [{"type": "string", FILL: "languages"}, NULL]})


def model_field(fill: str) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", FILL: fill, "description": "a served model; empty: the route's default"})


FILLS = {
    "batch": batch,
    "translation_texts": lambda core: {"maxItems": core.limits().translation_max_texts},
    "batch_less_one": batch_less_one,
    "documents": documents,
    "characters": characters,
    "vocabulary": vocabulary,
    "dimensions": dimensions,
    "max_new_tokens": max_new_tokens,
    "prompt_names": prompt_names,
    "languages": model_languages,
    "beams": beams,
    "decode_rules": decode_rules,
    "dense_models": model_names(has_output("dense")),
    "sparse_models": model_names(has_output("sparse")),
    "token_embedding_models": model_names(has_output("token_embeddings")),
    "seq2seq_models": model_names(lambda m: m.task == "seq2seq"),
    "transcription_models": model_names(lambda m: m.task == "transcription"),
    "speech_translation_models": lambda core: {"enum": ["", *core.transcription.translating_models()]},
    "reranking_models": model_names(labelled("one")),
    "tei_classifying_models": model_names(labelled("several")),
    "nli_models": model_names(lambda m: m.task == "classification" and any(map(is_entailment, m.labels))),
    "candidate_labels": documents,
    "tokenizing_models": model_names(lambda m: m.token_offsets),
    "any_model": model_names(lambda m: True),
    "full_dimensions": full_dimensions,
    "language_rules": language_rules,
    # The Open Inference Protocol's {model}: the models it serves (a speech model it does not, yet).
    "model_examples": lambda core: {"examples": [m.name for m in core.models() if m.task in OUTPUTS]},
    "translating_models": translating_models,
}
