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
# The T5 phase's random checkpoints (model/families/t5/random_checkpoint.py T5Shape's fields): Flan-T5-small's
# shape (d_model 512, 6 heads of 64, 8 + 8 layers, gated GELU of 1,024, an LM head of its own, 32,128 tokens),
# and a small one whose residual stream outgrows float16 (6e5: Flan-T5's kind), which float16 graphs must
# keep in float32.
T5_SMALL_FLAN = {
    "d_model": 512,
    "d_kv": 64,
    "heads": 6,
    "encoder_layers": 8,
    "decoder_layers": 8,
    "d_ff": 1024,
    "vocab_size": 32128,
}
T5_TINY = {"d_model": 64, "d_kv": 16, "heads": 4, "d_ff": 128}
T5_OVERFLOWING = {**T5_TINY, "wo_scale": 3e4}


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
    t5: dict = field(default_factory=dict)  # T5Shape's fields
    t5_seed: int = 5
    speech_recordings: int = 8  # distinct espeak-ng recordings of 30-60 s, for Whisper tiny.en
    speech_calls: int = 32  # transcriptions at once, the recordings in turn (whisper_bench's 32 callers)
    # Recordings joined into the long file cut at its silences: 4 make about 200 s, many times the 30 s window
    # (the first lease's 392 s took 33 s of the lease for a rate that needs no more).
    speech_long_file: int = 4
    # Seconds the calls at once may take: those not answered by then are cancelled and counted (the phase's
    # time is known when the lease is planned); the rehearsal's only bounds a stuck run.
    speech_budget_s: float = 60.0
    api_processes: int = 8  # the doors' processes measured against one (the default on a 16-core node)

    def to_dict(self) -> dict:
        return asdict(self)


# The lease's plan (gpu_plan.py) counts 1,000 numbers each way (2,000/2,000 were exact on the first lease),
# 4,096 sentences (the rate was steady long before 8,192) and 64 Marian prompts (each decoded alone, 64 tokens:
# 100 took about 23 s a pass on the first lease).
FULL = Sizes(1000, 64, 64, 4096, 64, 16, 256, 64, 64, 256, MARIAN_BASE, t5=T5_SMALL_FLAN)
SMALL = Sizes(
    25,
    10,
    8,
    256,
    8,
    16,
    16,
    8,
    8,
    16,
    MARIAN_SMALL,
    t5=T5_TINY,
    speech_recordings=2,
    speech_calls=2,
    speech_long_file=2,
    speech_budget_s=600.0,
    api_processes=2,
)
