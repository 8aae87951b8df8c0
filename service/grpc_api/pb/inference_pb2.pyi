from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EmbeddingOutput(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EMBEDDING_OUTPUT_DENSE: _ClassVar[EmbeddingOutput]
    EMBEDDING_OUTPUT_SPARSE: _ClassVar[EmbeddingOutput]
    EMBEDDING_OUTPUT_MULTI_VECTOR: _ClassVar[EmbeddingOutput]
    EMBEDDING_OUTPUT_TOKEN_EMBEDDINGS: _ClassVar[EmbeddingOutput]

class EmbeddingType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EMBEDDING_TYPE_FLOAT: _ClassVar[EmbeddingType]
    EMBEDDING_TYPE_BINARY: _ClassVar[EmbeddingType]
    EMBEDDING_TYPE_UBINARY: _ClassVar[EmbeddingType]
    EMBEDDING_TYPE_INT8: _ClassVar[EmbeddingType]
    EMBEDDING_TYPE_UINT8: _ClassVar[EmbeddingType]

class TruncationDirection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRUNCATION_DIRECTION_RIGHT: _ClassVar[TruncationDirection]
    TRUNCATION_DIRECTION_LEFT: _ClassVar[TruncationDirection]

class Task(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_UNSPECIFIED: _ClassVar[Task]
    TASK_EMBEDDING: _ClassVar[Task]
    TASK_SEQ2SEQ: _ClassVar[Task]
    TASK_CLASSIFICATION: _ClassVar[Task]

class EarlyStopping(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EARLY_STOPPING_UNSPECIFIED: _ClassVar[EarlyStopping]
    EARLY_STOPPING_HEURISTIC: _ClassVar[EarlyStopping]
    EARLY_STOPPING_ON: _ClassVar[EarlyStopping]
    EARLY_STOPPING_NEVER: _ClassVar[EarlyStopping]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_EOS: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_CANCELLED: _ClassVar[FinishReason]

class SentenceSplitting(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SENTENCE_SPLITTING_UNSPECIFIED: _ClassVar[SentenceSplitting]
    SENTENCE_SPLITTING_NO_NEWLINES: _ClassVar[SentenceSplitting]
    SENTENCE_SPLITTING_NONE: _ClassVar[SentenceSplitting]

class AttentionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTENTION_KIND_UNSPECIFIED: _ClassVar[AttentionKind]
    ATTENTION_KIND_ENCODER_SELF: _ClassVar[AttentionKind]
    ATTENTION_KIND_DECODER_SELF: _ClassVar[AttentionKind]
    ATTENTION_KIND_CROSS: _ClassVar[AttentionKind]

class PairTruncation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PAIR_TRUNCATION_LONGEST_FIRST: _ClassVar[PairTruncation]
    PAIR_TRUNCATION_ONLY_DOCUMENT: _ClassVar[PairTruncation]

class SpeechTask(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPEECH_TASK_TRANSCRIBE: _ClassVar[SpeechTask]
    SPEECH_TASK_TRANSLATE: _ClassVar[SpeechTask]
EMBEDDING_OUTPUT_DENSE: EmbeddingOutput
EMBEDDING_OUTPUT_SPARSE: EmbeddingOutput
EMBEDDING_OUTPUT_MULTI_VECTOR: EmbeddingOutput
EMBEDDING_OUTPUT_TOKEN_EMBEDDINGS: EmbeddingOutput
EMBEDDING_TYPE_FLOAT: EmbeddingType
EMBEDDING_TYPE_BINARY: EmbeddingType
EMBEDDING_TYPE_UBINARY: EmbeddingType
EMBEDDING_TYPE_INT8: EmbeddingType
EMBEDDING_TYPE_UINT8: EmbeddingType
TRUNCATION_DIRECTION_RIGHT: TruncationDirection
TRUNCATION_DIRECTION_LEFT: TruncationDirection
TASK_UNSPECIFIED: Task
TASK_EMBEDDING: Task
TASK_SEQ2SEQ: Task
TASK_CLASSIFICATION: Task
EARLY_STOPPING_UNSPECIFIED: EarlyStopping
EARLY_STOPPING_HEURISTIC: EarlyStopping
EARLY_STOPPING_ON: EarlyStopping
EARLY_STOPPING_NEVER: EarlyStopping
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_EOS: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_CANCELLED: FinishReason
SENTENCE_SPLITTING_UNSPECIFIED: SentenceSplitting
SENTENCE_SPLITTING_NO_NEWLINES: SentenceSplitting
SENTENCE_SPLITTING_NONE: SentenceSplitting
ATTENTION_KIND_UNSPECIFIED: AttentionKind
ATTENTION_KIND_ENCODER_SELF: AttentionKind
ATTENTION_KIND_DECODER_SELF: AttentionKind
ATTENTION_KIND_CROSS: AttentionKind
PAIR_TRUNCATION_LONGEST_FIRST: PairTruncation
PAIR_TRUNCATION_ONLY_DOCUMENT: PairTruncation
SPEECH_TASK_TRANSCRIBE: SpeechTask
SPEECH_TASK_TRANSLATE: SpeechTask

class EmbedRequest(_message.Message):
    __slots__ = ("model", "inputs", "normalize", "truncate", "prompt_name", "input_type", "truncation_direction", "outputs", "embedding_type")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_DIRECTION_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_TYPE_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    normalize: bool
    truncate: bool
    prompt_name: str
    input_type: str
    truncation_direction: TruncationDirection
    outputs: _containers.RepeatedScalarFieldContainer[EmbeddingOutput]
    embedding_type: EmbeddingType
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., normalize: _Optional[bool] = ..., truncate: _Optional[bool] = ..., prompt_name: _Optional[str] = ..., input_type: _Optional[str] = ..., truncation_direction: _Optional[_Union[TruncationDirection, str]] = ..., outputs: _Optional[_Iterable[_Union[EmbeddingOutput, str]]] = ..., embedding_type: _Optional[_Union[EmbeddingType, str]] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ("values", "packed")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    packed: bytes
    def __init__(self, values: _Optional[_Iterable[float]] = ..., packed: _Optional[bytes] = ...) -> None: ...

class SparseEmbedding(_message.Message):
    __slots__ = ("indices", "values")
    INDICES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    indices: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, indices: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class MultiVector(_message.Message):
    __slots__ = ("vectors",)
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    vectors: _containers.RepeatedCompositeFieldContainer[Embedding]
    def __init__(self, vectors: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ...) -> None: ...

class EmbedUsage(_message.Message):
    __slots__ = ("prompt_tokens", "truncated_inputs", "queue_seconds", "tokenization_seconds", "inference_seconds")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_INPUTS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    truncated_inputs: int
    queue_seconds: float
    tokenization_seconds: float
    inference_seconds: float
    def __init__(self, prompt_tokens: _Optional[int] = ..., truncated_inputs: _Optional[int] = ..., queue_seconds: _Optional[float] = ..., tokenization_seconds: _Optional[float] = ..., inference_seconds: _Optional[float] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("model", "embeddings", "usage", "sparse_embeddings", "multi_vectors", "token_embeddings")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SPARSE_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MULTI_VECTORS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    model: str
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    usage: EmbedUsage
    sparse_embeddings: _containers.RepeatedCompositeFieldContainer[SparseEmbedding]
    multi_vectors: _containers.RepeatedCompositeFieldContainer[MultiVector]
    token_embeddings: _containers.RepeatedCompositeFieldContainer[MultiVector]
    def __init__(self, model: _Optional[str] = ..., embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., usage: _Optional[_Union[EmbedUsage, _Mapping]] = ..., sparse_embeddings: _Optional[_Iterable[_Union[SparseEmbedding, _Mapping]]] = ..., multi_vectors: _Optional[_Iterable[_Union[MultiVector, _Mapping]]] = ..., token_embeddings: _Optional[_Iterable[_Union[MultiVector, _Mapping]]] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ("model", "inputs")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ...) -> None: ...

class TokenizedInput(_message.Message):
    __slots__ = ("ids", "tokens", "truncated")
    IDS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    tokens: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    def __init__(self, ids: _Optional[_Iterable[int]] = ..., tokens: _Optional[_Iterable[str]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ("model", "tokenized")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENIZED_FIELD_NUMBER: _ClassVar[int]
    model: str
    tokenized: _containers.RepeatedCompositeFieldContainer[TokenizedInput]
    def __init__(self, model: _Optional[str] = ..., tokenized: _Optional[_Iterable[_Union[TokenizedInput, _Mapping]]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "task", "dimensions", "max_input_tokens", "execution_provider", "opset", "is_default", "languages", "needs_source_language", "needs_target_language", "source_language", "target_language", "prompt_names", "default_prompt_name", "labels", "outputs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    OPSET_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    NEEDS_SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    NEEDS_TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_NAMES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PROMPT_NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    task: Task
    dimensions: int
    max_input_tokens: int
    execution_provider: str
    opset: int
    is_default: bool
    languages: _containers.RepeatedScalarFieldContainer[str]
    needs_source_language: bool
    needs_target_language: bool
    source_language: str
    target_language: str
    prompt_names: _containers.RepeatedScalarFieldContainer[str]
    default_prompt_name: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    outputs: _containers.RepeatedScalarFieldContainer[EmbeddingOutput]
    def __init__(self, name: _Optional[str] = ..., task: _Optional[_Union[Task, str]] = ..., dimensions: _Optional[int] = ..., max_input_tokens: _Optional[int] = ..., execution_provider: _Optional[str] = ..., opset: _Optional[int] = ..., is_default: _Optional[bool] = ..., languages: _Optional[_Iterable[str]] = ..., needs_source_language: _Optional[bool] = ..., needs_target_language: _Optional[bool] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., prompt_names: _Optional[_Iterable[str]] = ..., default_prompt_name: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., outputs: _Optional[_Iterable[_Union[EmbeddingOutput, str]]] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class GenerationParams(_message.Message):
    __slots__ = ("max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed", "stop", "ignore_eos", "num_beams", "length_penalty", "early_stopping", "num_return_sequences", "min_p", "presence_penalty", "frequency_penalty")
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    NUM_BEAMS_FIELD_NUMBER: _ClassVar[int]
    LENGTH_PENALTY_FIELD_NUMBER: _ClassVar[int]
    EARLY_STOPPING_FIELD_NUMBER: _ClassVar[int]
    NUM_RETURN_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    ignore_eos: bool
    num_beams: int
    length_penalty: float
    early_stopping: EarlyStopping
    num_return_sequences: int
    min_p: float
    presence_penalty: float
    frequency_penalty: float
    def __init__(self, max_new_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_k: _Optional[int] = ..., top_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., seed: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., ignore_eos: _Optional[bool] = ..., num_beams: _Optional[int] = ..., length_penalty: _Optional[float] = ..., early_stopping: _Optional[_Union[EarlyStopping, str]] = ..., num_return_sequences: _Optional[int] = ..., min_p: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("model", "input", "params", "source_language", "target_language")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    model: str
    input: str
    params: GenerationParams
    source_language: str
    target_language: str
    def __init__(self, model: _Optional[str] = ..., input: _Optional[str] = ..., params: _Optional[_Union[GenerationParams, _Mapping]] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ...) -> None: ...

class GenerateUsage(_message.Message):
    __slots__ = ("prompt_tokens", "generated_tokens", "time_to_first_token_seconds", "queue_seconds")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    generated_tokens: int
    time_to_first_token_seconds: float
    queue_seconds: float
    def __init__(self, prompt_tokens: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., time_to_first_token_seconds: _Optional[float] = ..., queue_seconds: _Optional[float] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("model", "text", "token_ids", "finish_reason", "usage", "hypotheses")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    HYPOTHESES_FIELD_NUMBER: _ClassVar[int]
    model: str
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: FinishReason
    usage: GenerateUsage
    hypotheses: _containers.RepeatedCompositeFieldContainer[Hypothesis]
    def __init__(self, model: _Optional[str] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[GenerateUsage, _Mapping]] = ..., hypotheses: _Optional[_Iterable[_Union[Hypothesis, _Mapping]]] = ...) -> None: ...

class Hypothesis(_message.Message):
    __slots__ = ("text", "token_ids", "finish_reason", "score")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: FinishReason
    score: float
    def __init__(self, text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., score: _Optional[float] = ...) -> None: ...

class GenerateStreamResponse(_message.Message):
    __slots__ = ("text", "token_ids", "finish_reason", "usage", "model")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: FinishReason
    usage: GenerateUsage
    model: str
    def __init__(self, text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[GenerateUsage, _Mapping]] = ..., model: _Optional[str] = ...) -> None: ...

class TranslateRequest(_message.Message):
    __slots__ = ("model", "texts", "source_language", "target_language", "num_beams", "alternatives", "max_new_tokens", "sentence_splitting", "return_scores", "return_alignment", "markup", "glossary_id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_BEAMS_FIELD_NUMBER: _ClassVar[int]
    ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_SPLITTING_FIELD_NUMBER: _ClassVar[int]
    RETURN_SCORES_FIELD_NUMBER: _ClassVar[int]
    RETURN_ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    MARKUP_FIELD_NUMBER: _ClassVar[int]
    GLOSSARY_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    source_language: str
    target_language: str
    num_beams: int
    alternatives: int
    max_new_tokens: int
    sentence_splitting: SentenceSplitting
    return_scores: bool
    return_alignment: bool
    markup: Markup
    glossary_id: str
    def __init__(self, model: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., num_beams: _Optional[int] = ..., alternatives: _Optional[int] = ..., max_new_tokens: _Optional[int] = ..., sentence_splitting: _Optional[_Union[SentenceSplitting, str]] = ..., return_scores: _Optional[bool] = ..., return_alignment: _Optional[bool] = ..., markup: _Optional[_Union[Markup, _Mapping]] = ..., glossary_id: _Optional[str] = ...) -> None: ...

class Markup(_message.Message):
    __slots__ = ("tag_handling", "outline_detection", "splitting_tags", "non_splitting_tags", "ignore_tags")
    TAG_HANDLING_FIELD_NUMBER: _ClassVar[int]
    OUTLINE_DETECTION_FIELD_NUMBER: _ClassVar[int]
    SPLITTING_TAGS_FIELD_NUMBER: _ClassVar[int]
    NON_SPLITTING_TAGS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_TAGS_FIELD_NUMBER: _ClassVar[int]
    tag_handling: str
    outline_detection: bool
    splitting_tags: _containers.RepeatedScalarFieldContainer[str]
    non_splitting_tags: _containers.RepeatedScalarFieldContainer[str]
    ignore_tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tag_handling: _Optional[str] = ..., outline_detection: _Optional[bool] = ..., splitting_tags: _Optional[_Iterable[str]] = ..., non_splitting_tags: _Optional[_Iterable[str]] = ..., ignore_tags: _Optional[_Iterable[str]] = ...) -> None: ...

class SentenceAlignment(_message.Message):
    __slots__ = ("source_words", "target_words", "pairs")
    SOURCE_WORDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_WORDS_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    source_words: _containers.RepeatedScalarFieldContainer[str]
    target_words: _containers.RepeatedScalarFieldContainer[str]
    pairs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, source_words: _Optional[_Iterable[str]] = ..., target_words: _Optional[_Iterable[str]] = ..., pairs: _Optional[_Iterable[int]] = ...) -> None: ...

class Translation(_message.Message):
    __slots__ = ("text", "model", "source_language", "target_language", "detected_confidence", "score", "alternatives", "sentences", "prompt_tokens", "generated_tokens", "alignments")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    DETECTED_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    SENTENCES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    text: str
    model: str
    source_language: str
    target_language: str
    detected_confidence: float
    score: float
    alternatives: _containers.RepeatedScalarFieldContainer[str]
    sentences: int
    prompt_tokens: int
    generated_tokens: int
    alignments: _containers.RepeatedCompositeFieldContainer[SentenceAlignment]
    def __init__(self, text: _Optional[str] = ..., model: _Optional[str] = ..., source_language: _Optional[str] = ..., target_language: _Optional[str] = ..., detected_confidence: _Optional[float] = ..., score: _Optional[float] = ..., alternatives: _Optional[_Iterable[str]] = ..., sentences: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., alignments: _Optional[_Iterable[_Union[SentenceAlignment, _Mapping]]] = ...) -> None: ...

class TranslateResponse(_message.Message):
    __slots__ = ("translations",)
    TRANSLATIONS_FIELD_NUMBER: _ClassVar[int]
    translations: _containers.RepeatedCompositeFieldContainer[Translation]
    def __init__(self, translations: _Optional[_Iterable[_Union[Translation, _Mapping]]] = ...) -> None: ...

class AttentionRequest(_message.Message):
    __slots__ = ("model", "input", "target", "max_new_tokens", "layers")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    model: str
    input: str
    target: str
    max_new_tokens: int
    layers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, model: _Optional[str] = ..., input: _Optional[str] = ..., target: _Optional[str] = ..., max_new_tokens: _Optional[int] = ..., layers: _Optional[_Iterable[int]] = ...) -> None: ...

class AttentionWeights(_message.Message):
    __slots__ = ("kind", "shape", "data", "layers")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    kind: AttentionKind
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    layers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, kind: _Optional[_Union[AttentionKind, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ..., layers: _Optional[_Iterable[int]] = ...) -> None: ...

class AttentionResponse(_message.Message):
    __slots__ = ("model", "source_tokens", "source_ids", "source_special", "target_tokens", "target_ids", "target_special", "predicted_tokens", "predicted_ids", "target_text", "attentions")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IDS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SPECIAL_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TARGET_IDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_SPECIAL_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_IDS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TEXT_FIELD_NUMBER: _ClassVar[int]
    ATTENTIONS_FIELD_NUMBER: _ClassVar[int]
    model: str
    source_tokens: _containers.RepeatedScalarFieldContainer[str]
    source_ids: _containers.RepeatedScalarFieldContainer[int]
    source_special: _containers.RepeatedScalarFieldContainer[bool]
    target_tokens: _containers.RepeatedScalarFieldContainer[str]
    target_ids: _containers.RepeatedScalarFieldContainer[int]
    target_special: _containers.RepeatedScalarFieldContainer[bool]
    predicted_tokens: _containers.RepeatedScalarFieldContainer[str]
    predicted_ids: _containers.RepeatedScalarFieldContainer[int]
    target_text: str
    attentions: _containers.RepeatedCompositeFieldContainer[AttentionWeights]
    def __init__(self, model: _Optional[str] = ..., source_tokens: _Optional[_Iterable[str]] = ..., source_ids: _Optional[_Iterable[int]] = ..., source_special: _Optional[_Iterable[bool]] = ..., target_tokens: _Optional[_Iterable[str]] = ..., target_ids: _Optional[_Iterable[int]] = ..., target_special: _Optional[_Iterable[bool]] = ..., predicted_tokens: _Optional[_Iterable[str]] = ..., predicted_ids: _Optional[_Iterable[int]] = ..., target_text: _Optional[str] = ..., attentions: _Optional[_Iterable[_Union[AttentionWeights, _Mapping]]] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("model", "query", "documents", "top_n", "return_documents", "raw_scores", "truncation")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    RETURN_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    RAW_SCORES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    model: str
    query: str
    documents: _containers.RepeatedScalarFieldContainer[str]
    top_n: int
    return_documents: bool
    raw_scores: bool
    truncation: PairTruncation
    def __init__(self, model: _Optional[str] = ..., query: _Optional[str] = ..., documents: _Optional[_Iterable[str]] = ..., top_n: _Optional[int] = ..., return_documents: _Optional[bool] = ..., raw_scores: _Optional[bool] = ..., truncation: _Optional[_Union[PairTruncation, str]] = ...) -> None: ...

class RankedDocument(_message.Message):
    __slots__ = ("index", "score", "document")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    index: int
    score: float
    document: str
    def __init__(self, index: _Optional[int] = ..., score: _Optional[float] = ..., document: _Optional[str] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("model", "results", "prompt_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[RankedDocument]
    prompt_tokens: int
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[RankedDocument, _Mapping]]] = ..., prompt_tokens: _Optional[int] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("model", "inputs", "raw_scores", "candidate_labels", "hypothesis_template", "multi_label")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    RAW_SCORES_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_LABELS_FIELD_NUMBER: _ClassVar[int]
    HYPOTHESIS_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    MULTI_LABEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    raw_scores: bool
    candidate_labels: _containers.RepeatedScalarFieldContainer[str]
    hypothesis_template: str
    multi_label: bool
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., raw_scores: _Optional[bool] = ..., candidate_labels: _Optional[_Iterable[str]] = ..., hypothesis_template: _Optional[str] = ..., multi_label: _Optional[bool] = ...) -> None: ...

class LabelScores(_message.Message):
    __slots__ = ("scores", "label")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedScalarFieldContainer[float]
    label: str
    def __init__(self, scores: _Optional[_Iterable[float]] = ..., label: _Optional[str] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("model", "labels", "results", "prompt_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    results: _containers.RepeatedCompositeFieldContainer[LabelScores]
    prompt_tokens: int
    def __init__(self, model: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., results: _Optional[_Iterable[_Union[LabelScores, _Mapping]]] = ..., prompt_tokens: _Optional[int] = ...) -> None: ...

class TranscribeRequest(_message.Message):
    __slots__ = ("model", "audio", "task", "language", "prompt", "temperature", "beam_size", "word_timestamps", "without_timestamps", "chunking_strategy")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    BEAM_SIZE_FIELD_NUMBER: _ClassVar[int]
    WORD_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    WITHOUT_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    CHUNKING_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    model: str
    audio: bytes
    task: SpeechTask
    language: str
    prompt: str
    temperature: float
    beam_size: int
    word_timestamps: bool
    without_timestamps: bool
    chunking_strategy: SilenceCuts
    def __init__(self, model: _Optional[str] = ..., audio: _Optional[bytes] = ..., task: _Optional[_Union[SpeechTask, str]] = ..., language: _Optional[str] = ..., prompt: _Optional[str] = ..., temperature: _Optional[float] = ..., beam_size: _Optional[int] = ..., word_timestamps: _Optional[bool] = ..., without_timestamps: _Optional[bool] = ..., chunking_strategy: _Optional[_Union[SilenceCuts, _Mapping]] = ...) -> None: ...

class SilenceCuts(_message.Message):
    __slots__ = ("threshold", "silence_duration_ms", "prefix_padding_ms")
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    SILENCE_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_PADDING_MS_FIELD_NUMBER: _ClassVar[int]
    threshold: float
    silence_duration_ms: int
    prefix_padding_ms: int
    def __init__(self, threshold: _Optional[float] = ..., silence_duration_ms: _Optional[int] = ..., prefix_padding_ms: _Optional[int] = ...) -> None: ...

class TranscribedWord(_message.Message):
    __slots__ = ("word", "start", "end", "probability")
    WORD_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    word: str
    start: float
    end: float
    probability: float
    def __init__(self, word: _Optional[str] = ..., start: _Optional[float] = ..., end: _Optional[float] = ..., probability: _Optional[float] = ...) -> None: ...

class TranscriptSegment(_message.Message):
    __slots__ = ("id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob", "compression_ratio", "no_speech_prob", "words", "token_logprobs")
    ID_FIELD_NUMBER: _ClassVar[int]
    SEEK_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    AVG_LOGPROB_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_RATIO_FIELD_NUMBER: _ClassVar[int]
    NO_SPEECH_PROB_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: _containers.RepeatedScalarFieldContainer[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: _containers.RepeatedCompositeFieldContainer[TranscribedWord]
    token_logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, id: _Optional[int] = ..., seek: _Optional[int] = ..., start: _Optional[float] = ..., end: _Optional[float] = ..., text: _Optional[str] = ..., tokens: _Optional[_Iterable[int]] = ..., temperature: _Optional[float] = ..., avg_logprob: _Optional[float] = ..., compression_ratio: _Optional[float] = ..., no_speech_prob: _Optional[float] = ..., words: _Optional[_Iterable[_Union[TranscribedWord, _Mapping]]] = ..., token_logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class TranscribeResponse(_message.Message):
    __slots__ = ("model", "task", "language", "duration", "text", "segments")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    task: SpeechTask
    language: str
    duration: float
    text: str
    segments: _containers.RepeatedCompositeFieldContainer[TranscriptSegment]
    def __init__(self, model: _Optional[str] = ..., task: _Optional[_Union[SpeechTask, str]] = ..., language: _Optional[str] = ..., duration: _Optional[float] = ..., text: _Optional[str] = ..., segments: _Optional[_Iterable[_Union[TranscriptSegment, _Mapping]]] = ...) -> None: ...

class TranscribeStreamRequest(_message.Message):
    __slots__ = ("options", "audio")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    options: TranscribeRequest
    audio: bytes
    def __init__(self, options: _Optional[_Union[TranscribeRequest, _Mapping]] = ..., audio: _Optional[bytes] = ...) -> None: ...

class TranscribeStreamResponse(_message.Message):
    __slots__ = ("model", "language", "segments", "done", "text", "duration")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    model: str
    language: str
    segments: _containers.RepeatedCompositeFieldContainer[TranscriptSegment]
    done: bool
    text: str
    duration: float
    def __init__(self, model: _Optional[str] = ..., language: _Optional[str] = ..., segments: _Optional[_Iterable[_Union[TranscriptSegment, _Mapping]]] = ..., done: _Optional[bool] = ..., text: _Optional[str] = ..., duration: _Optional[float] = ...) -> None: ...
