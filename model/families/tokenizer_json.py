"""A checkpoint's tokenizer.json carried into our model directory with its model: required, and every id
it gives within the model's token table (BART's and T5's families, whose fast tokenizer writes it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tokenizers import Tokenizer

from model.architecture.weights import save_model_dir
from modeldir.files import TOKENIZER_FILE


def require_tokenizer(source: Path, error: type[ValueError], writer: str) -> None:
    """Refuse a checkpoint without tokenizer.json (writer: what writes one, for the message)."""
    if not (Path(source) / TOKENIZER_FILE).is_file():
        raise error(f"{source}: no tokenizer ({TOKENIZER_FILE}; {writer} writes it)")


def save_with_tokenizer(model, source: Path, out_dir: Path, name: str, error: type[ValueError]) -> Path:
    """Our model directory of `model`, with the checkpoint's tokenizer.json copied in."""
    highest = Tokenizer.from_file(str(Path(source) / TOKENIZER_FILE)).get_vocab_size(with_added_tokens=True) - 1
    if highest >= model.config.vocab_size:  # every id the tokenizer gives needs a row in the token table
        raise error(
            f"{source}: the tokenizer gives ids up to {highest}, beyond the model's {model.config.vocab_size} tokens"
        )
    out_dir = save_model_dir(model, name, out_dir)
    shutil.copyfile(Path(source) / TOKENIZER_FILE, out_dir / TOKENIZER_FILE)
    return out_dir
