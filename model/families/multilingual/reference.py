"""transformers' M2M100, NLLB-200 or mBART beside ours: the reference the parity tests hold our server to
(generate's n best into a target language, forced as its first token or, mBART-25's, the decoder's start)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers


class MultilingualReference:
    """transformers' model and tokenizer of a checkpoint directory, its sources read in `source_language`."""

    def __init__(self, source: Path, mbart: bool, source_language: str, max_new_tokens: int, start=False):
        """start: the target's code is the decoder's start token (mBART-25), not its forced first token."""
        self.max_new_tokens, self.start = max_new_tokens, start
        model_class = (
            transformers.MBartForConditionalGeneration if mbart else transformers.M2M100ForConditionalGeneration
        )
        self.hf = model_class.from_pretrained(source).eval()
        self.hf_tokenizer = transformers.AutoTokenizer.from_pretrained(source, src_lang=source_language)

    def language_id(self, code: str) -> int:
        return self.hf_tokenizer.convert_tokens_to_ids(code if "_" in code else f"__{code}__")

    def hf_n_best(self, texts: list[str], target: str, n: int = 1, **kwargs) -> list[list[tuple[list[int], float]]]:
        """Per text, transformers' n best into `target` (forced_bos_token_id, or mBART-25's
        decoder_start_token_id): the ids after the start token and the language code, without eos or
        padding, and their scores (0.0 for greedy)."""
        batch = self.hf_tokenizer(texts, return_tensors="pt", padding=True)
        code = self.language_id(target)
        place = {"decoder_start_token_id": code} if self.start else {"forced_bos_token_id": code}
        with torch.no_grad():
            out = self.hf.generate(
                **batch,
                **place,
                max_new_tokens=self.max_new_tokens + (not self.start),
                num_return_sequences=n,
                output_scores=True,
                return_dict_in_generate=True,
                **kwargs,
            )
        scores = out.sequences_scores.tolist() if n > 1 or kwargs.get("num_beams", 1) > 1 else [0.0] * len(texts)
        rows = []
        for row, score in zip(out.sequences, scores):
            first = 1 if self.start else 2  # past the start token, and the forced code where it is one
            assert row[first - 1] == code
            # up to eos: the padding of a batch's rows follows it (a random model may choose pad before)
            ids = row[first:].tolist()
            eos = self.hf.config.eos_token_id
            rows.append((ids[: ids.index(eos)] if eos in ids else ids, score))
        return [rows[i : i + n] for i in range(0, len(rows), n)]
