"""Random multilingual checkpoints in Hugging Face's layout, for tests and benchmarks: no checkpoint can be
downloaded here, so transformers builds an M2M100, NLLB-200, mBART-50 or mBART-25 model with random weights
and its own tokenizer class writes the tokenizer files (M2M100: sentencepiece.bpe.model and vocab.json;
NLLB and mBART: tokenizer.json), over a small vocabulary trained on the spot on numbers in four
languages. Needs transformers, sentencepiece and num2words (the dev extra)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import sentencepiece
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from model.bundled.number_sentences import sentences

FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # ids 0-3 in every fairseq vocabulary
MADEUP_WORDS = 8
EMBEDDING_STD, LAYER_GAIN = 0.5, 3.0  # M2M100's vocabulary ends in 8 unused tokens after its language codes


@dataclass(frozen=True)
class MultilingualShape:
    family: str  # "m2m100", "nllb", "mbart50" or "mbart25"
    d_model: int = 32
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 64
    activation: str = "relu"
    scale_embedding: bool = True
    max_positions: int = 256
    pieces: int = 300  # the trained vocabulary's size
    vocab_size: int = 0  # 0: what the tokenizer needs; more: filler tokens up to this size (M2M100)
    legacy_behaviour: bool = False  # NLLB: the source's code after its </s>
    num_beams: int = 1


def _texts(seed: int) -> list[str]:
    return sentences(3000, seed)


def _unigram(shape: MultilingualShape, seed: int) -> bytes:
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(_texts(seed)),
        model_writer=model,
        vocab_size=shape.pieces,
        hard_vocab_limit=False,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
    )
    return model.getvalue()


def _m2m100_tokenizer(out_dir: Path, shape: MultilingualShape, seed: int):
    from transformers import M2M100Tokenizer
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    spm = _unigram(shape, seed)
    processor = sentencepiece.SentencePieceProcessor(model_proto=spm)
    vocab = {token: i for i, token in enumerate(FAIRSEQ_SPECIALS)}
    for i in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(i), len(vocab))
    fillers = shape.vocab_size - len(FAIRSEQ_LANGUAGE_CODES["m2m100"]) - MADEUP_WORDS
    while len(vocab) < fillers:
        vocab[f"<filler{len(vocab)}>"] = len(vocab)
    (out_dir / "sentencepiece.bpe.model").write_bytes(spm)
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    tokenizer = M2M100Tokenizer(out_dir / "vocab.json", out_dir / "sentencepiece.bpe.model", src_lang="en")
    return tokenizer, len(vocab) + len(FAIRSEQ_LANGUAGE_CODES["m2m100"]) + MADEUP_WORDS


def _nllb_tokenizer(shape: MultilingualShape, seed: int):
    """BPE over Metaspace pieces, as NLLB's converted sentencepiece model is."""
    from transformers import NllbTokenizer

    trained = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=shape.pieces, special_tokens=list(FAIRSEQ_SPECIALS), show_progress=False)
    trained.train_from_iterator(_texts(seed), trainer)
    bpe = json.loads(trained.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in bpe["merges"]]
    tokenizer = NllbTokenizer(
        vocab=bpe["vocab"], merges=merges, src_lang="eng_Latn", legacy_behaviour=shape.legacy_behaviour
    )
    return tokenizer, len(tokenizer)


def _mbart_tokenizer(shape: MultilingualShape, seed: int):
    """mBART-50's tokenizer (MBart50Tokenizer: `[code] text </s>`) or mBART-25's (MBartTokenizer: `text </s>
    [code]`) over a unigram vocabulary."""
    from transformers import MBart50Tokenizer, MBartTokenizer

    processor = sentencepiece.SentencePieceProcessor(model_proto=_unigram(shape, seed))
    pieces = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
    tokenizer = (MBart50Tokenizer if shape.family == "mbart50" else MBartTokenizer)(vocab=pieces, src_lang="en_XX")
    return tokenizer, len(tokenizer)


def randomize(model, seed: int) -> None:
    """Weights far from transformers' init (std 0.02, near-uniform logits), so that the next token is
    clear-cut and greedy and beam choices do not hinge on float rounding."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name or "layernorm" in name:
                centre = 1.0 if name.endswith("weight") else 0.0
                parameter.copy_(centre + 0.1 * torch.randn(parameter.shape, generator=generator))
            elif parameter.dim() == 2:
                # The layers outweigh the token's own embedding: else, with the output layer tied to the
                # token table, every step's argmax is the token it read.
                std = (EMBEDDING_STD if name.endswith("shared.weight") else LAYER_GAIN) / parameter.shape[1] ** 0.5
                parameter.copy_(std * torch.randn(parameter.shape, generator=generator))
            else:
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))


def stack_config(shape) -> dict:
    """transformers' config fields of a BART-layout shape's two stacks of the same widths, fairseq's special
    ids (pad 1, bos 0, eos 2, the decoder starting from eos, eos forced last) and no dropout."""
    return dict(
        d_model=shape.d_model,
        encoder_layers=shape.encoder_layers,
        decoder_layers=shape.decoder_layers,
        encoder_attention_heads=shape.heads,
        decoder_attention_heads=shape.heads,
        encoder_ffn_dim=shape.d_ff,
        decoder_ffn_dim=shape.d_ff,
        activation_function=shape.activation,
        scale_embedding=shape.scale_embedding,
        max_position_embeddings=shape.max_positions,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=2,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )


def random_multilingual_checkpoint(out_dir: Path, shape: MultilingualShape, seed: int = 0) -> Path:
    """A multilingual model with random weights and its tokenizer files in out_dir (safetensors only)."""
    import transformers

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if shape.family == "m2m100":
        tokenizer, vocab_size = _m2m100_tokenizer(out_dir, shape, seed)
    elif shape.family == "nllb":
        tokenizer, vocab_size = _nllb_tokenizer(shape, seed)
    elif shape.family in ("mbart50", "mbart25"):
        tokenizer, vocab_size = _mbart_tokenizer(shape, seed)
    else:
        raise ValueError(f"family {shape.family!r}: m2m100, nllb, mbart50 or mbart25")
    mbart = shape.family in ("mbart50", "mbart25")
    config_class = transformers.MBartConfig if mbart else transformers.M2M100Config
    config = config_class(
        vocab_size=max(vocab_size, shape.vocab_size), **stack_config(shape), num_beams=shape.num_beams
    )
    torch.manual_seed(seed)
    model_class = transformers.MBartForConditionalGeneration if mbart else transformers.M2M100ForConditionalGeneration
    model = model_class(config).eval()
    randomize(model, seed)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir
