"""PyLate itself, run in its own environment (.venv-pylate: PyLate pins a sentence-transformers and
transformers older than ours), as the reference for ColBERT-style models: it makes a ColBERT checkpoint from
a transformers encoder and saves it as PyLate saves one, and encodes texts as queries or documents.

    python testing/pylate_reference.py make ENCODER_DIR OUT_DIR SETTINGS_JSON
    python testing/pylate_reference.py serve

serve reads one JSON request a line, {"model": MODEL_DIR, "texts": [...], "role": "query" | "document"}, and
answers each with a line of {"vectors": [[[...], ...] per text]}: a test's hypothesis examples go through one
process, which loads each model once.

SETTINGS_JSON: ColBERT's keyword arguments (query_length, document_length, attend_to_expansion_tokens, ...),
and "dense": [[out_features, bias, activation], ...] for a projection stack of more than PyLate's one
layer (activation: "identity" or "tanh"). This file imports neither attnserve nor its environment.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch

ACTIVATIONS = {"identity": torch.nn.Identity, "tanh": torch.nn.Tanh}


def make(encoder_dir: str, out_dir: str, settings: dict) -> None:
    from pylate import models

    torch.manual_seed(settings.pop("seed", 0))
    layers = settings.pop("dense", None)
    if layers:
        transformer = models.ColBERT(model_name_or_path=encoder_dir, device="cpu")[0]
        stack, width = [transformer], transformer.get_word_embedding_dimension()
        for out_features, bias, activation in layers:
            stack.append(models.Dense(width, out_features, bias=bias, activation_function=ACTIVATIONS[activation]()))
            width = out_features
        model = models.ColBERT(modules=stack, device="cpu", **settings)
    else:
        model = models.ColBERT(model_name_or_path=encoder_dir, device="cpu", **settings)
    model.save(out_dir)


def serve() -> None:
    from pylate import models

    loaded = {}
    for line in sys.stdin:
        request = json.loads(line)
        if request["model"] not in loaded:
            loaded[request["model"]] = models.ColBERT(model_name_or_path=request["model"], device="cpu")
        model = loaded[request["model"]]
        vectors = model.encode(request["texts"], is_query=request["role"] == "query", batch_size=8)
        answer = {"vectors": [np.asarray(v, dtype=np.float32).tolist() for v in vectors]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "make":
        make(args[0], args[1], json.loads(args[2]))
    elif command == "serve":
        serve()
    else:
        raise SystemExit(f"unknown command {command!r}: make or serve")
