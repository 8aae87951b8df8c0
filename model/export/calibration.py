"""The ranges int8 and uint8 embeddings are cut to, per dimension: the least and largest value of a model's
vectors (normalised as it normalises them by default) and of its multi-vectors over a calibration corpus
(the standard library's docstrings, in English), computed at export, as sentence-transformers'
quantize_embeddings computes them from calibration_embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from model.architecture.transformer import EmbeddingModel
from model.export.stdlib_sentences import stdlib_sentences
from modeldir.files import TOKENIZER_FILE
from modeldir.tokenizer import TextTokenizer, pad_batch

CALIBRATION_TEXTS = 256
BATCH = 32


@torch.no_grad()
def calibration_ranges(model: EmbeddingModel, model_dir: Path, texts: list[str] | None = None) -> dict:
    """-> {"dense": [[least...], [largest...]], "multi_vector": [...] where the model has multi-vectors}, over
    the model directory's tokenizer's inputs (cut at its max_input_tokens, as served). A ColBERT-style
    model's multi-vectors are its documents' (framed and kept as served), and it has no dense output."""
    config = model.config
    colbert = config.colbert
    max_tokens = colbert.max_tokens("document") if colbert else config.max_input_tokens
    tokenizer = TextTokenizer(Path(model_dir) / TOKENIZER_FILE, max_tokens)
    texts = texts or stdlib_sentences(CALIBRATION_TEXTS, 4, 60)
    dense, multi = [], []
    for start in range(0, len(texts), BATCH):
        sequences = [e.ids for e in tokenizer.encode(texts[start : start + BATCH])]
        if colbert:
            sequences = [colbert.frame(ids, "document")[0] for ids in sequences]
        ids, mask = pad_batch(sequences, config.pad_id)
        outputs = model(torch.from_numpy(ids), torch.from_numpy(mask))
        pooled = outputs[1]
        if config.normalize:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        dense.append(pooled.numpy())
        vectors = outputs[-1].numpy()
        if colbert:
            multi += [vectors[row, colbert.kept(s, "document")] for row, s in enumerate(sequences)]
        elif config.multi_vector_dim:
            multi += [vectors[row, : len(s) - 1] for row, s in enumerate(sequences)]
    ranges = {} if colbert else {"dense": _ranges(np.concatenate(dense))}
    if multi:
        ranges["multi_vector"] = _ranges(np.concatenate(multi))
    return ranges


def _ranges(vectors: np.ndarray) -> list[list[float]]:
    return [vectors.min(axis=0).tolist(), vectors.max(axis=0).tolist()]
