"""Random-weight models with a word-level tokenizer: for tests and benchmarks of shapes and speed."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from model.architecture.weights import build_model, save_model_dir
from modeldir.config import ModelConfig
from modeldir.files import TOKENIZER_FILE

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3, as ModelConfig's defaults expect

# Transformer-base (the paper's base model, Marian-base sized): d_model 512, 8 heads, 6+6 layers, vocab 32k.
BASE_SEQ2SEQ = ModelConfig(
    task="seq2seq",
    vocab_size=32000,
    d_model=512,
    n_heads=8,
    d_ff=2048,
    n_encoder_layers=6,
    n_decoder_layers=6,
    max_positions=1024,
    scale_embeddings=True,
)


def word_tokenizer(vocab_size: int) -> Tokenizer:
    """Words w4 .. w{vocab_size-1} split on whitespace, after the special tokens."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL_TOKENS), vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def random_model(config: ModelConfig, seed: int = 0) -> torch.nn.Module:
    """Default initialisation, plus LayerNorm gains and biases away from 1 and 0 so that tests see them."""
    torch.manual_seed(seed)
    model = build_model(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.add_(0.1 * torch.randn_like(module.weight))
                module.bias.add_(0.1 * torch.randn_like(module.bias))
    return model


def random_model_dir(config: ModelConfig, out_dir: Path, name: str, seed: int = 0) -> Path:
    model = random_model(config, seed)
    out_dir = save_model_dir(model, name, out_dir)
    word_tokenizer(config.vocab_size).save(str(Path(out_dir) / TOKENIZER_FILE))
    return out_dir
