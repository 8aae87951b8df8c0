"""transformers' MarianMT beside ours: the reference the parity tests hold our graphs and our server to
(generate's ids, its n best with their scores)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers


class MarianReference:
    """transformers' model and tokenizer of a Marian checkpoint directory."""

    def __init__(self, source: Path, max_new_tokens: int):
        self.max_new_tokens = max_new_tokens
        self.hf = transformers.MarianMTModel.from_pretrained(source).eval()
        self.hf_tokenizer = transformers.MarianTokenizer.from_pretrained(source)

    def hf_generate(self, texts: list[str], **kwargs) -> list[list[int]]:
        """transformers' output ids after the start token, without the padding of shorter rows."""
        batch = self.hf_tokenizer(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = self.hf.generate(**batch, max_new_tokens=self.max_new_tokens, **kwargs)
        return [self._unpadded(row) for row in out]

    def hf_n_best(self, texts: list[str], n: int, **kwargs) -> list[list[tuple[list[int], float]]]:
        """Per text, transformers' n best beam-search hypotheses (ids as hf_generate) with their scores."""
        batch = self.hf_tokenizer(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = self.hf.generate(
                **batch,
                max_new_tokens=self.max_new_tokens,
                num_return_sequences=n,
                output_scores=True,
                return_dict_in_generate=True,
                **kwargs,
            )
        hypotheses = [(self._unpadded(row), float(score)) for row, score in zip(out.sequences, out.sequences_scores)]
        return [hypotheses[i : i + n] for i in range(0, len(hypotheses), n)]

    def _unpadded(self, row: torch.Tensor) -> list[int]:
        pad = self.hf.config.pad_token_id
        return [t for t in row[1:].tolist() if t != pad]


def without_eos(ids: list[int], eos: int = 0) -> list[int]:
    """transformers' ids of a generation or a target text, without the eos that ours leave out."""
    return ids[:-1] if ids and ids[-1] == eos else ids
