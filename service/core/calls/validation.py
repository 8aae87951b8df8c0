"""Request validation as pure functions of a request's values and the limits they must keep: every front
door refuses the same things with the same field names and limits (InvalidArgument names both)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ...engine.beam_search import BeamSettings
from ...engine.sampling import SamplingParams
from ...engine.sequence import GenerationParams
from ...errors import invalid
from ..models.served_models import ServedSeq2SeqModel

MAX_LENGTH_PENALTY = 10.0
MAX_STOP_SEQUENCES = 8
MIN_REPETITION_PENALTY = 0.001  # and its inverse the most: a logit over 1e-40 overflows float32
MAX_STOP_LENGTH = 64
MAX_SEED = 2**64 - 1  # a seed is an unsigned 64-bit integer (gRPC's uint64)
EARLY_STOPPING_VALUES = ("false", "true", "never")  # transformers': heuristic, on, never


def check_text(field: str, text: str) -> None:
    if not text:
        raise invalid(field, "empty text")
    if "\x00" in text:
        raise invalid(field, "contains a NUL character")
    try:
        text.encode()
    except UnicodeEncodeError as error:  # JSON's "\ud800": a lone surrogate, which no tokenizer takes
        raise invalid(field, f"not valid Unicode: a lone surrogate at character {error.start}") from None


def check_texts(texts: list[str], limit: int) -> list[str]:
    """1 to `limit` texts (max_client_batch_size), none empty."""
    if not texts:
        raise invalid("inputs", f"empty; send 1 to {limit} texts")
    if len(texts) > limit:
        raise invalid("inputs", f"{len(texts)} texts; at most {limit} per call (max_client_batch_size)")
    for i, text in enumerate(texts):
        check_text(f"inputs[{i}]", text)
    return texts


def check_inputs(
    inputs: list[str | list[int]], limit: int, vocab_size: int, field: str = "inputs"
) -> list[str | list[int]]:
    """1 to `limit` inputs, each a text (not empty) or a model's token ids (1 or more, each an id of its
    vocabulary: the ids go in as given, special tokens included where the caller put them)."""
    if not inputs:
        raise invalid(field, f"empty; send 1 to {limit} texts")
    if len(inputs) > limit:
        raise invalid(field, f"{len(inputs)} texts; at most {limit} per call (max_client_batch_size)")
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            check_text(f"{field}[{i}]", item)
            continue
        if not item:
            raise invalid(f"{field}[{i}]", "no token ids")
        at = next((k for k, t in enumerate(item) if type(t) is not int or not 0 <= t < vocab_size), None)
        if at is not None:
            raise invalid(f"{field}[{i}][{at}]", f"token id {item[at]!r}; the model's ids are 0 to {vocab_size - 1}")
    return inputs


def check_dimensions(dimensions: int | None, model_dimensions: int, model_name: str) -> int:
    """How many leading values of each vector to keep: None (unset) is all of them."""
    if dimensions is None:
        return model_dimensions
    if not 1 <= dimensions <= model_dimensions:
        raise invalid("dimensions", f"{dimensions}; 1 to {model_dimensions} for model {model_name!r}")
    return dimensions


@dataclass(frozen=True, kw_only=True)
class GenerationOptions:
    """A request's generation options as the caller set them: 0, None and empty mean unset."""

    max_new_tokens: int = 0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 0.0
    repetition_penalty: float = 0.0
    min_p: float = 0.0
    presence_penalty: float = 0.0  # OpenAI's, -2 to 2
    frequency_penalty: float = 0.0  # OpenAI's, -2 to 2
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    num_beams: int = 0
    length_penalty: float | None = None
    early_stopping: str | None = None  # one of EARLY_STOPPING_VALUES, else refused
    num_return_sequences: int = 0
    answers: int | None = None  # answers per input (OpenAI's n): more than 1 are the best beams of as many
    source_language: str | None = None  # multilingual models (core/translation/languages.py)
    target_language: str | None = None
    scores: bool = False  # each answer's mean log-probability per token (translation confidence)


def with_answers(p: GenerationOptions) -> GenerationOptions:
    """`answers` checked, and more than one turned into a beam search returning that many."""
    if p.answers is None or p.answers == 1:
        return p
    if p.answers < 1:
        raise invalid("params.answers", f"{p.answers}; at least 1")
    if p.temperature:
        raise invalid(
            "params.answers", "more than 1 returns the n best beams, which does not sample: set temperature to 0"
        )
    return dataclasses.replace(
        p, num_beams=p.num_beams or p.answers, num_return_sequences=p.num_return_sequences or p.answers
    )


def check_counts(p: GenerationOptions) -> None:
    """Counts that a wire format may carry as negative numbers; 0 leaves each unset."""
    for name in ("max_new_tokens", "top_k", "num_beams", "num_return_sequences"):
        if getattr(p, name) < 0:
            raise invalid(f"params.{name}", f"{getattr(p, name)}; at least 0 (0: unset)")


def generation_params(
    model: ServedSeq2SeqModel,
    p: GenerationOptions,
    streaming: bool,
    max_beams: int,
    first_token: int | None = None,
    start_token: int | None = None,
) -> GenerationParams:
    """The options checked against the model's limits, unset ones filled from its defaults. first_token:
    the forced first token (a target language's code; else the checkpoint's own forced first token, BART's
    bos), which takes a cache position of its own; start_token: the decoder's first input where it is not
    the model's start token (mBART-25's target code)."""
    p = with_answers(p)
    check_counts(p)
    code = first_token is not None
    if first_token is None:
        first_token = model.defaults.forced_bos_id
    forced = first_token is not None
    first_token_role = "the target language's code" if code else "the checkpoint's forced first token"
    limit = model.limits.max_new_tokens - forced
    max_new_tokens = p.max_new_tokens or limit
    if max_new_tokens > limit:
        raise invalid(
            "params.max_new_tokens",
            f"{max_new_tokens}; at most {limit} for model {model.name!r} "
            f"(its cache rows hold {limit + 1 + forced} decoder positions"
            + (f", one of them {first_token_role})" if forced else ")"),
        )
    if not math.isfinite(p.temperature) or p.temperature < 0:
        raise invalid("params.temperature", f"{p.temperature:.7g}; must be finite and >= 0 (0: greedy)")
    top_p = p.top_p or 1.0
    if not math.isfinite(top_p) or not 0 < top_p <= 1:
        raise invalid("params.top_p", f"{p.top_p:.7g}; must be in (0, 1]")
    penalty = p.repetition_penalty or 1.0
    # Bounded, not only > 0: a logit divided by 1e-40 overflows float32, and the draw would mean nothing.
    if not math.isfinite(penalty) or not MIN_REPETITION_PENALTY <= penalty <= 1 / MIN_REPETITION_PENALTY:
        raise invalid(
            "params.repetition_penalty",
            f"{p.repetition_penalty:.7g}; must be in [{MIN_REPETITION_PENALTY:g}, {1 / MIN_REPETITION_PENALTY:g}] "
            "(1: none)",
        )
    if not math.isfinite(p.min_p) or not 0 <= p.min_p < 1:
        raise invalid("params.min_p", f"{p.min_p:.7g}; must be in [0, 1) (0: unset)")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(p, name)
        if not math.isfinite(value) or not -2 <= value <= 2:
            raise invalid(f"params.{name}", f"{value:.7g}; must be in [-2, 2] (0: none)")
    if len(p.stop) > MAX_STOP_SEQUENCES:
        raise invalid("params.stop", f"{len(p.stop)} sequences; at most {MAX_STOP_SEQUENCES}")
    for i, stop in enumerate(p.stop):
        if not 1 <= len(stop) <= MAX_STOP_LENGTH:
            raise invalid(f"params.stop[{i}]", f"{len(stop)} characters; 1 to {MAX_STOP_LENGTH}")
    if p.seed is not None and not 0 <= p.seed <= MAX_SEED:
        raise invalid("params.seed", f"{p.seed}; 0 to {MAX_SEED}")
    if p.temperature == 0:
        # Greedy decoding has nothing to sample from: sampling options would silently do nothing.
        for name, set_ in (("top_k", p.top_k), ("top_p", p.top_p), ("min_p", p.min_p), ("seed", p.seed is not None)):
            if set_:
                raise invalid(f"params.{name}", "only with sampling (temperature > 0); temperature 0 is greedy")
    return GenerationParams(
        max_new_tokens=max_new_tokens,
        sampling=SamplingParams(
            temperature=p.temperature,
            top_k=p.top_k,
            top_p=top_p,
            min_p=p.min_p,
            repetition_penalty=penalty,
            presence_penalty=p.presence_penalty,
            frequency_penalty=p.frequency_penalty,
        ),
        seed=p.seed,
        stop=tuple(p.stop),
        ignore_eos=p.ignore_eos,
        beams=beam_settings(model, p, streaming, max_beams),
        stream=streaming,
        forced_tokens=() if first_token is None else (first_token,),
        start_token=start_token,
        rules=model.defaults.rules,
        scores=p.scores,
    )


def beam_settings(
    model: ServedSeq2SeqModel, p: GenerationOptions, streaming: bool, max_beams: int
) -> BeamSettings | None:
    """Beam search settings, or None for greedy/sampling. An unset num_beams is the model's default,
    unless the request asks for what beam search cannot do (stream, sample, stop sequences, ...)."""
    greedy_only = [
        name
        for name, set_ in (
            ("stream", streaming),
            ("temperature", p.temperature),
            ("repetition_penalty", p.repetition_penalty),
            ("presence_penalty", p.presence_penalty),
            ("frequency_penalty", p.frequency_penalty),
            ("stop", p.stop),
            ("ignore_eos", p.ignore_eos),
        )
        if set_
    ]
    beam_only = [
        name
        for name, set_ in (
            ("length_penalty", p.length_penalty is not None),
            ("early_stopping", p.early_stopping),
            ("num_return_sequences", p.num_return_sequences > 1),
        )
        if set_
    ]
    defaults = model.defaults
    num_beams = p.num_beams or (1 if greedy_only else defaults.num_beams)
    if num_beams == 1:
        if beam_only:
            raise invalid(f"params.{beam_only[0]}", "only with beam search (num_beams > 1)")
        return None
    rows = model.limits.cache_rows
    limit = min(max_beams, rows)
    if num_beams > limit:
        raise invalid(
            "params.num_beams",
            f"{num_beams}; at most {limit} (max_beams {max_beams}, cache rows of model {model.name!r} {rows})",
        )
    if greedy_only == ["stream"]:
        raise invalid(
            "params.num_beams", "beam search does not stream (the best beam is known at the end); use Generate"
        )
    if greedy_only:
        name = next(n for n in greedy_only if n != "stream")
        raise invalid(f"params.{name}", f"not with beam search (num_beams {num_beams})")
    length_penalty = defaults.length_penalty if p.length_penalty is None else p.length_penalty
    if not abs(length_penalty) <= MAX_LENGTH_PENALTY:  # also NaN; length ** penalty stays a float32
        raise invalid("params.length_penalty", f"{length_penalty:.7g}; must be within +-{MAX_LENGTH_PENALTY}")
    if p.early_stopping is not None and p.early_stopping not in EARLY_STOPPING_VALUES:
        raise invalid("params.early_stopping", f"{p.early_stopping} is not an EarlyStopping value")
    early = p.early_stopping or defaults.early_stopping
    returned = p.num_return_sequences or 1
    if returned > num_beams:
        raise invalid("params.num_return_sequences", f"{returned}; at most num_beams ({num_beams})")
    return BeamSettings(
        num_beams=num_beams, length_penalty=length_penalty, early_stopping=early, num_return_sequences=returned
    )
