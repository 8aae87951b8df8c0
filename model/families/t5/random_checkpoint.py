"""Random T5-family checkpoints in Hugging Face's layout, for tests and benchmarks: no checkpoint can be
downloaded here, so transformers builds a T5ForConditionalGeneration (or UMT5's) with random weights, and
its T5Tokenizer writes tokenizer.json over a sentencepiece unigram vocabulary trained on the spot on the
bundled number sentences, T5's way (pad 0, eos 1, unk 2, no bos, <extra_id_N> sentinels at the end); or,
for ByT5, its ByT5Tokenizer over bytes.
Needs transformers and sentencepiece (the dev extra)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import sentencepiece
import torch

from model.bundled.number_sentences import sentences


@dataclass(frozen=True)
class T5Shape:
    model_type: str = "t5"  # t5 (T5, Flan-T5, T5 v1.1, MADLAD-400), mt5, umt5
    d_model: int = 32
    d_kv: int = 8
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 64
    feed_forward_proj: str = "gated-gelu"  # T5 v1.1's; the original T5's is "relu"
    tie_word_embeddings: bool = False  # v1.1 and Flan-T5 have an LM head of their own; the original T5 ties
    buckets: int = 32
    max_distance: int = 128
    pieces: int = 300  # the trained vocabulary's size
    vocab_size: int = 0  # 0: what the tokenizer needs; more: the token table's rows (32,128 in T5's checkpoints)
    extra_ids: int = 8  # <extra_id_N> sentinels (100 in T5's checkpoints, 125 in ByT5's)
    byte_tokens: bool = False  # ByT5: bytes for tokens (the table 259 + extra_ids rows), no tokenizer.json
    languages: tuple[str, ...] = ()  # MADLAD-400's target tokens (<2de>), added to the vocabulary
    # Every feed-forward output projection (wo) times this: the residual stream as large as Flan-T5's (1e5,
    # past float16's range), which T5's norms hide from the float32 outputs.
    wo_scale: float = 1.0
    # generation_config.json's
    num_beams: int = 1
    decoder_start_token_id: int = 0  # T5's: pad


def t5_tokenizer(pieces: int, extra_ids: int, seed: int):
    """transformers' T5Tokenizer over a unigram vocabulary trained on number sentences, T5's ids."""
    from transformers import T5Tokenizer

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences(3000, seed)),
        model_writer=model,
        vocab_size=pieces,
        hard_vocab_limit=False,
        model_type="unigram",
        character_coverage=1.0,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
    return T5Tokenizer(vocab=vocab, extra_ids=extra_ids)


def randomize(model, seed: int, wo_scale: float = 1.0) -> None:
    """Weights far from transformers' init, so that the next token is clear-cut and greedy and beam choices do
    not hinge on float rounding: each projection of std 1 / sqrt(its input width), norms near 1, relative
    position tables of std 1 (T5's init leaves them near 0, which would leave the bias untested)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name:
                parameter.copy_(1.0 + 0.1 * torch.randn(parameter.shape, generator=generator))
            elif "relative_attention_bias" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
            elif name.endswith("shared.weight"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
            else:  # (out, in): T5 does not scale its scores, so its query's init carries 1 / sqrt(d_kv)
                scale = parameter.shape[1] ** -0.5 * (0.5 if ".q." in name else 1.0)
                scale *= wo_scale if name.endswith(".wo.weight") else 1.0
                parameter.copy_(scale * 2.0 * torch.randn(parameter.shape, generator=generator))


def random_t5_checkpoint(out_dir: Path, shape: T5Shape, seed: int = 0) -> Path:
    """A T5-family model with random weights and its tokenizer files in out_dir (safetensors only)."""
    import transformers

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if shape.byte_tokens:
        tokenizer = transformers.ByT5Tokenizer(extra_ids=shape.extra_ids)
    else:
        tokenizer = t5_tokenizer(shape.pieces, shape.extra_ids, seed)
    tokenizer.add_tokens([f"<2{code}>" for code in shape.languages])  # whole tokens wherever they are written
    config_class, model_class = {
        "t5": (transformers.T5Config, transformers.T5ForConditionalGeneration),
        "mt5": (transformers.MT5Config, transformers.MT5ForConditionalGeneration),
        "umt5": (transformers.UMT5Config, transformers.UMT5ForConditionalGeneration),
    }[shape.model_type]
    config = config_class(
        vocab_size=max(len(tokenizer), shape.vocab_size),
        d_model=shape.d_model,
        d_kv=shape.d_kv,
        d_ff=shape.d_ff,
        num_layers=shape.encoder_layers,
        num_decoder_layers=shape.decoder_layers,
        num_heads=shape.heads,
        relative_attention_num_buckets=shape.buckets,
        relative_attention_max_distance=shape.max_distance,
        feed_forward_proj=shape.feed_forward_proj,
        tie_word_embeddings=shape.tie_word_embeddings,
        dropout_rate=0.0,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=shape.decoder_start_token_id,
    )
    torch.manual_seed(seed)
    model = model_class(config).eval()
    model.generation_config = transformers.GenerationConfig(
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=shape.decoder_start_token_id, num_beams=shape.num_beams
    )
    randomize(model, seed, shape.wo_scale)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    if not shape.tie_word_embeddings:
        _untie(out_dir, shape, seed)
    return out_dir


def _untie(out_dir: Path, shape: T5Shape, seed: int) -> None:
    """An LM head of its own, as T5 v1.1's and Flan-T5's checkpoints have (transformers 5 always builds
    the model tied, and unties it on loading where the checkpoint's head differs), and their config's
    tie_word_embeddings false (which turns off the output's rescaling)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(out_dir / "model.safetensors")
    generator = torch.Generator().manual_seed(seed + 1)
    head = 1.5 * shape.d_model**-0.5 * torch.randn(tensors["shared.weight"].shape, generator=generator)
    save_file({**tensors, "lm_head.weight": head}, out_dir / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((out_dir / "config.json").read_text())
    config.pop("scale_decoder_outputs", None)
    (out_dir / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}, indent=2))


def random_sentence_t5_checkpoint(out_dir: Path, shape: T5Shape, dense_dim: int, seed: int = 0) -> Path:
    """A sentence-T5-shaped sentence-transformers directory, as sentence-t5 and GTR-T5 are saved: the T5
    encoder (T5EncoderModel's weights), mean pooling, a Dense layer without bias to dense_dim, Normalize.
    Needs sentence-transformers."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    whole = random_t5_checkpoint(Path(out_dir) / "t5", shape, seed)
    transformer = Transformer(str(whole), max_seq_length=64)
    generator = torch.Generator().manual_seed(seed + 2)
    weight = shape.d_model**-0.5 * torch.randn(dense_dim, shape.d_model, generator=generator)
    dense = Dense(shape.d_model, dense_dim, bias=False, activation_function=torch.nn.Identity(), init_weight=weight)
    modules = [transformer, Pooling(shape.d_model, pooling_mode="mean"), dense, Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(Path(out_dir) / "model"))
    return Path(out_dir) / "model"
