"""A whole recording transcribed window after window by timestamp seeking, as faster-whisper's
generate_segments does it: the log-mel frames of the whole recording (the clamp taken over all of them),
a 30-second window from the seek point (padded with zeros), decoded with the text so far as its prompt;
the window's timestamp pairs cut it into segments, and the next window starts at its last complete
segment's end (or after the window, where the last timestamp closes the speech). A window the model
deems silent is skipped; a window decoded at a high temperature starts the prompt afresh. With word
timestamps, each window's words are timed (word_timing.py) and the next window starts at its last word's
end, as openai-whisper and faster-whisper seek."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from ..models.served_models import ServedSpeechModel
from .log_mel import HOP, N_FFT, SAMPLE_RATE, WINDOW_FRAMES, log_mel
from .window_decoding import DecodeOptions, WindowResult, decode_window, prompt_for, text_of
from .word_timing import TimedSegment, find_alignment, place_words, split_to_word_tokens

FRAME_SECONDS = HOP / SAMPLE_RATE  # 0.01 s a log-mel frame
TIME_PRECISION = 0.02  # seconds a timestamp token
FRAMES_PER_TIMESTAMP = 2  # the convolution stem's stride
FRAMES_PER_SECOND = SAMPLE_RATE // HOP


@dataclass(frozen=True)
class Word:
    word: str  # as the model spells it, its leading space kept
    start: float  # seconds in the recording, to 0.01
    end: float
    probability: float  # the mean of its tokens'


@dataclass(frozen=True)
class Segment:
    id: int
    seek: int  # the frame its window started at
    start: float  # seconds
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: tuple[Word, ...] = ()  # with word timestamps
    token_log_probs: tuple[float, ...] = ()  # each of tokens', as it was chosen


def recording_features(audio: np.ndarray, n_mels: int) -> np.ndarray:
    """(n_mels, frames) of the whole recording, as faster-whisper computes them: 160 samples of silence
    appended, one frame per 10 ms, the clamp at the loudest frame's maximum - 8 taken over the recording."""
    samples = np.asarray(audio, np.float32)
    # A recording shorter than one FFT's reflection (a few milliseconds) gets more silence: no frame to hear.
    return log_mel(np.pad(samples, (0, max(HOP, N_FFT // 2 + 1 - len(samples)))), n_mels)


def window_at(features: np.ndarray, seek: int, size: int) -> np.ndarray:
    """The window's frames from `seek`, padded with zeros to 3,000 frames (faster-whisper's pad_or_trim)."""
    window = np.zeros((features.shape[0], WINDOW_FRAMES), np.float32)
    window[:, :size] = features[:, seek : seek + size]
    return window


def single_timestamp_ending(tokens: list[int], begin: int) -> bool:
    """Whether the window's tokens end with text and one timestamp: the speech ended in the window."""
    return len(tokens) >= 2 and tokens[-2] < begin <= tokens[-1]


def split_by_timestamps(tokens: list[int], begin: int, time_offset: float, size: int, seek: int):
    """The window's segments (start, end, tokens) cut at each pair of timestamps, and the next seek point."""
    single_ending = single_timestamp_ending(tokens, begin)
    pairs = [i for i in range(1, len(tokens)) if tokens[i] >= begin and tokens[i - 1] >= begin]
    if not pairs:
        stamps = [t for t in tokens if t >= begin]
        duration = size * FRAME_SECONDS
        if stamps and stamps[-1] != begin:
            duration = (stamps[-1] - begin) * TIME_PRECISION
        return [(time_offset, time_offset + duration, tokens)], seek + size
    cuts = pairs + ([len(tokens)] if single_ending else [])
    segments, last = [], 0
    for cut in cuts:
        piece = tokens[last:cut]
        start = time_offset + (piece[0] - begin) * TIME_PRECISION
        segments.append((start, time_offset + (piece[-1] - begin) * TIME_PRECISION, piece))
        last = cut
    if single_ending:  # the speech ended in this window: the next starts after it
        return segments, seek + size
    return segments, seek + (tokens[last - 1] - begin) * FRAMES_PER_TIMESTAMP


async def transcribe_features(
    model: ServedSpeechModel, features: np.ndarray, options: DecodeOptions, language: str | None
) -> AsyncIterator[Segment]:
    """The recording's segments as each window is decoded (language: the one spoken, on a multilingual
    model; None on an English-only one)."""
    settings = model.whisper
    begin = settings.timestamp_begin_id
    content_frames = features.shape[-1] - 1
    seek, count, all_tokens, reset_since, last_speech = 0, 0, [], 0, 0.0
    max_length = model.architecture.max_positions
    if options.initial_prompt is not None:  # only its last tokens are ever read
        all_tokens += model.tokenizer.text_ids(" " + options.initial_prompt.strip(), keep=max_length // 2 - 1)
    while seek < content_frames:
        time_offset = seek * FRAME_SECONDS
        size = min(WINDOW_FRAMES, content_frames - seek)
        prompt = prompt_for(
            settings, all_tokens[reset_since:], language, options.task, options.without_timestamps, max_length
        )
        window = window_at(features, seek, size)
        result = await decode_window(model, window, prompt, options)
        if silent(result, options):
            seek += size  # on to the next window
            continue
        window_seek = seek
        pieces, seek = split_by_timestamps(result.tokens, begin, time_offset, size, seek)
        timed = [TimedSegment(start, end, tokens) for start, end, tokens in pieces]
        if options.word_timestamps:
            spoken = dict(language=language or "en", task=options.task)
            await time_words(model, window, size, timed, time_offset=time_offset, last_speech=last_speech, **spoken)
            last_word_end = end_of_speech(timed)
            if not single_timestamp_ending(result.tokens, begin) and last_word_end > time_offset:
                seek = round(last_word_end * FRAMES_PER_SECOND)
            last_speech = last_word_end
        for segment in window_segments(model, result, timed, window_seek, count):
            all_tokens += segment.tokens
            count = segment.id
            yield segment
        if not options.condition_on_previous_text or result.temperature > options.prompt_reset_on_temperature:
            reset_since = len(all_tokens)


def silent(result: WindowResult, options: DecodeOptions) -> bool:
    """Whether the model deems the window silence: likely no speech, and unsure of its text."""
    if options.no_speech_threshold is None or result.no_speech_prob <= options.no_speech_threshold:
        return False
    return options.log_prob_threshold is None or result.avg_logprob <= options.log_prob_threshold


def window_segments(
    model: ServedSpeechModel, result: WindowResult, timed: list[TimedSegment], seek: int, before: int
) -> list[Segment]:
    """A window's pieces that hold text, as segments numbered on from `before`."""
    segments, offset = [], 0
    for piece in timed:
        # The pieces are the window's tokens from the first on, one after another: their log-probabilities too.
        log_probs = result.token_log_probs[offset : offset + len(piece.tokens)]
        offset += len(piece.tokens)
        text = text_of(model, piece.tokens)
        if piece.start == piece.end or not text.strip():
            continue
        segments.append(
            Segment(
                before + len(segments) + 1,
                seek,
                piece.start,
                piece.end,
                text,
                piece.tokens,
                result.temperature,
                result.avg_logprob,
                result.compression_ratio,
                result.no_speech_prob,
                tuple(Word(w["word"], w["start"], w["end"], w["probability"]) for w in piece.words),
                log_probs,
            )
        )
    return segments


def end_of_speech(segments: list[TimedSegment]) -> float:
    """The end of the window's last word, else of its last segment (openai-whisper's get_end)."""
    ends = [w["end"] for s in segments for w in s.words]
    return ends[-1] if ends else segments[-1].end


async def time_words(
    model: ServedSpeechModel,
    window: np.ndarray,
    frames: int,
    segments: list[TimedSegment],
    *,
    time_offset: float,
    last_speech: float,
    language: str,
    task: str,
) -> None:
    """The window's words timed and given to its segments (timing.add_word_timestamps): its text tokens read
    again after the start of the transcript and <|notimestamps|>, through the word-alignment graph."""
    settings = model.whisper
    end_of_text = settings.end_of_text_id
    sot_sequence = [settings.start_of_transcript_id]
    if settings.multilingual:
        task_id = settings.translate_id if task == "translate" else settings.transcribe_id
        sot_sequence += [settings.language_id(language), task_id]
    text_tokens = [t for s in segments for t in s.tokens if t < end_of_text]
    alignment = []
    if text_tokens:
        tokens = [*sot_sequence, settings.no_timestamps_id, *text_tokens, end_of_text]
        weights, probabilities = await asyncio.shield(
            model.word_alignment.submit(window, tokens, positions=len(tokens))
        )
        words, word_tokens = split_to_word_tokens(
            lambda ids: model.tokenizer.decode(ids, skip_special_tokens=False),
            text_tokens + [end_of_text],
            end_of_text,
            language,
        )
        alignment = find_alignment(weights, probabilities, words, word_tokens, len(sot_sequence), frames)
    place_words(segments, alignment, end_of_text, time_offset, last_speech)
