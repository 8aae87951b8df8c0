"""`attnserve serve` as a child process for the long-running scripts (churn, soak): its ports, its
memory, its metrics."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path


class ServerProcess:
    def __init__(self, *args: str, models=("build/models/minilm", "build/models/numbers")):
        command = [sys.executable, "-m", "cli", "serve", "--host", "127.0.0.1", "--port", "0",
                   "--metrics-port", "0", "--http-port", "0", "--log-format", "text", "--models", *models, *args]  # fmt: skip
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        for line in self.process.stderr:
            match = re.search(r"listening on port (\d+), metrics on (\d+)(?:, HTTP API on (\d+))?", line)
            if match:
                self.port, self.metrics_port = int(match.group(1)), int(match.group(2))
                self.http_port = int(match.group(3)) if match.group(3) else None
                break
        else:
            raise RuntimeError(f"the server did not start (exit {self.process.wait()})")
        for line in self.process.stderr:
            if "serving" in line:
                break
        # Keep reading its log (access lines included), so that the pipe never fills.
        threading.Thread(target=lambda: [None for _ in self.process.stderr], daemon=True).start()
        self.target = f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    def main_thread_cpu_seconds(self) -> float:
        """CPU time of the server's main thread: its event loop (gRPC, validation, tokenizing short texts,
        batching, logging), not the model threads."""
        fields = Path(f"/proc/{self.pid}/task/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def open_fds(self) -> int:
        return len(list(Path(f"/proc/{self.pid}/fd").iterdir()))

    def metric(self, name: str, **labels) -> float:
        """The sum of a metric's samples matching the labels, from /metrics."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def ready(self) -> bool:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=2).status == 200
        except OSError:
            return False

    def stop(self, timeout: float = 60) -> int:
        self.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = self.process.wait(timeout)
        self.stop_seconds = time.monotonic() - started
        return code
