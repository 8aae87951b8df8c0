"""Uploads decoded to 16 kHz mono (service/core/transcription/audio_decoding.py): every format OpenAI's audio API takes, sample
for sample as faster-whisper decodes it; and whatever is sent that is not audio, has none, or is over the
server's limits, refused naming the field or the setting, never anything else."""

from __future__ import annotations

import io
import wave

import av
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core.transcription.audio_decoding import AudioLimits, decode_audio
from service.errors import InvalidArgument, RequestTooLarge
from testing.audio_files import FORMATS, codec_rate, encoded, tone
from testing.whisper_reference import decoded_by_faster_whisper

LIMITS = AudioLimits(max_upload_bytes=2_000_000, max_audio_seconds=20)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    """2.5 s of a 440 Hz tone in stereo, in every format, at 44.1 kHz where the codec takes it."""
    return {
        kind: encoded(tone(2.5, codec_rate(kind, 44_100), channels=2), codec_rate(kind, 44_100), kind)
        for kind in FORMATS
    }


def test_every_format_is_decoded_as_faster_whisper_decodes_it(files, tmp_path):
    paths = []
    for kind, data in files.items():
        paths.append(tmp_path / f"tone.{kind}")
        paths[-1].write_bytes(data)
    theirs = decoded_by_faster_whisper(paths)
    for (kind, data), reference in zip(files.items(), theirs):
        ours = decode_audio(data, LIMITS)
        assert ours.dtype == np.float32 and ours.ndim == 1
        np.testing.assert_array_equal(ours, reference, err_msg=kind)
        assert abs(len(ours) - 2.5 * 16_000) < 0.05 * 16_000, kind  # codecs pad a little
        middle = ours[8_000:32_000]
        assert 0.45 < np.abs(middle).max() < 0.55, kind  # the half-scale tone, through lossy codecs too


def test_the_tone_keeps_its_pitch(files):
    audio = decode_audio(files["flac"], LIMITS)
    spectrum = np.abs(np.fft.rfft(audio[: 2 * 16_000]))
    assert np.argmax(spectrum) / 2.0 == pytest.approx(440.0, abs=1.0)  # 2 s: 0.5 Hz a bin


def silent_wav() -> bytes:
    """A well-formed wave file of no samples."""
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1), file.setsampwidth(2), file.setframerate(16_000)
    return out.getvalue()


def picture_only() -> bytes:
    """An mp4 of one black video frame and no sound."""
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=1)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), dtype=np.uint8), format="rgb24")
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


def test_what_is_not_audio_is_refused_by_name(files):
    for data, words in [
        (b"", "empty"),
        (b"RIFF not really a wave file", "not audio that can be decoded"),
        (silent_wav(), "no audio in it"),
        (picture_only(), "no audio stream"),
    ]:
        with pytest.raises(InvalidArgument, match=f"^file: .*{words}"):
            decode_audio(data, LIMITS)


def test_uploads_over_the_limits_are_refused_naming_the_setting(files):
    with pytest.raises(RequestTooLarge, match=r"\(max_upload_bytes\)"):
        decode_audio(files["wav"], AudioLimits(max_upload_bytes=1000, max_audio_seconds=20))
    with pytest.raises(RequestTooLarge, match=r"more than 1 s of audio \(max_audio_seconds\)"):
        decode_audio(files["mp3"], AudioLimits(max_upload_bytes=2_000_000, max_audio_seconds=1))


@given(st.data())
def test_damaged_files_are_decoded_or_refused_never_anything_else(files, data):
    kind = data.draw(st.sampled_from(sorted(files)))
    damaged = bytearray(files[kind])
    for _ in range(data.draw(st.integers(1, 20))):
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(damaged)))
    try:
        audio = decode_audio(bytes(damaged[:cut]), LIMITS)
    except InvalidArgument as refusal:
        assert refusal.field == "file"
    else:
        assert audio.dtype == np.float32 and audio.ndim == 1 and len(audio) > 0
        assert np.all(np.abs(audio) <= 1.0)
