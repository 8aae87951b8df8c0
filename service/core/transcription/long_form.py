"""A whole recording transcribed window after window by timestamp seeking, as faster-whisper's
generate_segments does it: the log-mel frames of the whole recording (the clamp taken over all of them),
a 30-second window from the seek point (padded with zeros), decoded with the text so far as its prompt;
the window's timestamp pairs cut it into segments, and the next window starts at its last complete
segment's end (or after the window, where the last timestamp closes the speech). A window the model
deems silent is skipped; a window decoded at a high temperature starts the prompt afresh."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from ..models.served_models import ServedSpeechModel
from .log_mel import HOP, N_FFT, SAMPLE_RATE, WINDOW_FRAMES, log_mel
from .window_decoding import DecodeOptions, decode_window, prompt_for, text_of

FRAME_SECONDS = HOP / SAMPLE_RATE  # 0.01 s a log-mel frame
TIME_PRECISION = 0.02  # seconds a timestamp token
FRAMES_PER_TIMESTAMP = 2  # the convolution stem's stride


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


def split_by_timestamps(tokens: list[int], begin: int, time_offset: float, size: int, seek: int):
    """The window's segments (start, end, tokens) cut at each pair of timestamps, and the next seek point."""
    single_ending = len(tokens) >= 2 and tokens[-2] < begin <= tokens[-1]
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
    seek, count, all_tokens, reset_since = 0, 0, [], 0
    max_length = model.architecture.max_positions
    if options.initial_prompt is not None:  # only its last tokens are ever read
        all_tokens += model.tokenizer.text_ids(" " + options.initial_prompt.strip(), keep=max_length // 2 - 1)
    while seek < content_frames:
        time_offset = seek * FRAME_SECONDS
        size = min(WINDOW_FRAMES, content_frames - seek)
        prompt = prompt_for(
            settings, all_tokens[reset_since:], language, options.task, options.without_timestamps, max_length
        )
        result = await decode_window(model, window_at(features, seek, size), prompt, options)
        if options.no_speech_threshold is not None and result.no_speech_prob > options.no_speech_threshold:
            if options.log_prob_threshold is None or result.avg_logprob <= options.log_prob_threshold:
                seek += size  # silence: on to the next window
                continue
        window_seek = seek
        pieces, seek = split_by_timestamps(result.tokens, begin, time_offset, size, seek)
        for start, end, tokens in pieces:
            text = text_of(model, tokens)
            if start == end or not text.strip():
                continue
            all_tokens += tokens
            count += 1
            yield Segment(
                count,
                window_seek,
                start,
                end,
                text,
                tokens,
                result.temperature,
                result.avg_logprob,
                result.compression_ratio,
                result.no_speech_prob,
            )
        if not options.condition_on_previous_text or result.temperature > options.prompt_reset_on_temperature:
            reset_since = len(all_tokens)
