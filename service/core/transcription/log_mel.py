"""Whisper's front-end in numpy: 16 kHz mono audio -> log-mel frames (n_fft 400, hop 160, a periodic Hann
window, the Slaney mel scale and norm up to 8 kHz, log10 floored at 1e-10, clamped at the loudest frame's
maximum - 8, then (x + 4) / 4), as transformers' WhisperFeatureExtractor and openai-whisper compute them."""

from __future__ import annotations

import functools

import numpy as np

SAMPLE_RATE = 16_000
N_FFT = 400
HOP = 160
WINDOW_SECONDS = 30
WINDOW_SAMPLES = WINDOW_SECONDS * SAMPLE_RATE  # 480,000: what one encoder pass hears
WINDOW_FRAMES = WINDOW_SAMPLES // HOP  # 3,000
MAX_FREQUENCY = 8_000.0
BLOCK_FRAMES = WINDOW_FRAMES  # frames windowed and transformed at once

# The Slaney mel scale: linear below 1 kHz (200/3 Hz a mel), logarithmic above (27 mels an octave of 6.4).
LINEAR_HZ_PER_MEL = 200.0 / 3.0
LOG_FROM_HZ = 1_000.0
LOG_FROM_MEL = LOG_FROM_HZ / LINEAR_HZ_PER_MEL
LOG_STEP = np.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    logarithmic = LOG_FROM_MEL + np.log(np.maximum(hz, LOG_FROM_HZ) / LOG_FROM_HZ) / LOG_STEP
    return np.where(hz >= LOG_FROM_HZ, logarithmic, hz / LINEAR_HZ_PER_MEL)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    logarithmic = LOG_FROM_HZ * np.exp(LOG_STEP * (np.maximum(mel, LOG_FROM_MEL) - LOG_FROM_MEL))
    return np.where(mel >= LOG_FROM_MEL, logarithmic, mel * LINEAR_HZ_PER_MEL)


@functools.cache
def mel_filters(n_mels: int) -> np.ndarray:
    """(n_mels, 201) triangles over the FFT's bins, each scaled to unit area (Slaney's norm), float64."""
    bins = np.linspace(0.0, SAMPLE_RATE / 2, 1 + N_FFT // 2)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(MAX_FREQUENCY), n_mels + 2))
    widths = np.diff(edges)
    rising = (bins[None, :] - edges[:-2, None]) / widths[:-1, None]
    falling = (edges[2:, None] - bins[None, :]) / widths[1:, None]
    triangles = np.maximum(0.0, np.minimum(rising, falling))
    filters = triangles * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    filters.flags.writeable = False  # shared by every call
    return filters


@functools.cache
def hann_window() -> np.ndarray:
    window = np.hanning(N_FFT + 1)[:-1]  # periodic, as torch.hann_window and transformers' "hann"
    window.flags.writeable = False
    return window


def log_mel(audio: np.ndarray, n_mels: int) -> np.ndarray:
    """(n_mels, len(audio) // 160) float32 log-mel frames of `audio` (float, 16 kHz mono). Frames are centred
    on their hop (the audio reflected at both ends); the clamp is taken over all of them."""
    samples = np.asarray(audio, dtype=np.float64)
    if samples.ndim != 1 or len(samples) < N_FFT // 2 + 1:
        raise ValueError(f"audio: {samples.shape} samples; 1-D and at least {N_FFT // 2 + 1}")
    padded = np.pad(samples, N_FFT // 2, mode="reflect")
    count = len(samples) // HOP  # the last centred frame is dropped, as Whisper's front-ends drop it
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:count]
    mel = np.empty((n_mels, count), np.float64)
    # A block of frames at a time: an hour's frames windowed at once would take a gigabyte.
    for start in range(0, count, BLOCK_FRAMES):
        block = frames[start : start + BLOCK_FRAMES]
        # The spectrum is kept in complex64, as openai-whisper's torch.stft and transformers' extractor keep
        # it: a quiet frame's log moves by 3e-5 with a float64 one.
        spectrum = np.fft.rfft(block * hann_window(), axis=1).astype(np.complex64)
        power = np.abs(spectrum, dtype=np.float64) ** 2
        mel[:, start : start + len(block)] = np.log10(np.maximum(mel_filters(n_mels) @ power.T, 1e-10))
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)


def window_features(audio: np.ndarray, n_mels: int) -> np.ndarray:
    """One encoder window, as transformers' WhisperFeatureExtractor makes it: the audio cut or padded with
    silence to 30 s, then (n_mels, 3000) frames clamped over the window."""
    window = np.zeros(WINDOW_SAMPLES, dtype=np.float64)
    cut = np.asarray(audio, dtype=np.float64)[:WINDOW_SAMPLES]
    window[: len(cut)] = cut
    return log_mel(window, n_mels)
