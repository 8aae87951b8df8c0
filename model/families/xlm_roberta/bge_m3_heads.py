"""bge-m3's two heads beside its encoder, as FlagEmbedding ships them: sparse_linear (d_model -> 1, a weight
per token) and colbert_linear (d_model -> dim, a vector per token), each a linear layer's weight and bias
in a file of its own. Read as tensors only: from safetensors, or from the .pt files with
torch.load(weights_only=True), which refuses anything but tensors (a pickle may run code when loaded)."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from safetensors.torch import load_file

HEADS = {"sparse_linear": "sparse_linear", "colbert_linear": "colbert_linear"}  # file stem -> our module


def _read(source: Path, stem: str) -> dict[str, torch.Tensor] | None:
    for path, read in (
        (source / f"{stem}.safetensors", load_file),
        (source / f"{stem}.pt", lambda p: torch.load(p, map_location="cpu", weights_only=True)),
    ):
        if path.exists():
            try:
                state = read(str(path))
            except pickle.UnpicklingError as error:  # weights_only refused an object that is not a tensor
                raise ValueError(f"{path}: not a file of tensors only ({error})") from None
            if set(state) != {"weight", "bias"} or not all(isinstance(t, torch.Tensor) for t in state.values()):
                raise ValueError(f"{path}: expected a linear layer's weight and bias, found {sorted(state)}")
            return state
    return None


def read_heads(source: Path, d_model: int) -> tuple[dict, dict[str, torch.Tensor]]:
    """-> (ModelConfig fields, our parameters) of the heads the checkpoint has (none: empty both)."""
    fields, state = {}, {}
    for stem, module in HEADS.items():
        found = _read(Path(source), stem)
        if found is None:
            continue
        out_features, in_features = found["weight"].shape
        if in_features != d_model or (stem == "sparse_linear" and out_features != 1):
            raise ValueError(f"{source}: {stem} maps {in_features} -> {out_features}, the encoder gives {d_model}")
        if stem == "sparse_linear":
            fields["sparse_head"] = "token_weights"
        else:
            fields["multi_vector_dim"] = out_features
        state.update({f"{module}.{name}": tensor for name, tensor in found.items()})
    return fields, state
