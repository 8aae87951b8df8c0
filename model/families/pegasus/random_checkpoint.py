"""Random Pegasus checkpoints in Hugging Face's layout, for tests: no checkpoint can be downloaded here, so
transformers builds a PegasusForConditionalGeneration with random weights, and its own PegasusTokenizer
writes tokenizer.json over a unigram vocabulary trained on the spot on number sentences, laid out as
Pegasus's is (pad 0, eos 1, the pretraining's mask and unk_2..unk_102 tokens, then unk and the pieces).
Needs transformers and sentencepiece (the dev extra)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sentencepiece
import torch

from model.families.multilingual.random_checkpoint import MultilingualShape, _unigram, randomize, stack_config

OFFSET = 103  # Pegasus's special tokens before its unk: pad, eos, <mask_1>, <mask_2>, <unk_2>..<unk_102>


@dataclass(frozen=True)
class PegasusShape:
    d_model: int = 32
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 64
    activation: str = "relu"  # pegasus-large's
    scale_embedding: bool = True
    max_positions: int = 256
    pieces: int = 300
    num_beams: int = 1
    length_penalty: float = 1.0


def pegasus_tokenizer(shape: PegasusShape, seed: int):
    from transformers import PegasusTokenizer

    trained = _unigram(MultilingualShape("pegasus", pieces=shape.pieces), seed)
    processor = sentencepiece.SentencePieceProcessor(model_proto=trained)
    pieces = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
    specials = [("<pad>", 0.0), ("</s>", 0.0), ("<mask_1>", 0.0), ("<mask_2>", 0.0)]
    specials += [(f"<unk_{i}>", 0.0) for i in range(2, OFFSET)] + [("<unk>", 0.0)]
    vocab = specials + [(piece, score) for piece, score in pieces if piece not in ("<unk>", "<s>", "</s>")]
    return PegasusTokenizer(vocab=vocab)


def random_pegasus_checkpoint(out_dir: Path, shape: PegasusShape, seed: int = 0) -> Path:
    """A Pegasus model with random weights (its logits bias drawn too, so that a lost bias shows) and its
    tokenizer files in out_dir (safetensors only)."""
    import transformers

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = pegasus_tokenizer(shape, seed)
    # BART's layout's fields, with Pegasus's special ids: pad 0 (the decoder's start), eos 1
    ids = dict(pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1)
    config = transformers.PegasusConfig(vocab_size=len(tokenizer), **{**stack_config(shape), **ids})
    torch.manual_seed(seed)
    model = transformers.PegasusForConditionalGeneration(config).eval()
    model.generation_config = transformers.GenerationConfig(
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        forced_eos_token_id=1,
        num_beams=shape.num_beams,
        length_penalty=shape.length_penalty,
    )
    tables = {name: p.detach().clone() for name, p in model.named_parameters() if "embed_positions" in name}
    randomize(model, seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():  # the sinusoids stay: they are not learned
            if name in tables:
                parameter.copy_(tables[name])
        model.final_logits_bias.copy_(
            torch.randn(model.final_logits_bias.shape, generator=torch.Generator().manual_seed(seed))
        )
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.model_max_length = shape.max_positions
    tokenizer.save_pretrained(out_dir)
    return out_dir
