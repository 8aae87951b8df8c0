"""A speech model's voice activity detector (onnx/voice_activity.onnx, Silero VAD's batched graph): a
recording's speech probability every 32 ms, a block of frames a call, the LSTM's state carried between
calls."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

FRAME = 512  # samples at 16 kHz
CONTEXT = 64  # the samples before a frame that the graph hears with it
BLOCK = 4096  # frames a call (131 s): a 4-hour recording in 110 calls, 9 MiB of input each
STATE = (1, 1, 128)  # the LSTM's hidden state, and its cell state


class VoiceActivityRunner:
    def __init__(self, session: ort.InferenceSession):
        self.session = session

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """float32 samples at 16 kHz -> one speech probability per frame of 512 (the last one zero-padded),
        as Silero's streaming graph gives them frame by frame."""
        count = -(-len(audio) // FRAME)
        frames = np.zeros((count, FRAME), np.float32)
        frames.reshape(-1)[: len(audio)] = audio
        hidden, cell = np.zeros(STATE, np.float32), np.zeros(STATE, np.float32)
        out = []
        for first in range(0, count, BLOCK):
            block = frames[first : first + BLOCK]
            context = np.zeros((len(block), CONTEXT), np.float32)  # each frame's, the last samples before it
            context[1:] = block[:-1, -CONTEXT:]
            if first:
                context[0] = frames[first - 1, -CONTEXT:]
            feeds = {"input": np.concatenate([context, block], axis=1), "h": hidden, "c": cell}
            probabilities, hidden, cell = self.session.run(None, feeds)
            out.append(probabilities.reshape(-1))
        return np.concatenate(out) if out else np.zeros(0, np.float32)
