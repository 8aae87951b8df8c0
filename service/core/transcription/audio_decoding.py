"""Audio in any format OpenAI's audio API takes (flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav, webm) decoded by
the FFmpeg libraries inside PyAV's wheel, and resampled to 16 kHz mono as faster-whisper resamples it
(FFmpeg's swresample to 16-bit, read back as float), so that both hear the same samples. An upload that is
not audio, has none, or is over the server's limits is refused naming the field or the setting."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass

import av
import numpy as np

from ...errors import RequestTooLarge, invalid
from .log_mel import SAMPLE_RATE

GROUP_SAMPLES = 500_000  # frames are resampled in groups of this many samples, as faster-whisper groups them
S16_SCALE = 32768.0


@dataclass(frozen=True, kw_only=True)
class AudioLimits:
    max_upload_bytes: int  # max_upload_bytes (--max-upload-bytes)
    max_audio_seconds: float  # max_audio_seconds (--max-audio-seconds)


def decoded_frames(container: av.container.InputContainer) -> Iterator[av.AudioFrame]:
    """The first audio stream's frames; a frame FFmpeg cannot decode is skipped, as players skip it."""
    frames = container.decode(audio=0)
    while True:
        try:
            yield next(frames)
        except StopIteration:
            return
        except av.error.InvalidDataError:
            continue


def grouped(frames: Iterator[av.AudioFrame]) -> Iterator[av.AudioFrame]:
    """Frames joined into frames of GROUP_SAMPLES samples (the last shorter)."""
    fifo = av.AudioFifo()
    for frame in frames:
        frame.pts = None  # the fifo checks timestamps; a stream's own may jump
        fifo.write(frame)
        while fifo.samples >= GROUP_SAMPLES:
            yield fifo.read(GROUP_SAMPLES)
    if fifo.samples:
        yield fifo.read()


def decode_audio(data: bytes, limits: AudioLimits, field: str = "file") -> np.ndarray:
    """An upload's audio as float32 samples, 16 kHz mono."""
    if len(data) > limits.max_upload_bytes:
        raise RequestTooLarge(
            f"{field}: {len(data)} bytes; at most {limits.max_upload_bytes} (max_upload_bytes)", field
        )
    if not data:
        raise invalid(field, "empty: no audio in it")
    most = int(limits.max_audio_seconds * SAMPLE_RATE)
    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    pieces, count = [], 0
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise invalid(field, f"no audio stream (the {container.format.name} file has none)")
            for group in [*grouped(decoded_frames(container)), None]:  # None: what the resampler holds
                for frame in resampler.resample(group):
                    samples = frame.to_ndarray().reshape(-1)
                    count += len(samples)
                    if count > most:
                        raise RequestTooLarge(
                            f"{field}: more than {limits.max_audio_seconds:g} s of audio (max_audio_seconds)",
                            field,
                        )
                    pieces.append(samples)
    except (av.error.FFmpegError, ValueError, EOFError) as error:  # not a container or stream FFmpeg reads
        raise invalid(field, f"not audio that can be decoded ({type(error).__name__}: {error})") from None
    if not count:
        raise invalid(field, "no audio in it (0 samples)")
    return np.concatenate(pieces).astype(np.float32) / np.float32(S16_SCALE)
