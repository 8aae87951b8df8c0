"""ModelConfig: every architectural choice of a model, and the file it lives in (config.json): the schema
the build side writes and the server reads (the manifest carries the same fields)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .late_interaction import PROJECTION_ACTIVATIONS, ColbertSettings
from .whisper_tokens import WhisperSettings

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class PooledDense:
    """sentence-transformers' Dense layers after the pooling (sentence-T5 and GTR: one without bias; LaBSE:
    tanh): each layer's width, bias and activation; the embedding is the last one's output."""

    dims: tuple[int, ...]
    bias: tuple[bool, ...]
    activations: tuple[str, ...]

    def __post_init__(self) -> None:
        for name in ("dims", "bias", "activations"):  # lists, read from JSON
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.dims or not len(self.dims) == len(self.bias) == len(self.activations):
            raise ValueError("invalid PooledDense: a width, a bias flag and an activation per layer")
        if unknown := sorted(set(self.activations) - set(PROJECTION_ACTIVATIONS)):
            raise ValueError(f"invalid PooledDense: activations {unknown}: one of {', '.join(PROJECTION_ACTIVATIONS)}")


CONFIG_FORMAT = "attnserve.model/1"

Task = Literal["embedding", "seq2seq"]


@dataclass(frozen=True)
class ModelConfig:
    task: Task
    vocab_size: int
    d_model: int
    n_heads: int
    d_ff: int
    n_encoder_layers: int
    n_decoder_layers: int = 0  # seq2seq only
    max_positions: int = 512  # longest sequence the position table covers
    # sinusoidal: the paper's table, sin and cos interleaved; sinusoidal_split: the same frequencies with all
    # sines first, then all cosines (Marian); sinusoidal_fairseq: fairseq's frequencies, sines then cosines,
    # the pad token's row zero (M2M100, NLLB); learned: a trained table; relative: none in the embeddings, a
    # learned bias on self-attention's scores by bucket of distance (T5: model/architecture/relative_positions.py).
    positions: Literal["sinusoidal", "sinusoidal_split", "sinusoidal_fairseq", "learned", "relative"] = "sinusoidal"
    relative_buckets: int = 32  # relative positions: the buckets of distance, and the distance the last starts at
    relative_max_distance: int = 128
    relative_bias_per_layer: bool = False  # a table per layer (UMT5), not one per stack (T5)
    # Added to every position before the table is read: M2M100 and NLLB count from pad_id + 1, mBART from 2.
    position_offset: int = 0
    # What the encoder reads: token ids, or (Whisper) log-mel frames of n_mels through a stem of two 1-D
    # convolutions (the second of stride 2), its positions a fixed table of its own (sinusoidal_whisper:
    # fairseq's frequencies, no pad row) of max_source_positions rows, the convolutions' output length.
    encoder_input: Literal["tokens", "log_mel"] = "tokens"
    n_mels: int = 0
    max_source_positions: int = 0
    # A Whisper model's special tokens, languages, suppressed tokens and alignment heads (whisper_tokens.py).
    whisper: WhisperSettings | None = None
    norm_placement: Literal["post", "pre"] = "post"  # post: the paper; pre: LayerNorm inside the residual branch
    norm: Literal["layer", "rms"] = "layer"  # rms: T5's, without mean or bias
    activation: Literal["relu", "gelu", "gelu_tanh", "silu"] = "relu"
    feed_forward: Literal["plain", "gated"] = "plain"  # gated: act(x W_1) * x W_gate (T5 v1.1's gated-gelu)
    linear_bias: bool = True  # biases on the attention and feed-forward projections (T5 has none)
    # Each head's width: 0 for d_model / n_heads; T5 states its own (d_kv), and the heads' total may differ
    # from d_model (MADLAD-400 3B: 16 x 128 = 2048 over a d_model of 1024).
    d_kv: int = 0
    scale_attention: bool = True  # scores scaled by 1 / sqrt(d_head), as the paper; T5 does not (its init does)
    layer_norm_eps: float = 1e-5
    embedding_norm: bool = False  # LayerNorm right after the embedding sum (BERT)
    type_vocab_size: int = 0  # token-type (segment) embeddings; 0 = none. Inputs are always type 0.
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model), as in the paper (3.4)
    share_embeddings: bool = True  # one token table for encoder and decoder (seq2seq)
    tie_output: bool = True  # the LM head is the decoder's token table, transposed (seq2seq)
    # The decoder's output times d_model ** -0.5 before the LM head: the original T5's (its tied table's
    # logits at the scale it was trained at; transformers' scale_decoder_outputs).
    rescale_output: bool = False
    output_bias: bool = False  # a bias on the logits (Marian's final_logits_bias)
    # Embedding models: how last_hidden_state becomes one vector.
    pooling: Literal["mean", "cls"] = "mean"
    normalize: bool = True  # L2-normalise by default (a request may say otherwise)
    pooled_dense: PooledDense | None = None  # Dense layers between the pooling and the normalisation
    # Embedding models: sentence-transformers' prompts, (name, text) pairs put before an input a request
    # names (or the default's, where the checkpoint has one): "query: ", "passage: " (multilingual-e5).
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt_name: str | None = None
    # Cross-encoders and classifiers (sequence classification): a head on the first token's state (dense,
    # tanh, linear: BERT's pooler + classifier and RoBERTa's classification head alike) gives one logit per
    # label instead of a pooled vector; scores are the logits through score_activation (CrossEncoder's
    # activation_fn). pair_segments: token type 1 from the first eos (BERT's [SEP]) on, as a pair's second
    # text has it, computed in the graph from the ids.
    head: Literal["none", "classifier"] = "none"
    # The state the head reads: the encoder's first token's (BERT, RoBERTa), or (BART's sequence classifier,
    # bart-large-mnli) the decoder's at the last token, an eos, the decoder fed the input shifted right
    # after bos_id, its decoder start: an encoder-decoder read whole, as transformers' *ForSequenceClassification.
    classifier_input: Literal["first_token", "decoder_last_eos"] = "first_token"
    labels: tuple[str, ...] = ()
    score_activation: Literal["identity", "sigmoid", "softmax"] = "identity"
    pair_segments: bool = False
    # More than the pooled vector from the same pass (embedding models). sparse_head "token_weights": one
    # weight per token, relu(linear(state)) (bge-m3's sparse_linear), kept per token id at its largest;
    # "splade": the masked-LM head's logits per position (its decoder the token table), log(1 + relu) (twice
    # with splade_activation log1p_relu), then the largest (splade_pooling max) or the sum over positions:
    # a weight per vocabulary id, and no dense output. multi_vector_dim: one vector per token but the first,
    # a linear map of its state (bge-m3's colbert_linear), L2-normalised; 0: none.
    sparse_head: Literal["none", "token_weights", "splade"] = "none"
    splade_pooling: Literal["max", "sum"] = "max"
    splade_activation: Literal["relu", "log1p_relu"] = "relu"
    multi_vector_dim: int = 0
    # A ColBERT-style model (PyLate's): a vector per token from a projection stack, L2-normalised, for
    # queries and documents framed as modeldir/late_interaction.py says; no pooled output. None: not one.
    colbert: ColbertSettings | None = None
    # Tokenization: inputs longer than this are truncated (or refused). None: max_positions.
    max_input_tokens: int | None = None
    # tokenizer.json, or Marian's sentencepiece files (with target_vocab.json: marian_separate_vocabs), or
    # M2M100's sentencepiece model and vocab.json (its language tokens after the vocabulary's last id), or
    # ByT5's bytes (no file; its <extra_id_N> sentinels fill the token table after the 256 bytes)
    tokenizer: Literal["tokenizers", "marian", "marian_separate_vocabs", "m2m100", "byt5"] = "tokenizers"
    # Multilingual models (modeldir/languages.py): the languages served, as the checkpoint names them; a
    # code's token; where the source's code goes; where the target's goes.
    languages: tuple[str, ...] = ()
    language_token: str = "{}"
    source_language: Literal["none", "prefix", "suffix"] = "none"
    target_language: Literal["none", "first_token", "source_prefix", "decoder_start"] = "none"
    # The checkpoint's own language pair, where it names one (Marian's source_lang, target_lang).
    language_pair: tuple[str, ...] = ()
    pad_id: int = 0
    bos_id: int = 1  # decoder start token (seq2seq)
    eos_id: int = 2
    # Generation defaults of the checkpoint (seq2seq), as its Hugging Face generation config states them.
    suppressed_ids: tuple[int, ...] = ()  # never generated (Marian's bad_words_ids: the pad token)
    forced_eos: bool = False  # the last position a request allows is eos (forced_eos_token_id)
    # The first generated token, whatever the logits say, where no target language's code takes its place
    # (BART's forced_bos_token_id: its bos). None: the model chooses.
    forced_bos_id: int | None = None
    renormalize_logits: bool = False  # beam scores: log-softmax again after suppressing tokens
    num_beams: int = 1  # when a request does not say
    no_repeat_ngram_size: int = 0  # no n-gram of this size generated twice (0: no such rule)
    min_length: int = 0  # eos ruled out until the decoder's inputs (the start token included) are this many
    length_penalty: float = 1.0  # beam score = sum of log-probabilities / generated length ** length_penalty
    early_stopping: Literal["true", "false", "never"] = "false"  # as transformers defines it

    def __post_init__(self) -> None:
        for name in ("suppressed_ids", "languages", "language_pair", "labels"):  # lists, read from JSON
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "prompts", tuple((str(n), str(t)) for n, t in self.prompts))
        if isinstance(self.colbert, dict):  # read from JSON
            object.__setattr__(self, "colbert", ColbertSettings(**self.colbert))
        if isinstance(self.whisper, dict):
            object.__setattr__(self, "whisper", WhisperSettings(**self.whisper))
        if isinstance(self.pooled_dense, dict):
            object.__setattr__(self, "pooled_dense", PooledDense(**self.pooled_dense))
        if self.max_input_tokens is None:
            object.__setattr__(self, "max_input_tokens", self.max_positions)
        problems = []
        if self.task not in ("embedding", "seq2seq"):
            problems.append(f"task must be 'embedding' or 'seq2seq', not {self.task!r}")
        if self.d_model % self.n_heads and not self.d_kv:
            problems.append(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads} (and no d_kv)")
        if self.task == "seq2seq" and self.n_decoder_layers < 1:
            problems.append("a seq2seq model needs n_decoder_layers >= 1")
        if self.task == "seq2seq" and (self.d_model % self.n_heads == 0 or self.d_kv) and self.d_head % 8:
            # The decoder's cached self-attention runs as ONNX Runtime's GroupQueryAttention, which
            # takes head sizes in multiples of 8 (64 in every published checkpoint we know of).
            problems.append(
                f"a seq2seq model needs d_head (d_kv, or d_model / n_heads) a multiple of 8, not {self.d_head}"
            )
        if self.positions == "relative" and (self.relative_buckets < 4 or self.relative_max_distance < 2):
            problems.append("relative positions need at least 4 buckets and a max distance of at least 2")
        if self.task == "embedding" and bool(self.n_decoder_layers) != (self.classifier_input == "decoder_last_eos"):
            problems.append("an embedding model has no decoder layers, but a classifier reading the decoder has")
        if self.classifier_input not in ("first_token", "decoder_last_eos"):
            problems.append(
                f"classifier_input must be 'first_token' or 'decoder_last_eos', not {self.classifier_input!r}"
            )
        if self.classifier_input == "decoder_last_eos" and self.head != "classifier":
            problems.append("classifier_input 'decoder_last_eos' needs a classifier head")
        if self.num_beams < 1:
            problems.append(f"num_beams must be >= 1, not {self.num_beams}")
        if self.position_offset < 0:
            problems.append(f"position_offset must be >= 0, not {self.position_offset}")
        if self.target_language != "none" and not self.languages:
            problems.append(f"target_language {self.target_language!r} needs the languages it chooses from")
        if self.language_pair and len(self.language_pair) != 2:
            problems.append(f"language_pair must be (source, target), not {self.language_pair}")
        if self.head == "classifier" and (self.task != "embedding" or not self.labels):
            problems.append("a classifier head needs task 'embedding' (an encoder) and at least one label")
        if (self.sparse_head != "none" or self.multi_vector_dim) and (self.task != "embedding" or self.head != "none"):
            problems.append("sparse and multi-vector outputs need an embedding model without a classifier head")
        if self.colbert and (self.task != "embedding" or self.head != "none" or self.sparse_head != "none"):
            problems.append("a ColBERT model is an embedding model without other heads")
        if self.pooled_dense and (self.task != "embedding" or self.head != "none" or self.colbert):
            problems.append("Dense layers after the pooling need an embedding model with a pooled output")
        if self.colbert and self.multi_vector_dim:
            problems.append("a ColBERT model's vectors are its projection's; multi_vector_dim is bge-m3's")
        if self.splade_pooling not in ("max", "sum") or self.splade_activation not in ("relu", "log1p_relu"):
            problems.append(f"SPLADE pooling {self.splade_pooling!r} / activation {self.splade_activation!r} unknown")
        if self.pair_segments and self.type_vocab_size < 2:
            problems.append("pair_segments needs type_vocab_size >= 2")
        if self.default_prompt_name is not None and self.default_prompt_name not in dict(self.prompts):
            problems.append(f"default_prompt_name {self.default_prompt_name!r} is not one of the prompts")
        if self.encoder_input not in ("tokens", "log_mel"):
            problems.append(f"encoder_input must be 'tokens' or 'log_mel', not {self.encoder_input!r}")
        if self.encoder_input == "log_mel" and (
            self.task != "seq2seq" or self.n_mels < 1 or self.max_source_positions < 1
        ):
            problems.append("a log-mel encoder needs task 'seq2seq', n_mels and max_source_positions")
        if self.whisper is not None and self.encoder_input != "log_mel":
            problems.append("Whisper's settings need a log-mel encoder")
        if self.max_input_tokens > self.max_positions:
            problems.append(f"max_input_tokens {self.max_input_tokens} exceeds max_positions {self.max_positions}")
        if problems:
            raise ValueError("invalid ModelConfig: " + "; ".join(problems))

    @property
    def d_head(self) -> int:
        return self.d_kv or self.d_model // self.n_heads

    @property
    def embedding_dim(self) -> int:
        """An embedding model's pooled vector's width: its last Dense layer's, else d_model."""
        return self.pooled_dense.dims[-1] if self.pooled_dense else self.d_model

    @property
    def final_norm(self) -> bool:
        # Pre-norm leaves the residual stream un-normalised: one LayerNorm closes each stack.
        return self.norm_placement == "pre"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ModelConfig fields: {', '.join(unknown)}")
        return cls(**data)


def save_config(config: ModelConfig, model_dir: Path, name: str) -> None:
    document = {"format": CONFIG_FORMAT, "name": name, "model": config.to_dict()}
    (Path(model_dir) / CONFIG_FILE).write_text(json.dumps(document, indent=2) + "\n")


def load_config(model_dir: Path) -> tuple[str, ModelConfig]:
    """Returns (model name, config) from model_dir/config.json."""
    path = Path(model_dir) / CONFIG_FILE
    document = json.loads(path.read_text())
    if document.get("format") != CONFIG_FORMAT:
        raise ValueError(f"{path}: format is {document.get('format')!r}, expected {CONFIG_FORMAT!r}")
    return document["name"], ModelConfig.from_dict(document["model"])
