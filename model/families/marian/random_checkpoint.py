"""Random MarianMT checkpoints in Hugging Face's layout, for tests and benchmarks: no checkpoint can be
downloaded here, so transformers builds one (config.json, model.safetensors, generation_config.json) and
a small sentencepiece model is trained for it (source.spm = target.spm, vocab.json), the files an
opus-mt directory holds; or, with separate_vocabs, one for each side (vocab.json and target_vocab.json,
as large as each other, as Marian's converter makes them). Needs transformers, sentencepiece and
num2words (the dev extra)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import sentencepiece
import torch

from model.bundled.number_sentences import sentences


def train_sentencepiece(vocab_size: int, seed: int = 0) -> bytes:
    """A unigram model as Marian's: </s> = 0, <unk> = 1, no <s>; the serialized model."""
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences(3000, seed)),
        model_writer=model,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        model_type="unigram",
        character_coverage=1.0,
        eos_id=0,
        unk_id=1,
        bos_id=-1,
        pad_id=-1,
        minloglevel=2,
    )
    return model.getvalue()


@dataclass(frozen=True)
class MarianShape:
    d_model: int = 32
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 64
    activation: str = "swish"
    vocab_size: int = 0  # 0: the sentencepiece pieces + <pad>; more: filler tokens up to this size
    max_positions: int = 256
    num_beams: int = 4
    renormalize_logits: bool = False
    tied: bool = True  # False: an output layer of its own (lm_head), not the token table
    eos_bias: float = 5.0  # eos's head start in final_logits_bias
    separate_vocabs: bool = False  # target.spm and target_vocab.json of their own; untied encoder/decoder tables
    target_codes: tuple[str, ...] = ()  # several targets: their >>fra<< tokens in the vocabulary
    pair: tuple[str, ...] = ()  # tokenizer_config.json's source_lang and target_lang


def _vocabulary(spm_model: bytes, size: int, codes: tuple[str, ...] = ()) -> dict[str, int]:
    """Pieces in sentencepiece's order (so </s> = 0, <unk> = 1), target codes, fillers, and <pad> last, as
    opus-mt has it."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=spm_model)
    vocab = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
    for code in codes:
        vocab[f">>{code}<<"] = len(vocab)
    while len(vocab) < size - 1:
        vocab[f"<filler{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def _randomize(model, shape: MarianShape, seed: int, eos_id: int) -> None:
    """Weights far from transformers' init (std 0.02, near-uniform logits), so that the next token is
    clear-cut: greedy and beam choices then do not hinge on float rounding. eos gets a head start, so
    that some generations end by eos and others by length."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("shared.weight"):
                # Untied, smaller input embeddings let the source and the position count for more.
                std = (4.0 if shape.tied else 1.0) / parameter.shape[1] ** 0.5
            elif name == "lm_head.weight":
                std = 4.0 / parameter.shape[1] ** 0.5
            elif "layer_norm" in name:
                parameter.copy_(
                    (1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn(parameter.shape, generator=generator)
                )
                continue
            elif name.endswith("weight"):
                std = parameter.shape[1] ** -0.5
            else:
                std = 0.1
            parameter.copy_(std * torch.randn(parameter.shape, generator=generator))
        bias = torch.randn(model.final_logits_bias.shape, generator=generator)
        bias[0, eos_id] += shape.eos_bias
        model.final_logits_bias.copy_(bias)


def random_marian_checkpoint(out_dir: Path, shape: MarianShape = MarianShape(), seed: int = 0) -> Path:
    """A MarianMTModel with random weights and its tokenizer files in out_dir (safetensors only)."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spm_model = train_sentencepiece(300, seed)
    target_spm = train_sentencepiece(250, seed + 1000) if shape.separate_vocabs else spm_model
    codes = shape.target_codes
    size = shape.vocab_size or 1 + len(codes) + max(_piece_count(spm_model), _piece_count(target_spm))
    vocab, target_vocab = _vocabulary(spm_model, size, codes), _vocabulary(target_spm, size, codes)
    pad, eos = vocab["<pad>"], vocab["</s>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        share_encoder_decoder_embeddings=not shape.separate_vocabs,
        d_model=shape.d_model,
        encoder_layers=shape.encoder_layers,
        decoder_layers=shape.decoder_layers,
        encoder_attention_heads=shape.heads,
        decoder_attention_heads=shape.heads,
        encoder_ffn_dim=shape.d_ff,
        decoder_ffn_dim=shape.d_ff,
        max_position_embeddings=shape.max_positions,
        activation_function=shape.activation,
        scale_embedding=True,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=eos,
        forced_eos_token_id=eos,
        tie_word_embeddings=shape.tied,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    _randomize(model, shape, seed, eos)
    # As opus-mt checkpoints have it: the pad token is never generated, eos is forced at the length limit.
    model.generation_config = GenerationConfig(
        decoder_start_token_id=pad,
        pad_token_id=pad,
        eos_token_id=eos,
        forced_eos_token_id=eos,
        bad_words_ids=[[pad]],
        num_beams=shape.num_beams,
        max_length=shape.max_positions,
        renormalize_logits=shape.renormalize_logits,
    )
    model.save_pretrained(out_dir)
    (out_dir / "source.spm").write_bytes(spm_model)
    (out_dir / "target.spm").write_bytes(target_spm)
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    settings = {"separate_vocabs": True} if shape.separate_vocabs else {}
    if shape.pair:
        settings.update(source_lang=shape.pair[0], target_lang=shape.pair[1])
    if shape.separate_vocabs:
        (out_dir / "target_vocab.json").write_text(json.dumps(target_vocab, ensure_ascii=False))
    if settings:
        (out_dir / "tokenizer_config.json").write_text(json.dumps(settings))
    return out_dir


def _piece_count(spm_model: bytes) -> int:
    return sentencepiece.SentencePieceProcessor(model_proto=spm_model).get_piece_size()
