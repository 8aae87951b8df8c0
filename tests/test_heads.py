"""`attnserve heads`: the per-head summary on known cases, and the CLI against a real server: the table it
prints and the PNG it draws (its pixel size follows from the layers x heads grid)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.image import imread

from cli.heads import format_table, summarize
from cli.heads_figure import DPI, GAP, figure_size_px
from service.grpc_api.client import Client
from testing.server_thread import ServerThread

TRUCK = "The delivery truck, which was late, blocked the narrow street."


def shift(n: int, offset: int) -> np.ndarray:
    """Each query puts all its weight on the key `offset` before it (itself when that is out of range)."""
    weights = np.zeros((n, n))
    for i in range(n):
        weights[i, i - offset if i - offset >= 0 else i] = 1
    return weights


def test_known_heads():
    n = 6
    uniform_causal = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    weights = np.stack([shift(n, 0), shift(n, 1), np.full((n, n), 1 / n), uniform_causal])[None]  # (1, 4, n, n)
    special = [True] + [False] * (n - 2) + [True]
    itself, previous, uniform, causal = summarize(weights, [3], special, self_attention=True)

    assert (itself.layer, itself.head) == (3, 0) and (causal.layer, causal.head) == (3, 3)
    assert itself.itself == 1 and itself.previous == 0 and itself.distance == 0 and itself.entropy == 0
    assert itself.special == pytest.approx(2 / n)  # queries 0 and 5 sit on special tokens
    # Query 0 has no previous token and looks at itself; queries 1..5 all look one back.
    assert previous.previous == 1 and previous.itself == pytest.approx(1 / n)
    assert previous.distance == pytest.approx(5 / n) and previous.entropy == 0
    assert uniform.entropy == pytest.approx(math.log(n)) and uniform.itself == pytest.approx(1 / n)
    assert uniform.special == pytest.approx(2 / n) and uniform.previous == pytest.approx(1 / n)
    assert uniform.distance == pytest.approx(np.abs(np.arange(n)[:, None] - np.arange(n)).mean())
    assert causal.entropy == pytest.approx(np.mean([math.log(k) for k in range(1, n + 1)]))
    assert causal.itself == pytest.approx(np.mean(1 / np.arange(1, n + 1)))


def test_cross_attention_has_no_positions_to_compare():
    weights = np.zeros((2, 1, 3, 4))
    weights[..., 1] = 1
    first, second = summarize(weights, [0, 1], [False, True, False, False], self_attention=False)
    assert first.special == 1 and first.entropy == 0 and (first.distance, first.previous, first.itself) == (None,) * 3
    table = format_table([first, second]).splitlines()
    assert table[0].split() == ["layer", "head", "entropy", "distance", "special", "previous", "self"]
    assert table[2].split() == ["1", "0", "0.000", "-", "1.000", "-", "-"]


@pytest.fixture(scope="module")
def attention_server(minilm_dir, numbers_dir):
    server = ServerThread([minilm_dir, numbers_dir], attention_maps=True)
    yield server
    server.close()


def heads(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "heads", *args], capture_output=True, text=True, timeout=120)


def parse_table(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["layer", "head"])
    return [line.split() for line in lines[start + 1 :]]


def test_minilm_heads_png_and_summary(attention_server, tmp_path):
    out = tmp_path / "minilm.png"
    result = heads(TRUCK, "--model", "minilm", "--out", str(out), "--target", attention_server.target)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("minilm, encoder self-attention: 6 layers x 12 heads, 15 x 15 tokens")

    with Client(attention_server.target) as client:
        maps = client.attention(TRUCK, model="minilm")
    rows = parse_table(result.stdout)
    assert [(int(r[0]), int(r[1])) for r in rows] == [(layer, head) for layer in range(6) for head in range(12)]
    expected = summarize(maps.weights["encoder_self"], list(range(6)), maps.source_special, self_attention=True)
    for row, s in zip(rows, expected):
        printed = [float(v) for v in row[2:]]
        assert printed == pytest.approx([s.entropy, s.distance, s.special, s.previous, s.itself], abs=6e-4)
        entropy, distance, *shares = printed
        assert 0 <= entropy <= math.log(15) + 1e-3 and 0 <= distance <= 14
        assert all(0 <= share <= 1 for share in shares)
    assert float(rows[2][5]) > 0.99  # layer 0, head 2 attends to the previous token

    image = imread(out)
    layout = figure_size_px(6, 12, maps.source_tokens, maps.source_tokens)
    assert image.shape[:2] == (layout.height, layout.width)
    assert f"{out}: 6 x 12 heatmaps, {layout.width} x {layout.height} pixels" in result.stderr
    assert out.stat().st_size < 300_000

    # Two layers of six: the same width, four rows of panels fewer.
    fewer = tmp_path / "two-layers.png"
    assert (
        heads(
            TRUCK, "--model", "minilm", "--layers", "0", "5", "--out", str(fewer), "--target", attention_server.target
        ).returncode
        == 0
    )
    two = imread(fewer)
    assert two.shape[1] == image.shape[1] and image.shape[0] - two.shape[0] == 4 * (layout.panel + GAP)
    assert layout.panel == 150 and DPI == 100  # 10 pixels a token


def test_numbers_cross_attention_is_the_default_for_seq2seq(attention_server, tmp_path):
    out = tmp_path / "numbers.png"
    result = heads("312405", "--model", "numbers", "--out", str(out), "--target", attention_server.target)
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first == (
        "numbers, cross-attention: 3 layers x 4 heads, 11 x 8 tokens; "
        "'312405' -> 'three hundred and twelve thousand, four hundred and five'"
    )
    rows = parse_table(result.stdout)
    assert len(rows) == 12 and all(r[3] == r[5] == r[6] == "-" for r in rows)
    assert all(0 <= float(r[4]) <= 1 for r in rows)
    with Client(attention_server.target) as client:
        maps = client.attention("312405", model="numbers")
    layout = figure_size_px(3, 4, maps.predicted_tokens, maps.source_tokens)
    assert imread(out).shape[:2] == (layout.height, layout.width)

    decoder = heads("312405", "--model", "numbers", "--kind", "decoder", "--target", attention_server.target)
    assert decoder.returncode == 0 and decoder.stdout.startswith(
        "numbers, decoder self-attention: 3 layers x 4 heads, 11 x 11"
    )
    for row in parse_table(decoder.stdout):  # the start token's row is all on itself: self share >= 1/11
        assert float(row[6]) >= 1 / 11 - 1e-3


def test_errors_are_reported_plainly(attention_server, numbers_dir):
    result = heads("x", "--model", "minilm", "--kind", "cross", "--target", attention_server.target)
    assert result.returncode == 1 and "--kind cross: model 'minilm' has no cross-attention" in result.stderr
    result = heads("x", "--model", "nope", "--target", attention_server.target)
    assert result.returncode == 1 and result.stderr.startswith("NOT_FOUND: model: 'nope' is not served here")
    off = ServerThread([numbers_dir])
    try:
        result = heads("5", "--target", off.target)
        assert result.returncode == 1 and "FAILED_PRECONDITION" in result.stderr and "--attention-maps" in result.stderr
    finally:
        off.close()


def test_serving_never_imports_matplotlib():
    """matplotlib is the plot extra's: the serving image does not have it."""
    probe = "import sys, cli.main, service.server, service.grpc_api.client, cli.heads; assert 'matplotlib' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).returncode == 0
