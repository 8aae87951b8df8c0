"""Random BART checkpoints in Hugging Face's layout, for tests and benchmarks: no checkpoint can be
downloaded here, so transformers builds a BartForConditionalGeneration with random weights, and its own
BartTokenizer writes tokenizer.json: byte-level BPE (GPT-2's, as every BART checkpoint's) trained on the
spot on the bundled number sentences. Needs transformers (the dev extra)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from model.bundled.number_sentences import sentences
from model.families.multilingual.random_checkpoint import FAIRSEQ_SPECIALS, randomize, stack_config


@dataclass(frozen=True)
class BartShape:
    d_model: int = 32
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 64
    activation: str = "gelu"
    scale_embedding: bool = False
    max_positions: int = 256
    pieces: int = 400  # the trained vocabulary's size, the bytes' 256 included
    vocab_size: int = 0  # 0: what the tokenizer needs; more: the token table's rows (50,265 in BART's)
    # The checkpoint's generation settings (bart-large-cnn's: 4 beams, length penalty 2.0, early stopping,
    # no 3-gram twice, at least 56 decoder inputs)
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool = False
    no_repeat_ngram_size: int = 0
    min_length: int = 0


def bart_tokenizer(pieces: int, seed: int):
    """transformers' BartTokenizer over a byte-level BPE vocabulary trained on number sentences."""
    from transformers import BartTokenizer

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=pieces,
        special_tokens=list(FAIRSEQ_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    trained.train_from_iterator(sentences(3000, seed), trainer)
    bpe = json.loads(trained.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in bpe["merges"]]
    return BartTokenizer(vocab=bpe["vocab"], merges=merges)


def random_bart_checkpoint(out_dir: Path, shape: BartShape, seed: int = 0) -> Path:
    """A BART model with random weights (its logits bias drawn too, so that a lost bias shows) and its
    tokenizer files in out_dir (safetensors only); bos (0) forced first, eos forced last, as bart-large's
    configs say."""
    import transformers

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = bart_tokenizer(shape.pieces, seed)
    vocab_size = max(len(tokenizer), shape.vocab_size)
    config = transformers.BartConfig(vocab_size=vocab_size, forced_bos_token_id=0, **stack_config(shape))
    torch.manual_seed(seed)
    model = transformers.BartForConditionalGeneration(config).eval()
    # generation_config.json, where transformers keeps these (the config no longer does)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=0,
        pad_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_bos_token_id=0,
        forced_eos_token_id=2,
        num_beams=shape.num_beams,
        length_penalty=shape.length_penalty,
        early_stopping=shape.early_stopping,
        no_repeat_ngram_size=shape.no_repeat_ngram_size,
        min_length=shape.min_length,
    )
    randomize(model, seed)
    with torch.no_grad():
        model.final_logits_bias.copy_(
            torch.randn(model.final_logits_bias.shape, generator=torch.Generator().manual_seed(seed))
        )
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


NLI_LABELS = ("contradiction", "neutral", "entailment")  # bart-large-mnli's id2label


def random_bart_classifier(out_dir: Path, shape: BartShape, labels=NLI_LABELS, seed: int = 0) -> Path:
    """A BartForSequenceClassification with random weights and `labels` (an NLI model's by default, as
    bart-large-mnli's), with its tokenizer files, in out_dir (safetensors only)."""
    import transformers

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = bart_tokenizer(shape.pieces, seed)
    config = transformers.BartConfig(
        vocab_size=max(len(tokenizer), shape.vocab_size),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
        **stack_config(shape),
    )
    torch.manual_seed(seed)
    model = transformers.BartForSequenceClassification(config).eval()
    randomize(model, seed)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.model_max_length = shape.max_positions  # as bart-large-mnli's: the pipeline cuts premises there
    tokenizer.save_pretrained(out_dir)
    return out_dir
