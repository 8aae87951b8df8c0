"""Audio files of known content in each format OpenAI's audio API takes, written by PyAV's own encoders: for
tests of decoding and resampling (a tone, a sweep, or given samples, at any rate and channel count)."""

from __future__ import annotations

import io

import av
import numpy as np

# OpenAI's formats -> (container, audio codec) as FFmpeg writes them.
FORMATS = {
    "wav": ("wav", "pcm_s16le"),
    "flac": ("flac", "flac"),
    "mp3": ("mp3", "libmp3lame"),
    "mpga": ("mp3", "libmp3lame"),
    "mpeg": ("mpeg", "mp2"),
    "mp4": ("mp4", "aac"),
    "m4a": ("ipod", "aac"),
    "ogg": ("ogg", "libopus"),
    "webm": ("webm", "libopus"),
}
RATES = {"libopus": 48_000}  # Opus encodes at 48 kHz only


def codec_rate(kind: str, rate: int) -> int:
    """The rate a file of `kind` can be written at: `rate`, or its codec's own."""
    return RATES.get(FORMATS[kind][1], rate)


def tone(seconds: float, rate: int, frequency: float = 440.0, channels: int = 1) -> np.ndarray:
    """(channels, samples) float32: a sine, the same on every channel, at half scale."""
    t = np.arange(int(seconds * rate)) / rate
    return np.repeat((0.5 * np.sin(2 * np.pi * frequency * t))[None], channels, axis=0).astype(np.float32)


def encoded(samples: np.ndarray, rate: int, kind: str) -> bytes:
    """(channels, samples) float32 at `rate` (codec_rate's) -> the bytes of a file of `kind` (a key of FORMATS)."""
    container_format, codec = FORMATS[kind]
    if rate != codec_rate(kind, rate):
        raise ValueError(f"{kind}: {codec} encodes at {codec_rate(kind, rate)} Hz, not {rate}")
    out = io.BytesIO()
    layout = "mono" if samples.shape[0] == 1 else "stereo"
    with av.open(out, mode="w", format=container_format) as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="fltp", layout=layout)
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()
