"""transformers' M2M100, NLLB-200 or mBART-50 beside ours: the reference the parity tests hold our server to
(generate's n best into a target language, forced as its first token)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers


class MultilingualReference:
    """transformers' model and tokenizer of a checkpoint directory, its sources read in `source_language`."""

    def __init__(self, source: Path, mbart: bool, source_language: str, max_new_tokens: int):
        self.max_new_tokens = max_new_tokens
        model_class = (
            transformers.MBartForConditionalGeneration if mbart else transformers.M2M100ForConditionalGeneration
        )
        self.hf = model_class.from_pretrained(source).eval()
        self.hf_tokenizer = transformers.AutoTokenizer.from_pretrained(source, src_lang=source_language)

    def language_id(self, code: str) -> int:
        return self.hf_tokenizer.convert_tokens_to_ids(code if "_" in code else f"__{code}__")

    def hf_n_best(self, texts: list[str], target: str, n: int = 1, **kwargs) -> list[list[tuple[list[int], float]]]:
        """Per text, transformers' n best into `target` (forced_bos_token_id): the ids after the start token
        and the language code, without eos or padding, and their scores (0.0 for greedy)."""
        batch = self.hf_tokenizer(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = self.hf.generate(
                **batch,
                forced_bos_token_id=self.language_id(target),
                max_new_tokens=self.max_new_tokens + 1,
                num_return_sequences=n,
                output_scores=True,
                return_dict_in_generate=True,
                **kwargs,
            )
        scores = out.sequences_scores.tolist() if n > 1 or kwargs.get("num_beams", 1) > 1 else [0.0] * len(texts)
        rows = []
        for row, score in zip(out.sequences, scores):
            assert row[1] == self.language_id(target)
            ids = [t for t in row[2:].tolist() if t != self.hf.config.pad_token_id]
            rows.append((ids[:-1] if ids and ids[-1] == self.hf.config.eos_token_id else ids, score))
        return [rows[i : i + n] for i in range(0, len(rows), n)]
