"""The random model configurations the parity suite covers, and a model exported from one with its PyTorch
module and ONNX Runtime sessions."""

from __future__ import annotations

import io
from pathlib import Path

import onnxruntime as ort

from model.architecture.random_model import random_model_dir
from model.architecture.weights import load_model_dir
from model.export.model_dir import export_model_dir
from modeldir.config import ModelConfig
from modeldir.files import open_model_dir

# Corners of the space the parity suite covers (1-8 heads, d_model = heads x 8..64, 1-4 layers,
# pre- and post-norm), crossed with the other options: positions, activations, embedding sharing,
# output tying and bias, token types, scaling. test_parity.py also exports hypothesis-drawn configs.
SEQ2SEQ_CONFIGS = {
    "h1-d8-post": ModelConfig(
        task="seq2seq",
        vocab_size=61,
        d_model=8,
        n_heads=1,
        d_ff=16,
        n_encoder_layers=1,
        n_decoder_layers=1,
        max_positions=640,
        norm_placement="post",
        positions="sinusoidal",
        activation="relu",
        scale_embeddings=True,
    ),
    "h8-d512-pre": ModelConfig(
        task="seq2seq",
        vocab_size=301,
        d_model=512,
        n_heads=8,
        d_ff=1024,
        n_encoder_layers=1,
        n_decoder_layers=2,
        max_positions=640,
        norm_placement="pre",
        positions="learned",
        activation="gelu",
        share_embeddings=False,
        tie_output=False,
        output_bias=True,
    ),
    "h4-d96-post-4layers": ModelConfig(
        task="seq2seq",
        vocab_size=500,
        d_model=96,
        n_heads=4,
        d_ff=192,
        n_encoder_layers=4,
        n_decoder_layers=4,
        max_positions=640,
        norm_placement="post",
        positions="sinusoidal",
        activation="gelu_tanh",
        embedding_norm=True,
        type_vocab_size=2,
    ),
    "h3-d48-pre": ModelConfig(  # mBART's positions: learned, counted from 2
        task="seq2seq",
        vocab_size=257,
        d_model=48,
        n_heads=3,
        d_ff=96,
        n_encoder_layers=3,
        n_decoder_layers=3,
        max_positions=640,
        norm_placement="pre",
        positions="learned",
        activation="silu",
        scale_embeddings=True,
        position_offset=2,
    ),
    "h2-d32-pre-fairseq": ModelConfig(  # M2M100's and NLLB's form
        task="seq2seq",
        vocab_size=90,
        d_model=32,
        n_heads=2,
        d_ff=64,
        n_encoder_layers=2,
        n_decoder_layers=2,
        max_positions=640,
        norm_placement="pre",
        positions="sinusoidal_fairseq",
        position_offset=2,
        pad_id=1,
        bos_id=2,
        eos_id=2,
        scale_embeddings=True,
    ),
    "h4-dkv16-d32-t5": ModelConfig(  # T5's form: relative positions, RMS norms, gated GELU, no biases
        task="seq2seq",
        vocab_size=100,
        d_model=32,
        n_heads=4,
        d_kv=16,  # heads 64 wide in all, over a d_model of 32 (MADLAD-400's kind)
        d_ff=48,
        n_encoder_layers=2,
        n_decoder_layers=2,
        max_positions=640,
        norm_placement="pre",
        norm="rms",
        layer_norm_eps=1e-6,
        positions="relative",
        relative_buckets=8,
        relative_max_distance=20,
        relative_bias_per_layer=True,
        activation="gelu_tanh",
        feed_forward="gated",
        linear_bias=False,
        scale_attention=False,
        rescale_output=True,
        pad_id=0,
        bos_id=0,
        eos_id=1,
    ),
}

EMBEDDING_CONFIGS = {
    "emb-h2-d64-mean": ModelConfig(
        task="embedding",
        vocab_size=400,
        d_model=64,
        n_heads=2,
        d_ff=128,
        n_encoder_layers=2,
        max_positions=320,
        max_input_tokens=300,
        positions="learned",
        embedding_norm=True,
        type_vocab_size=2,
        activation="gelu",
        pooling="mean",
    ),
    "emb-h6-d48-cls-pre": ModelConfig(
        task="embedding",
        vocab_size=120,
        d_model=48,
        n_heads=6,
        d_ff=96,
        n_encoder_layers=1,
        max_positions=320,
        max_input_tokens=300,
        norm_placement="pre",
        pooling="cls",
    ),
}


class Exported:
    """A model exported once: its PyTorch module and ONNX Runtime sessions."""

    def __init__(self, model_dir: Path):
        self.dir = model_dir
        self.files = open_model_dir(model_dir)
        _, self.config, self.model = load_model_dir(model_dir)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        self.encoder = ort.InferenceSession(str(self.files.encoder), options, providers=["CPUExecutionProvider"])
        self.decoder = (
            ort.InferenceSession(str(self.files.decoder), options, providers=["CPUExecutionProvider"])
            if self.files.decoder
            else None
        )


def export_random(config: ModelConfig, root: Path, name: str, seed: int = 0) -> Exported:
    model_dir = random_model_dir(config, root / name, name, seed=seed)
    export_model_dir(model_dir, progress_stream=io.StringIO())
    return Exported(model_dir)
