"""The engine process's side of the link: its loaded models' batchers, schedulers and side graphs served
to the API processes over a Unix socket, each call a task that a cancel (or its process's going) stops,
and each model's health pushed to them when it changes."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from ..core.models.served_models import ServedEmbeddingModel, ServedModel, ServedSpeechModel
from ..core.serving import ServingCore
from ..errors import ServiceError
from .remote_models import REMOTE, RunnerFacts
from .wire import END, ERROR, EVENT, HEALTH, OK, Outbox, portable, read_frame

log = logging.getLogger("attnserve.engine")


def picture(model: ServedModel) -> ServedModel:
    """The model as an API process holds it: its tokenizer and settings, none of its sessions or loops (the
    parts it calls through the link are marked REMOTE)."""
    engine_parts = dict(health=None, metrics=None, attention=REMOTE if model.attention else None)
    if isinstance(model, ServedEmbeddingModel):
        engine_parts.update(runner=RunnerFacts(model.runner.extra), batcher=REMOTE)
    else:
        engine_parts.update(runner=None, scheduler=REMOTE)
    if isinstance(model, ServedSpeechModel):
        engine_parts.update(
            word_alignment=REMOTE if model.word_alignment else None,
            voice_activity=REMOTE if model.voice_activity else None,
        )
    return dataclasses.replace(model, **engine_parts)


class EngineHost:
    """Listens on `path` from the start; a call waits until the core has loaded its models."""

    def __init__(self, core: ServingCore, path: str):
        self.core, self.path = core, path
        self.loaded = asyncio.Event()
        self.server: asyncio.AbstractServer | None = None
        self.outboxes: dict[asyncio.StreamWriter, Outbox] = {}  # to each API process
        self.doors_ready: dict[asyncio.StreamWriter, bool] = {}  # each API process's readiness, as it said
        self.served: set[int] = set()  # the pids of the API processes that have served

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._serve, path=self.path)

    def models_loaded(self) -> None:
        self.loaded.set()

    def doors_serving(self) -> int:
        """API processes connected that say they serve."""
        return sum(self.doors_ready.values())

    def health_changed(self) -> None:
        """Tell every API process each model's health (on the event loop)."""
        for model in self.core.registry.models.values():
            message = (0, HEALTH, (model.name, model.health.healthy, model.health.failures))
            for outbox in self.outboxes.values():
                outbox.put(message)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in self.outboxes:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        calls: dict[int, asyncio.Task] = {}
        outbox = self.outboxes[writer] = Outbox(writer)
        try:
            while True:
                for call_id, kind, args in await read_frame(reader):
                    if kind == "cancel":
                        if args in calls:
                            calls[args].cancel()
                        continue
                    if kind == "ready":
                        pid, self.doors_ready[writer] = args
                        if self.doors_ready[writer]:
                            self.served.add(pid)
                        continue
                    task = asyncio.create_task(self._answer(outbox, call_id, kind, args))
                    calls[call_id] = task
                    task.add_done_callback(lambda _, call_id=call_id: calls.pop(call_id, None))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the API process has gone
        finally:
            self.outboxes.pop(writer, None)
            self.doors_ready.pop(writer, None)
            for task in list(calls.values()):  # what it asked for leaves the engine: no caller is left
                task.cancel()
            writer.close()

    async def _answer(self, outbox: Outbox, call_id: int, kind: str, args: tuple) -> None:
        try:
            if kind != "is_loaded":
                await self.loaded.wait()
            if kind == "generate":
                name, prompt, params, features = args
                async for event in self._model(name).scheduler.generate(prompt, params, features):
                    outbox.put((call_id, EVENT, event))
                    await outbox.writer.drain()  # a slow API process: the scheduler merges its tokens meanwhile
                reply = (call_id, END, params.rules)  # what they read (Whisper's no-speech probability) goes back
            else:
                reply = (call_id, OK, await getattr(self, f"_{kind}")(*args))
        except (asyncio.CancelledError, ConnectionError):
            return  # cancelled by the API process, or it has gone: nobody waits for an answer
        except Exception as error:
            if not isinstance(error, ServiceError):
                log.exception("engine call %s failed", kind)
            reply = (call_id, ERROR, portable(error))
        outbox.put(reply)

    def _model(self, name: str) -> ServedModel:
        return self.core.registry.models[name]

    async def _is_loaded(self) -> bool:
        return self.loaded.is_set()

    async def _models(self) -> list[tuple[ServedModel, tuple[bool, int]]]:
        """Each model's picture, and its health now."""
        models = self.core.registry.models.values()
        return [(picture(m), (m.health.healthy, m.health.failures)) for m in models]

    async def _embed(self, name: str, sequences: list, extra: tuple, attended: list | None):
        return await self._model(name).batcher.submit(sequences, extra, attended)

    async def _side(self, name: str, graph: str, method: str, args: tuple, kwargs: dict):
        return await getattr(getattr(self._model(name), graph), method)(*args, **kwargs)

    async def _voice_activity(self, name: str, audio):
        executor = self.core.tokenize_executor  # a CPU session of one thread, as the single process runs it
        return await asyncio.get_running_loop().run_in_executor(
            executor, self._model(name).voice_activity.probabilities, audio
        )

    async def _probe(self, name: str) -> None:
        model = self._model(name)
        await model.probe(self.core.model_executor)
        model.health.succeeded()

    async def _holding(self, name: str) -> dict[str, int]:
        return self._model(name).holding()
