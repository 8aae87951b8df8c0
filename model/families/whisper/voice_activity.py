"""Silero VAD's batched ("sequence") graph, copied from the silero-vad package into a speech model's
directory at export (onnx/voice_activity.onnx): the server cuts long recordings at their silences with it
(service/core/transcription/speech_chunks.py) without importing the package, which imports torch."""

from __future__ import annotations

import shutil
from importlib.metadata import distribution
from pathlib import Path

from modeldir.files import VOICE_ACTIVITY_FILE

PACKAGE = "silero-vad"
# Frames of 64 samples of context and 512 of audio in, one speech probability each out, the LSTM's state
# carried in and out: one call per block of frames, the same probabilities as the streaming graph's.
GRAPH = "silero_vad/data/silero_vad_16k_sequence.onnx"


def copy_voice_activity(model_dir: Path) -> dict:
    """The graph copied into the model directory: -> its manifest entry (its file and where it came from)."""
    package = distribution(PACKAGE)
    source = Path(package.locate_file(GRAPH))
    shutil.copyfile(source, model_dir / VOICE_ACTIVITY_FILE)
    return {"file": VOICE_ACTIVITY_FILE, "source": f"{PACKAGE} {package.version} ({GRAPH})"}
