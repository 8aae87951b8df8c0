"""FlagEmbedding's bge-m3 outputs, computed as its BGEM3 model computes them (FlagEmbedding itself cannot be
imported beside transformers 5), on transformers' XLM-R and the checkpoint's own head files: the reference
the served dense, sparse and multi-vector outputs are held to.

    dense: the CLS state, L2-normalised
    sparse: relu(sparse_linear(state)) per token; per token id the largest, <s> </s> <pad> <unk> dropped,
            weights above 0 kept (its _process_token_weights)
    multi-vectors: colbert_linear(state) of every token but the first, L2-normalised
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


class BgeM3Reference:
    def __init__(self, model_dir: Path, max_length: int):
        from transformers import AutoModel, AutoTokenizer

        model_dir = Path(model_dir)
        encoder_dir = model_dir / "0_Transformer" if (model_dir / "0_Transformer").exists() else model_dir
        self.tokenizer = AutoTokenizer.from_pretrained(str(encoder_dir))
        self.model = AutoModel.from_pretrained(str(encoder_dir)).eval()
        d_model = self.model.config.hidden_size
        self.sparse_linear = torch.nn.Linear(d_model, 1)
        self.sparse_linear.load_state_dict(torch.load(model_dir / "sparse_linear.pt", weights_only=True))
        colbert = torch.load(model_dir / "colbert_linear.pt", weights_only=True)
        self.colbert_linear = torch.nn.Linear(d_model, colbert["weight"].shape[0])
        self.colbert_linear.load_state_dict(colbert)
        self.max_length = max_length
        special = ("cls_token", "eos_token", "pad_token", "unk_token")
        self.unused = {self.tokenizer.convert_tokens_to_ids(getattr(self.tokenizer, name)) for name in special}

    @torch.no_grad()
    def encode(self, texts: list[str]) -> tuple[np.ndarray, list[dict[int, float]], list[np.ndarray]]:
        """-> dense (n, d), lexical weights {token id: weight} per text, multi-vectors (tokens - 1, dim) per text."""
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        hidden = self.model(**batch).last_hidden_state
        dense = torch.nn.functional.normalize(hidden[:, 0], dim=-1).numpy()
        weights = torch.relu(self.sparse_linear(hidden)).squeeze(-1).numpy()
        colbert = self.colbert_linear(hidden[:, 1:]) * batch["attention_mask"][:, 1:, None].float()
        colbert = torch.nn.functional.normalize(colbert, dim=-1).numpy()
        lexical, multi = [], []
        for row, (ids, mask) in enumerate(zip(batch["input_ids"].tolist(), batch["attention_mask"].tolist())):
            found: dict[int, float] = {}
            for weight, token in zip(weights[row], ids):
                if token not in self.unused and weight > 0 and weight > found.get(token, 0):
                    found[token] = float(weight)
            lexical.append(found)
            multi.append(colbert[row][: sum(mask) - 1])
        return dense, lexical, multi
