"""Peer servers as child processes, from their own virtual environment (`make peers`): infinity-emb with its
ONNX Runtime engine on the model folders benchmarks/peer_models.py wrote."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

PEERS_BIN = Path(".venv-peers/bin")
PEER_MODELS = Path("build/peers")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peers_installed() -> bool:
    return (PEERS_BIN / "infinity_emb").exists() and (PEER_MODELS / "minilm-int8").is_dir()


class InfinityServer:
    """`infinity_emb v2` on MiniLM (precision fp32 or int8), batches of up to --batch-size, on the CPU."""

    def __init__(self, precision: str, batch_size: int = 32, start_timeout: float = 600, folder: Path | None = None):
        """folder: another model folder of peer_models.py's (a cross-encoder's), instead of MiniLM's."""
        self.port = free_port()
        # Run in the model's folder and name it ".": see peer_models.py for why.
        command = [
            str(PEERS_BIN.resolve() / "infinity_emb"),
            "v2",
            "--model-id",
            ".",
            "--engine",
            "optimum",
            "--device",
            "cpu",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--batch-size",
            str(batch_size),
        ]
        folder = folder or PEER_MODELS / f"minilm-{precision}"
        # Its optimized graph is cached under the hub cache by model name ("."): one cache per folder. No
        # telemetry and no hub: this machine reaches neither.
        env = {
            **os.environ,
            "HF_HUB_CACHE": str((folder / "hub-cache").resolve()),
            "HF_HUB_OFFLINE": "1",
            "INFINITY_ANONYMOUS_USAGE_STATS": "0",
            "DO_NOT_TRACK": "1",
        }
        self.process = subprocess.Popen(
            command, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + start_timeout
        while not self.healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"infinity_emb exited with {self.process.returncode}: {' '.join(command)}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"infinity_emb did not answer /health in {start_timeout:.0f} s")
            time.sleep(0.5)

    def healthy(self) -> bool:
        try:
            return urllib.request.urlopen(f"{self.url}/health", timeout=2).status == 200
        except OSError:
            return False

    def stop(self, timeout: float = 60) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
