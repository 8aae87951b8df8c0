"""Random Whisper checkpoints in Hugging Face's layout, for tests and benchmarks: no checkpoint can be
downloaded here, so transformers builds a WhisperForConditionalGeneration of the shape asked for with
random weights and saves it as it saves any, with a tokenizer.json laid out as Whisper's (byte-level, the
256 bytes as its only tokens, then Whisper's special tokens) and the generation settings Whisper's
checkpoints carry. Needs transformers (the dev extra)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

LAYER_GAIN = 3.0  # weights larger than transformers' init (std 0.02), so that the logits differ enough to test
TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>
TASK_TOKENS = ("<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>")


@dataclass(frozen=True)
class WhisperShape:
    d_model: int = 64
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 128
    n_mels: int = 80
    languages: tuple[str, ...] = ("en", "de", "fr")
    multilingual: bool = True
    max_target_positions: int = 448

    @property
    def specials(self) -> list[str]:
        """The added tokens in id order after the 256 bytes, the timestamps left implicit."""
        languages = [f"<|{code}|>" for code in self.languages]
        return ["<|endoftext|>", "<|startoftranscript|>", *languages, *TASK_TOKENS, "<|notimestamps|>"]

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.specials) + TIMESTAMPS


def whisper_tokenizer(shape: WhisperShape):
    """A byte-level tokenizer (`tokenizers`) with Whisper's special tokens after the 256 bytes."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {char: byte for byte, char in bytes_to_unicode().items()}  # token id = byte value
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in shape.specials])
    return tokenizer


def random_whisper_checkpoint(out_dir: Path, shape: WhisperShape = WhisperShape(), seed: int = 0) -> Path:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    ids = {token: 256 + i for i, token in enumerate(shape.specials)}
    end_of_text, start = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    torch.manual_seed(seed)
    config = WhisperConfig(
        vocab_size=shape.vocab_size,
        num_mel_bins=shape.n_mels,
        d_model=shape.d_model,
        encoder_attention_heads=shape.heads,
        decoder_attention_heads=shape.heads,
        encoder_layers=shape.encoder_layers,
        decoder_layers=shape.decoder_layers,
        encoder_ffn_dim=shape.d_ff,
        decoder_ffn_dim=shape.d_ff,
        max_source_positions=1500,
        max_target_positions=shape.max_target_positions,
        pad_token_id=end_of_text,
        bos_token_id=end_of_text,
        eos_token_id=end_of_text,
        decoder_start_token_id=start,
        # A few punctuation bytes never generated, as Whisper's list suppresses symbols; a blank or the end
        # not generated first.
        suppress_tokens=[ord(c) for c in "#[]{}"],
        begin_suppress_tokens=[ord(" "), end_of_text],
    )
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" in name and "encoder" in name:
                continue  # Whisper's fixed sinusoids
            if parameter.ndim > 1:
                parameter.mul_(LAYER_GAIN)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.1)
    generation = model.generation_config
    generation.is_multilingual = shape.multilingual
    generation.lang_to_id = {f"<|{code}|>": ids[f"<|{code}|>"] for code in shape.languages}
    generation.task_to_id = {"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]}
    generation.no_timestamps_token_id = ids["<|notimestamps|>"]
    generation.prev_sot_token_id = ids["<|startofprev|>"]
    generation.max_initial_timestamp_index = 50
    last_half = range(shape.decoder_layers // 2, shape.decoder_layers)
    generation.alignment_heads = [[layer, head] for layer in last_half for head in range(shape.heads)]
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    whisper_tokenizer(shape).save(str(out_dir / "tokenizer.json"))
    return out_dir
