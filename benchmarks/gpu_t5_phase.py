"""The GPU check's T5 phase: a Flan-T5-small-shaped random checkpoint's float16 graphs on the device (its
decoder's self-attention a GroupQueryAttention whose attention_bias carries the relative positions), their
greedy tokens against the float32 graphs' on the CPU and their tokens/s at one caller and at the check's
concurrency against transformers' float16 on the same GPU; and a small checkpoint whose residual stream
outgrows float16 (as Flan-T5's does), whose float16 graphs keep that stream float32: its tokens against
the CPU's, where a graph all in float16 would give infinities."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .gpu_phases import generation, served_tokens


def t5_checkpoint(ctx) -> Path:
    """The Hugging Face checkpoint of the served T5 graphs, remade from its seed (transformers' baseline)."""
    target = Path(tempfile.gettempdir()) / "attnserve-t5-hf"
    if not (target / "model.safetensors").is_file():
        code = (
            "import json, sys; from model.families.t5.random_checkpoint import T5Shape, random_t5_checkpoint;"
            "random_t5_checkpoint(sys.argv[1], T5Shape(**json.loads(sys.argv[2])), seed=int(sys.argv[3]))"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(target), json.dumps(ctx.sizes.t5), str(ctx.sizes.t5_seed)],
            check=True,
            capture_output=True,
        )
    return target


def t5(ctx) -> dict:
    out = {}
    for name in ("t5", "t5-overflowing"):
        refs = ctx.references[name]
        served = served_tokens(ctx.server, refs, name)
        same = sum(a == b for a, b in zip(served, refs["tokens"]))
        out[name] = {"prompts": len(served), "same": same, "share": same / len(served)}
    out["generation"] = generation(ctx, "t5", t5_checkpoint(ctx))
    return out
