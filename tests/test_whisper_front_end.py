"""Whisper's front-end (service/core/transcription/log_mel.py, numpy only) equals transformers' WhisperFeatureExtractor: its
numpy path within 1e-5 over lengths, amplitudes and both mel sizes, and its torch path (a float32 FFT, as
openai-whisper's) within that FFT's own error; the Slaney filters equal to the extractor's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from transformers import WhisperFeatureExtractor

from service.core.transcription.log_mel import (
    HOP,
    WINDOW_FRAMES,
    WINDOW_SAMPLES,
    hz_to_mel,
    log_mel,
    mel_filters,
    mel_to_hz,
    window_features,
)

EXTRACTORS = {n: WhisperFeatureExtractor(feature_size=n) for n in (80, 128)}


def padded_window(audio: np.ndarray) -> np.ndarray:
    """The extractor's own input: the audio cut or padded with zeros to 30 s."""
    window = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    window[: min(len(audio), WINDOW_SAMPLES)] = audio[:WINDOW_SAMPLES]
    return window


@pytest.mark.parametrize("n_mels", [80, 128])
def test_the_slaney_filters_are_the_extractors(n_mels):
    np.testing.assert_allclose(mel_filters(n_mels), EXTRACTORS[n_mels].mel_filters.T, rtol=0, atol=1e-12)
    assert mel_filters(n_mels).shape == (n_mels, 201)


def test_the_mel_scale_round_trips_and_is_linear_below_1_khz():
    hz = np.array([0.0, 100.0, 999.0, 1000.0, 4000.0, 8000.0])
    np.testing.assert_allclose(mel_to_hz(hz_to_mel(hz)), hz, rtol=1e-12, atol=1e-9)
    assert hz_to_mel(np.array([600.0, 1000.0])).tolist() == pytest.approx([9.0, 15.0], abs=1e-12)


@given(
    seconds=st.floats(0.03, 40.0),
    amplitude=st.floats(1e-4, 50.0),
    n_mels=st.sampled_from([80, 128]),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["noise", "tone", "clicks"]),
)
def test_one_window_equals_the_extractor(seconds, amplitude, n_mels, seed, kind):
    rng = np.random.default_rng(seed)
    n = int(seconds * 16_000)
    if kind == "noise":
        audio = rng.standard_normal(n) * amplitude
    elif kind == "tone":
        audio = amplitude * np.sin(2 * np.pi * rng.uniform(50, 7900) * np.arange(n) / 16_000)
    else:
        audio = np.zeros(n)
        audio[rng.integers(0, n, size=max(1, n // 4000))] = amplitude
    audio = audio.astype(np.float32)
    ours = window_features(audio, n_mels)
    assert ours.shape == (n_mels, WINDOW_FRAMES) and ours.dtype == np.float32
    extractor = EXTRACTORS[n_mels]
    by_numpy = extractor._np_extract_fbank_features(padded_window(audio)[None], "cpu")[0]
    np.testing.assert_allclose(ours, by_numpy, rtol=0, atol=1e-5)
    by_torch = extractor._torch_extract_fbank_features(padded_window(audio)[None], "cpu")[0]
    # torch.stft rounds in float32: a quiet bin's power, far below its frame's loudest, carries that
    # bin's rounding error relative to it (up to ~1e-3 of a quiet bin's log10, as hypothesis found).
    np.testing.assert_allclose(ours, by_torch, rtol=0, atol=5e-4)


def test_a_whole_file_is_one_clamp_over_all_its_frames():
    """log_mel of a long file (as openai-whisper and faster-whisper take it, the clamp over the whole file):
    a quiet 30 s beside a loud one is clamped by the loud one's maximum, not its own."""
    rng = np.random.default_rng(0)
    loud, quiet = rng.standard_normal(WINDOW_SAMPLES), rng.standard_normal(WINDOW_SAMPLES) * 1e-5
    whole = log_mel(np.concatenate([loud, quiet]), 80)
    assert whole.shape == (80, 2 * WINDOW_SAMPLES // HOP)
    floor = whole.max() - 2.0  # (max - 8 + 4) / 4 against (max + 4) / 4
    clamped = whole[:, WINDOW_FRAMES + 10 :]
    assert clamped.min() == pytest.approx(floor, abs=1e-6) and clamped.max() == pytest.approx(floor, abs=1e-6)
    alone = log_mel(quiet, 80)  # clamped at its own maximum: its frames keep their differences
    assert alone.max() < floor - 0.25 and alone.std() > 0.01


@pytest.mark.parametrize("bad", [np.zeros(10), np.zeros((2, 16_000))])
def test_too_little_or_not_mono_audio_is_refused(bad):
    with pytest.raises(ValueError, match="audio"):
        log_mel(bad, 80)
