"""The bundled "numbers" model: its tokenizer, its data, its training, and the committed checkpoint."""

from __future__ import annotations

import io
import random
import re
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import load_file

from cli.build import CHECKPOINTS_DIR
from model.bundled.eval_numbers import NumbersModel, evaluate
from model.bundled.numbers import LIMIT, build_tokenizer, pair, sample_number, to_words
from model.bundled.train_numbers import settings_from, train

CHECKPOINT = CHECKPOINTS_DIR / "numbers"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@given(number=st.integers(0, LIMIT - 1))
def test_both_spellings_round_trip_through_the_tokenizer(tokenizer, number):
    for text in (str(number), to_words(number)):
        encoding = tokenizer.encode(text)
        assert "<unk>" not in encoding.tokens
        assert encoding.ids[-1] == 2  # </s>
        assert tokenizer.decode(encoding.ids) == text
    assert len(tokenizer.encode(to_words(number)).ids) <= 17


def test_the_tokenizer_is_word_level():
    tokenizer = build_tokenizer()
    assert tokenizer.encode("one thousand, two hundred and thirty-four").tokens == [
        "▁one",
        "▁thousand",
        ",",
        "▁two",
        "▁hundred",
        "▁and",
        "▁thirty-four",
        "</s>",
    ]
    assert tokenizer.encode("1234").tokens == ["▁", "1", "2", "3", "4", "</s>"]
    assert tokenizer.get_vocab_size() == 120


def test_every_length_is_well_represented():
    rng = random.Random(5)
    lengths = Counter(len(str(sample_number(rng))) for _ in range(9000))
    assert sorted(lengths) == list(range(1, 10))
    assert min(lengths.values()) > 850  # uniform would be 1000 each


def test_the_direction_follows_the_input():
    assert pair(312405, to_digits=False) == ("312405", "three hundred and twelve thousand, four hundred and five")
    assert pair(312405, to_digits=True) == ("three hundred and twelve thousand, four hundred and five", "312405")


def test_training_is_deterministic(tmp_path):
    settings = settings_from(steps=6, batch_size=16, d_model=32, n_heads=2, report_every=3)
    log = io.StringIO()
    first, second = train(settings, tmp_path / "a", log=log), train(settings, tmp_path / "b", log=io.StringIO())
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    lines = log.getvalue().splitlines()
    assert re.fullmatch(
        r"step      3/6  loss \d+\.\d{4}  token acc +\d+\.\d\d%  sequence acc +\d+\.\d\d%  "
        r"lr \S+  elapsed \d+:\d\d  left \d+:\d\d",
        lines[1],
    ), lines[1]


def test_the_checkpoint_is_small_enough_to_commit():
    files = {p.name: p.stat().st_size for p in CHECKPOINT.iterdir()}
    assert set(files) == {"config.json", "model.safetensors", "tokenizer.json"}
    assert sum(files.values()) <= 20 * 1024 * 1024


def test_the_committed_checkpoint_reaches_the_accuracy_floor(numbers_dir):
    """Through ONNX Runtime with the KV cache, on a fixed sample drawn with a seed not used in training."""
    report = evaluate(numbers_dir, count=500, seed=777)
    for direction, result in report.items():
        assert result["accuracy"] >= 0.995, (direction, result["errors"][:5])


def test_the_example_from_the_issue(numbers_dir):
    model = NumbersModel(numbers_dir)
    assert model.translate(["312405", "three hundred and twelve thousand, four hundred and five", "0"]) == [
        "three hundred and twelve thousand, four hundred and five",
        "312405",
        "zero",
    ]
