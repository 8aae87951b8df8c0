"""Client churn: clients that call a server (embeddings and streamed generations) and are killed with
SIGKILL at random moments of their calls (benchmarks/churn.py reports on a server after it)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

CLIENT = """
import random, sys
from service.grpc_api.client import Client
target, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
with Client(target) as client:
    while True:
        if rng.random() < 0.5:
            client.embed(["churn " * rng.randint(1, 200)] * rng.randint(1, 32))
        else:
            for _ in client.generate_stream(str(rng.randint(0, 10**9 - 1)), ignore_eos=True, max_new_tokens=63):
                pass
"""


def churn(target: str, seconds: float, workers: int = 6, seed: int = 5) -> int:
    """Keep `workers` clients calling; kill one every 0.2-1 s. -> clients killed."""
    rng = random.Random(seed)
    killed = 0
    running: list[subprocess.Popen] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        while len(running) < workers:
            running.append(subprocess.Popen([sys.executable, "-c", CLIENT, target, str(rng.randrange(10**6))]))
        time.sleep(rng.uniform(0.2, 1.0))
        victim = running.pop(rng.randrange(len(running)))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed += 1
    for process in running:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return killed + len(running)
