"""One 30-second window of a transcription, decoded as faster-whisper decodes it: its prompt (the previous
text after <|startofprev|>, then <|startoftranscript|>, the language and task on a multilingual model,
<|notimestamps|> when no timestamps are asked for), Whisper's logit rules, and the temperature fallback:
greedy or beam search first, then sampling at each higher temperature while the text repeats itself
(compression ratio over 2.4) or the model is unsure (average log-probability under -1), unless the
window is silence. Each attempt is one sequence of the model's scheduler: a row of its continuous batch
beside every other request's windows."""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from dataclasses import dataclass

import numpy as np

from modeldir.whisper_tokens import WhisperSettings

from ...engine.beam_search import BeamSettings
from ...engine.sampling import SamplingParams
from ...engine.sequence import EOS, Event, GenerationParams
from ..models.served_models import ServedSpeechModel
from .whisper_rules import WhisperRules

TASKS = ("transcribe", "translate")


@dataclass(frozen=True, kw_only=True)
class DecodeOptions:
    """What a request asks of its windows (faster-whisper's transcribe options, and its defaults)."""

    language: str | None = None  # None on a multilingual model: detected
    task: str = "transcribe"
    beam_size: int = 5
    patience: float = 1.0  # a beam search stops after round(beam_size x patience) finished hypotheses
    best_of: int = 5  # sampled candidates at a temperature above 0, the likeliest kept
    length_penalty: float = 1.0
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    condition_on_previous_text: bool = True
    prompt_reset_on_temperature: float = 0.5
    initial_prompt: str | None = None
    suppress_blank: bool = True
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    word_timestamps: bool = False


@dataclass(frozen=True)
class WindowResult:
    tokens: list[int]  # the model's own tokens, text and timestamps, without the end
    token_log_probs: tuple[float, ...]  # each one's, as it was chosen (Whisper's rules applied)
    avg_logprob: float  # their summed log-probability (the end's included) / (tokens + 1)
    no_speech_prob: float
    temperature: float
    compression_ratio: float


@dataclass(frozen=True)
class Prompt:
    tokens: list[int]  # the decoder's inputs before the model's own tokens
    sot_index: int  # where <|startoftranscript|> is among them


def prompt_for(
    settings: WhisperSettings,
    previous: list[int],
    language: str | None,
    task: str,
    without_timestamps: bool,
    max_length: int,
) -> Prompt:
    """faster-whisper's get_prompt: the previous text's last max_length // 2 - 1 tokens after
    <|startofprev|>, then the start of the transcript."""
    tokens = [settings.start_of_previous_id, *previous[-(max_length // 2 - 1) :]] if previous else []
    sot_index = len(tokens)
    tokens.append(settings.start_of_transcript_id)
    if settings.multilingual:
        tokens += [
            settings.language_id(language),
            settings.translate_id if task == "translate" else settings.transcribe_id,
        ]
    if without_timestamps:
        tokens.append(settings.no_timestamps_id)
    return Prompt(tokens, sot_index)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def text_of(model: ServedSpeechModel, tokens: list[int]) -> str:
    """The text of a window's tokens: the timestamps and special tokens left out."""
    return model.tokenizer.decode([t for t in tokens if t < model.whisper.end_of_text_id])


async def _last_event(model: ServedSpeechModel, features: np.ndarray, params: GenerationParams) -> Event:
    async for event in model.scheduler.generate([], params, features=features):
        last = event
    return last


async def _attempt(
    model: ServedSpeechModel, features: np.ndarray, prompt: Prompt, options: DecodeOptions, temperature: float
) -> WindowResult:
    """One decode of the window at one temperature: greedy or a beam search at 0, else best_of samples
    (as many rows at once), the likeliest kept."""
    settings = model.whisper
    max_length = model.architecture.max_positions
    # CTranslate2's: half the context, or what the prompt leaves of it (the end's step counted).
    common = dict(
        max_new_tokens=min(max_length // 2, max_length - (len(prompt.tokens) - 1)),
        stream=False,
        forced_tokens=tuple(prompt.tokens[1:]),
        start_token=prompt.tokens[0],
        scores=True,
    )

    def rules() -> WhisperRules:
        return WhisperRules(
            settings,
            sample_begin=len(prompt.tokens) - 1,
            sot_index=prompt.sot_index,
            timestamps=not options.without_timestamps,
            suppress_blank=options.suppress_blank,
            max_initial_timestamp_index=round(options.max_initial_timestamp / 0.02),
        )

    if temperature == 0:
        window_rules = rules()
        beams = None
        if options.beam_size > 1:
            beams = BeamSettings(
                num_beams=options.beam_size,
                length_penalty=options.length_penalty,
                search="ctranslate2",
                patience=options.patience,
            )
        params = GenerationParams(**common, beams=beams, rules=window_rules)
        candidates = [(await _last_event(model, features, params), window_rules)]
    else:
        sampling = SamplingParams(temperature=temperature)
        attempts = [rules() for _ in range(options.best_of)]
        events = await asyncio.gather(
            *(_last_event(model, features, GenerationParams(**common, sampling=sampling, rules=r)) for r in attempts)
        )
        candidates = list(zip(events, attempts))
    ranked = []
    for event, window_rules in candidates:
        tokens = list(event.token_ids)
        counted = len(tokens) + (event.finish_reason == EOS)
        total = (event.mean_log_prob or 0.0) * counted  # the log-probabilities' sum, the end's included
        text = text_of(model, tokens).strip()
        no_speech = window_rules.no_speech_prob or 0.0
        result = WindowResult(
            tokens, event.token_log_probs, total / (len(tokens) + 1), no_speech, temperature, compression_ratio(text)
        )
        # Samples are ranked as CTranslate2 ranks them: sum(log p) / tokens ** length_penalty.
        ranked.append((total / max(len(tokens), 1) ** options.length_penalty, result))
    return max(ranked, key=lambda pair: pair[0])[1]


async def decode_window(
    model: ServedSpeechModel, features: np.ndarray, prompt: Prompt, options: DecodeOptions
) -> WindowResult:
    """The window at each temperature in turn until one passes (faster-whisper's generate_with_fallback);
    where none does, the likeliest of those under the compression threshold (else of all)."""
    every, passable = [], []
    for temperature in options.temperatures:
        result = await _attempt(model, features, prompt, options, temperature)
        every.append(result)
        fallback = False
        if (
            options.compression_ratio_threshold is not None
            and result.compression_ratio > options.compression_ratio_threshold
        ):
            fallback = True
        else:
            passable.append(result)
        unsure = options.log_prob_threshold is not None and result.avg_logprob < options.log_prob_threshold
        fallback = fallback or unsure
        silent = options.no_speech_threshold is not None and result.no_speech_prob > options.no_speech_threshold
        if silent and unsure:
            fallback = False  # silence: nothing better to find
        if not fallback:
            return result
    best = max(passable or every, key=lambda r: r.avg_logprob)
    return dataclasses.replace(best, temperature=temperature)
