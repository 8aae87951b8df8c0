"""`attnserve serve` as a child process for the long-running scripts (churn, soak): its ports, its
memory, its metrics."""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

# The start line: "listening: gRPC on [::]:50051 (IPv4 and IPv6), HTTP API on ..., metrics on ..."
PORTS = re.compile(r"gRPC on \S+:(\d+)(?: \(IPv4 and IPv6\))?(?:, HTTP API on \S+:(\d+))?.*metrics on \S+:(\d+)")
# A split server's start line (--api-processes) says how many API processes share the ports.
SPLIT = re.compile(r"\((\d+) API processes;")
LOG_FILE_BYTES = 8 << 20  # a log file kept is cut here (a device call brings back files of 16 MiB at most)
LOCAL_PORTS = ("--host", "127.0.0.1", "--port", "0", "--metrics-port", "0", "--http-port", "0")


class ServerProcess:
    """The server started with `listen` (by default on 127.0.0.1, ports picked free; () for the defaults a
    user gets), by `launcher` (the CLI), its log kept (the last 200 lines; all of it in log_file). A server
    that exits before it serves raises with its last log lines."""

    def __init__(
        self,
        *args: str,
        models=("build/models/minilm", "build/models/numbers"),
        listen=LOCAL_PORTS,
        launcher=(sys.executable, "-m", "cli"),
        log_file: Path | None = None,
        env: dict | None = None,
        cwd: Path | None = None,
        command: list[str] | None = None,
    ):
        """cwd: the checkout whose code runs (a benchmark's "before"); by default this one. command: the
        whole command line instead, for a server started as a manifest starts it (it logs as text)."""
        command = command or [*launcher, "serve", *listen, "--log-format", "text", "--models", *models, *args]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
        self.log: collections.deque[str] = collections.deque(maxlen=200)  # its last lines, for failures
        self.api_processes = 1
        self.log_file = open(log_file, "w") if log_file else None  # its whole log, up to LOG_FILE_BYTES
        for line in self.process.stderr:
            self.keep(line)
            if match := PORTS.search(line):
                self.port, self.metrics_port = int(match.group(1)), int(match.group(3))
                self.http_port = int(match.group(2)) if match.group(2) else None
            if match := SPLIT.search(line):
                self.api_processes = int(match.group(1))
            if "serving" in line and hasattr(self, "port"):
                break
        else:
            raise RuntimeError(f"the server did not start (exit {self.process.wait()}):\n{''.join(self.log)}")
        # Keep reading its log (access lines included), so that the pipe never fills.
        self.reader = threading.Thread(target=lambda: [self.keep(line) for line in self.process.stderr], daemon=True)
        self.reader.start()
        self.target = f"127.0.0.1:{self.port}"
        if self.api_processes > 1:  # one API process serving is not all: the engine's /readyz says when all are
            self.wait_ready()

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server is not ready (exit {self.process.poll()}):\n{''.join(self.log)}")
            time.sleep(0.02)

    def keep(self, line: str) -> None:
        self.log.append(line)
        if self.log_file and self.log_file.tell() < LOG_FILE_BYTES:
            self.log_file.write(line)
            self.log_file.flush()

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    def main_thread_cpu_seconds(self) -> float:
        """CPU time of the server's main thread: its event loop (gRPC, validation, tokenizing short texts,
        batching, logging), not the model threads."""
        return _cpu_seconds(Path(f"/proc/{self.pid}/task/{self.pid}/stat"))

    def cpu_seconds(self) -> float:
        """CPU time of the whole server (user + system, every thread), its API processes' included when it
        runs them (--api-processes)."""
        return _cpu_seconds(Path(f"/proc/{self.pid}/stat")) + self.children_cpu_seconds()

    def children_cpu_seconds(self) -> float:
        """CPU time of its child processes (a split server's API processes), summed."""
        return sum(_cpu_seconds(Path(f"/proc/{pid}/stat")) for pid in self.children())

    def children(self) -> list[int]:
        """The pids of the server's child processes (a split server's API processes)."""
        pids = []
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                pids += [int(pid) for pid in (task / "children").read_text().split()]
            except FileNotFoundError:  # a thread that ended meanwhile
                pass
        return pids

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
        self.reader.join(10)  # its last lines
        if self.log_file:
            self.log_file.close()
        return code

    def output(self) -> str:
        """Its log so far (the last 200 lines)."""
        return "".join(self.log)


def _cpu_seconds(stat: Path) -> float:
    """utime + stime of a /proc stat file, in seconds; 0 for a process gone meanwhile."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
