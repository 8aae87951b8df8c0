"""A grid of attention heatmaps, layers down and heads across, with token labels (for `attnserve heads`).

Needs matplotlib (the `plot` extra), which the serving image does not have: only `attnserve heads --out`
imports this module. The layout is computed in pixels, so a figure's size follows from its grid alone:
figure_size_px says what it will be before drawing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100
GAP = 10  # pixels between panels
TOP, RIGHT = 80, 70  # three lines of title and the head numbers; colour bar
FONT = 6  # points, for token labels
CHAR = 5  # pixels a label character takes at FONT points, with room to spare


@dataclass(frozen=True)
class Layout:
    panel: int  # a square panel's side, pixels
    left: int
    bottom: int
    width: int
    height: int


def panel_px(queries: int, keys: int) -> int:
    """About 10 pixels a token, so that labels at FONT points do not overlap; within 90..200."""
    return int(np.clip(10 * max(queries, keys), 90, 200))


def figure_size_px(layers: int, heads: int, row_tokens: list[str], column_tokens: list[str]) -> Layout:
    panel = panel_px(len(row_tokens), len(column_tokens))
    left = 36 + CHAR * max(len(display(t)) for t in row_tokens)  # "layer l", then the row labels
    bottom = 16 + CHAR * max(len(display(t)) for t in column_tokens)  # column labels, written upwards
    width = left + heads * panel + (heads - 1) * GAP + RIGHT
    height = TOP + layers * panel + (layers - 1) * GAP + bottom
    return Layout(panel, left, bottom, width, height)


def display(token: str) -> str:
    """A token as a label: without the word-start mark of sentencepiece-style vocabularies."""
    return token.lstrip("▁") or token


def fit(text: str, width: int, points: float) -> str:
    """The text, cut short with an ellipsis where it would be wider than `width` pixels."""
    most = int(width / (points * 0.75))  # a character is about 0.55 em wide: this leaves a margin
    return text if len(text) <= most else text[: most - 1] + "…"


def draw(
    weights: np.ndarray,
    layers: list[int],
    row_tokens: list[str],
    column_tokens: list[str],
    title: list[str],
    out: Path,
) -> Layout:
    """weights (L, H, Q, K) -> a PNG at `out`, one panel per layer and head on a shared 0..1 scale, under
    up to three lines of title (the first larger)."""
    n_layers, n_heads, queries, keys = weights.shape
    rows, columns = [display(t) for t in row_tokens], [display(t) for t in column_tokens]
    layout = figure_size_px(n_layers, n_heads, row_tokens, column_tokens)
    figure = Figure(figsize=(layout.width / DPI, layout.height / DPI), dpi=DPI)
    FigureCanvasAgg(figure)
    p, w, h = layout.panel, layout.width, layout.height
    image = None
    for i in range(n_layers):
        for j in range(n_heads):
            x = layout.left + j * (p + GAP)
            y = layout.bottom + (n_layers - 1 - i) * (p + GAP)
            axes = figure.add_axes((x / w, y / h, p / w, p / h))
            image = axes.imshow(weights[i, j], cmap="Blues", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
            axes.set_xticks([])
            axes.set_yticks([])
            if j == 0:
                axes.set_yticks(range(queries), rows, fontsize=FONT)
                axes.set_ylabel(f"layer {layers[i]}", fontsize=8)
            if i == n_layers - 1:
                axes.set_xticks(range(keys), columns, fontsize=FONT, rotation=90)
            if i == 0:
                axes.set_title(f"head {j}", fontsize=8)
    colour_bar = figure.add_axes(((w - RIGHT + 16) / w, layout.bottom / h, 12 / w, (h - TOP - layout.bottom) / h))
    figure.colorbar(image, cax=colour_bar).ax.tick_params(labelsize=FONT)
    for line, (top, points) in zip(title, [(8, 10), (26, 7), (40, 7)]):
        figure.text(0.5, 1 - top / h, fit(line, w, points), ha="center", va="top", fontsize=points)
    figure.savefig(out, dpi=DPI)
    return layout
