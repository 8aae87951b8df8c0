"""How much the GPU check does: the full run's counts and models, and the small ones of its CPU rehearsal."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# The Marian-shaped random checkpoints (model/families/marian/random_checkpoint.py MarianShape's fields: this module
# is read on the device too, where the check imports no torch). Base-sized, as marian_bench's: d_model 512, 8 heads,
# 6 + 6 layers, a vocabulary of 32,000.
# Its pair (en -> de) lets the translation doors route to it.
MARIAN_BASE = {
    "d_model": 512,
    "heads": 8,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "d_ff": 2048,
    "activation": "swish",
    "vocab_size": 32000,
    "max_positions": 512,
    "pair": ["en", "de"],
}
MARIAN_SMALL = {"max_positions": 128, "pair": ["en", "de"]}


@dataclass(frozen=True)
class Sizes:
    numbers: int  # parity, per direction
    prompts: int  # Marian parity
    preflight_rows: int  # numbers sources decoded for 32 steps in the preflight
    embed_count: int
    embed_clients: int
    per_call: int
    generate_count: int  # sentences at the high concurrency (a quarter of them at 1)
    concurrency: int
    new_tokens: int
    moonshot_streams: int
    marian: dict = field(default_factory=dict)  # MarianShape's fields
    marian_seed: int = 0
    speech_recordings: int = 8  # distinct espeak-ng recordings of 30-60 s, for Whisper tiny.en
    speech_calls: int = 32  # transcriptions at once, the recordings in turn (whisper_bench's 32 callers)

    def to_dict(self) -> dict:
        return asdict(self)


FULL = Sizes(2000, 100, 64, 8192, 64, 16, 256, 64, 64, 256, MARIAN_BASE)
SMALL = Sizes(25, 10, 8, 256, 8, 16, 16, 8, 8, 16, MARIAN_SMALL, speech_recordings=2, speech_calls=2)
