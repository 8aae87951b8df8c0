"""Real speech of known text for the Whisper tests and benchmarks: Debian's espeak-ng speaks sentences (the
Harvard sentences, IEEE 1969, public domain), and numpy lays them out as a recording, with silences between
them and a little noise under them, written as a 16 kHz WAV file."""

from __future__ import annotations

import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

from service.core.transcription.audio_decoding import AudioLimits, decode_audio

SAMPLE_RATE = 16_000
HARVARD = (
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.",
    "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.",
    "A rod is used to catch pink salmon.",
    "The source of the huge river is the clear spring.",
    "Kick the ball straight and follow through.",
    "Help the woman get back to her feet.",
    "A pot of tea helps to pass the evening.",
    "Smoky fires lack flame and heat.",
    "The soft cushion broke the man's fall.",
    "The salt breeze came across from the sea.",
    "The girl at the booth sold fifty bonds.",
    "The small pup gnawed a hole in the sock.",
    "The fish twisted and turned on the bent hook.",
    "Press the pants and sew a button on the vest.",
    "The swan dive was far short of perfect.",
    "The beauty of the view stunned the young boy.",
    "Two blue fish swam in the tank.",
    "Her purse was full of useless trash.",
    "The colt reared and threw the tall rider.",
    "It snowed, rained, and hailed the same morning.",
    "Read verse out loud for pleasure.",
    "Hoist the load to your left shoulder.",
    "Take the winding path to reach the lake.",
    "Note closely the size of the gas tank.",
    "Wipe the grease off his dirty face.",
    "Mend the coat before you go out.",
    "The wrist was badly strained and hung limp.",
    "The stray cat gave birth to kittens.",
    "The young girl gave no clear response.",
    "The meal was cooked before the bell rang.",
    "What joy there is in living.",
)
LIMITS = AudioLimits(max_upload_bytes=1 << 30, max_audio_seconds=24 * 3600)


def spoken(text: str, voice: str = "en-us", words_per_minute: int = 160) -> np.ndarray:
    """espeak-ng's reading of `text`, float32 at 16 kHz."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spoken.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(words_per_minute), "-w", str(path), text], check=True)
        return decode_audio(path.read_bytes(), LIMITS)


def shuffled_sentences(seed: int, count: int | None = None) -> tuple[str, ...]:
    """Harvard sentences in the order `seed` draws: `count` of them, else 9 to 16 (read with their
    silences, 30-60 s)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(HARVARD))
    return tuple(HARVARD[j] for j in order[: count or int(rng.integers(9, 17))])


def recording(sentences: tuple[str, ...], seed: int = 0, noise: float = 0.003) -> np.ndarray:
    """The sentences spoken one after another, 0.2 to 1.5 s of silence before each, noise under all."""
    return timed_recording(sentences, seed, noise)[0]


def timed_recording(
    sentences: tuple[str, ...], seed: int = 0, noise: float = 0.003
) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """recording(), and each sentence's reading's (start, end) in seconds."""
    generator = np.random.default_rng(seed)
    pieces, spans, samples = [], [], 0
    for sentence in sentences:
        pieces.append(np.zeros(int(generator.uniform(0.2, 1.5) * SAMPLE_RATE), np.float32))
        pieces.append(spoken(sentence))
        samples += len(pieces[-2])
        spans.append((samples / SAMPLE_RATE, (samples + len(pieces[-1])) / SAMPLE_RATE))
        samples += len(pieces[-1])
    audio = np.concatenate(pieces)
    return (audio + noise * generator.standard_normal(len(audio))).astype(np.float32), spans


def write_wav(path: Path, audio: np.ndarray) -> Path:
    """16-bit PCM mono at 16 kHz."""
    samples = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(samples.tobytes())
    return Path(path)


def real_and_spoken(folder: Path) -> list[Path]:
    """pytest-audioeval's 27 recordings (9 languages), and a minute of espeak-ng speech with silences and
    noise (20 Harvard sentences, 68 s: three windows of timestamp seeking) written into `folder`."""
    from pytest_audioeval.samples.registry import SampleRegistry

    registry = SampleRegistry()
    samples = [Path(getattr(registry, name).audio_path) for name in sorted(registry._catalog)]
    return [*samples, write_wav(folder / "harvard.wav", recording(HARVARD[:20], seed=1))]
