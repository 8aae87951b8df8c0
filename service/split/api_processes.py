"""The API processes of a split server, as the engine process keeps them: started (each its settings on
stdin, its metrics in the shared directory), started again when one dies (the document jobs it was
translating queued again for the others), and drained on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import sys

from ..core.translation.document_store import DocumentStore
from ..ops.config import ServerConfig
from ..ops.metrics_processes import MULTIPROC_ENV, process_gone
from .engine_host import EngineHost

log = logging.getLogger("attnserve.engine")

STOP_MARGIN_SECONDS = 5.0  # beyond drain_seconds, for an API process to close its ports and exit


class ApiProcesses:
    def __init__(
        self, config: ServerConfig, host: EngineHost, metrics_dir: str, stop: asyncio.Event, documents: DocumentStore
    ):
        """config: the API processes' (its ports fixed, api_processes their number); host: the link they
        reach the models by; stop: set when one dies before it ever served; documents: their shared jobs."""
        self.config, self.host, self.metrics_dir, self.stop = config, host, metrics_dir, stop
        self.documents = documents
        self.processes: list[asyncio.subprocess.Process] = []
        self.watchers: list[asyncio.Task] = []
        self.stopping = False
        self.status = 0  # 1 once one has kept dying

    async def start(self) -> None:
        for index in range(self.config.api_processes):
            self.processes.append(await self._spawn(index))
            self.watchers.append(asyncio.create_task(self._watch(index), name=f"API process {index}"))

    async def _spawn(self, index: int) -> asyncio.subprocess.Process:
        env = dict(os.environ, **{MULTIPROC_ENV: self.metrics_dir})
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "service.split.api_process", stdin=asyncio.subprocess.PIPE, env=env
        )
        process.stdin.write(pickle.dumps((self.config, self.host.path, index + 1)))  # it logs as api-1, api-2...
        await process.stdin.drain()
        process.stdin.close()
        return process

    async def _watch(self, index: int) -> None:
        while True:
            process = self.processes[index]
            status = await process.wait()
            process_gone(process.pid, self.metrics_dir)
            requeued = self.documents.requeue_interrupted(owner=process.pid)
            if requeued:
                log.warning(
                    "API process %d (pid %d): document jobs it was translating, queued again: %d",
                    index,
                    process.pid,
                    requeued,
                )
            if self.stopping:
                return
            # One that never served is broken, not unlucky: starting it over and over would hide that. The
            # server stops and says so (and its supervisor, Kubernetes, restarts it).
            if process.pid not in self.host.served:
                log.error("API process %d exited with status %d before it served: stopping the server", index, status)
                self.status = 1
                self.stop.set()
                return
            log.error("API process %d (pid %d) exited with status %d: starting another", index, process.pid, status)
            self.processes[index] = await self._spawn(index)

    def running(self) -> list[tuple[int, int]]:
        """(number from 1, pid) of each API process running now: what the metrics port reports their usage by."""
        return [(index + 1, p.pid) for index, p in enumerate(self.processes) if p.returncode is None]

    async def drain(self, seconds: float) -> None:
        """SIGTERM to each: it drains its calls (for up to `seconds`) and exits; one still running after
        that and a margin is killed."""
        self.stopping = True
        running = [p for p in self.processes if p.returncode is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        waits = [asyncio.create_task(p.wait()) for p in running]
        if waits:
            _, late = await asyncio.wait(waits, timeout=seconds + STOP_MARGIN_SECONDS)
            for process in running:
                if process.returncode is None:
                    log.error("API process (pid %d) still running after the drain: killed", process.pid)
                    process.kill()
            await asyncio.gather(*late)
        await asyncio.gather(*self.watchers, return_exceptions=True)
