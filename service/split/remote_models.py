"""The served models as an API process holds them: each the engine's picture of it (tokenizer, settings),
its batcher, scheduler and side graphs standing in for the engine's over the link, its health as the
engine last said."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from ..core.models.health import ModelHealth
from ..core.models.registry import ModelRegistry
from ..core.models.served_models import ServedEmbeddingModel, ServedModel, ServedSpeechModel
from ..engine.sequence import GenerationParams
from ..engine.text_stream import Detokenizer
from ..ops.metrics import Metrics
from .engine_link import EngineLink

REMOTE = "remote"  # in a picture: a part the engine runs, called through the link


@dataclass(frozen=True)
class RunnerFacts:
    """What the core reads of an embedding model's runner: the extra outputs its graph gives."""

    extra: tuple[str, ...]


class RemoteBatcher:
    def __init__(self, link: EngineLink, name: str):
        self.link, self.name = link, name

    async def submit(self, sequences: list[list[int]], extra: tuple[str, ...] = (), attended=None):
        return await self.link.call("embed", self.name, sequences, extra, attended)


class RemoteScheduler:
    """The engine's scheduler; the text of its ids decoded here, where the source was tokenized."""

    def __init__(self, link: EngineLink, name: str, detokenizer: Detokenizer):
        self.link, self.name, self.detokenizer = link, name, detokenizer

    def generate(self, prompt: list[int], params: GenerationParams, features: np.ndarray | None = None):
        if params.stop or params.beams:  # stop sequences are looked for in the text; a search ranks its texts
            return self._stream(prompt, params, features)
        return self._decoded(prompt, params, features)

    def _stream(self, prompt: list[int], params: GenerationParams, features: np.ndarray | None):
        """The engine's events; the sequence's logit rules (a copy ran there) given what they read there."""
        on_end = functools.partial(_read_back, params.rules) if params.rules is not None else None
        return self.link.stream("generate", self.name, prompt, params, features, on_end=on_end)

    async def _decoded(self, prompt: list[int], params: GenerationParams, features: np.ndarray | None):
        """The events of ids alone, with their text: token by token as the engine's stream decoder gives it
        (streamed), or the whole text at once (one event at the end)."""
        ids_only = dataclasses.replace(params, text=False)
        decoder = self.detokenizer.stream_decoder() if params.stream else None
        async for event in self._stream(prompt, ids_only, features):
            if decoder is None:
                text = self.detokenizer.decode(event.token_ids)
            else:
                text = "".join([decoder.step(token) for token in event.token_ids])
                text += decoder.flush() if event.finish_reason is not None else ""
            yield dataclasses.replace(event, text=text)


def _read_back(rules, ran) -> None:
    """The caller's logit rules take the state of their copy that ran in the engine (what they read there,
    such as Whisper's no-speech probability, which the caller ranks a window's results by)."""
    if ran is not None:
        vars(rules).update(vars(ran))


class RemoteSideGraph:
    """A side graph's calls (submit, gathered_run), run by the engine."""

    def __init__(self, link: EngineLink, name: str, graph: str):
        self.link, self.name, self.graph = link, name, graph

    def submit(self, *args, positions: int):
        return asyncio.ensure_future(
            self.link.call("side", self.name, self.graph, "submit", args, {"positions": positions})
        )

    async def gathered_run(self, item, positions: int, max_batch: int = 64):
        kwargs = {"positions": positions, "max_batch": max_batch}
        return await self.link.call("side", self.name, self.graph, "gathered_run", (item,), kwargs)


class RemoteVoiceActivity:
    """The voice activity detector's probabilities, asked of the engine from a worker thread (as the core
    calls it: off the event loop)."""

    def __init__(self, link: EngineLink, name: str, loop: asyncio.AbstractEventLoop):
        self.link, self.name, self.loop = link, name, loop

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        asked = self.link.call("voice_activity", self.name, audio)
        return asyncio.run_coroutine_threadsafe(asked, self.loop).result()


async def _probe(link: EngineLink, name: str, executor: Executor) -> None:
    await link.call("probe", name)


def remote_model(picture: ServedModel, link: EngineLink, metrics: Metrics, on_health_change) -> ServedModel:
    """The picture with the link's stand-ins for the engine's parts; its metrics count what this process
    does (the prompts it tokenized, the audio it heard)."""
    name = picture.name
    side = dict(metrics=metrics.for_model(name, picture.task), health=ModelHealth(1, on_health_change))
    if picture.attention == REMOTE:
        side["attention"] = RemoteSideGraph(link, name, "attention")
    if isinstance(picture, ServedEmbeddingModel):
        side["batcher"] = RemoteBatcher(link, name)
    else:
        side["scheduler"] = RemoteScheduler(link, name, picture.tokenizer)
    if isinstance(picture, ServedSpeechModel):
        if picture.word_alignment == REMOTE:
            side["word_alignment"] = RemoteSideGraph(link, name, "word_alignment")
        if picture.voice_activity == REMOTE:
            side["voice_activity"] = RemoteVoiceActivity(link, name, asyncio.get_running_loop())
    model = dataclasses.replace(picture, **side)
    # The engine runs the loops, warms and probes: here nothing starts, and a probe asks the engine's.
    model.start = lambda: None
    model.probe = lambda executor: _probe(link, name, executor)
    return model


class RemoteRegistry(ModelRegistry):
    """The engine's models; each one's health as the engine last pushed it."""

    def __init__(self, models: list[ServedModel], link: EngineLink):
        super().__init__(models)
        self.link = link

    def health_pushed(self, name: str, healthy: bool, failures: int) -> None:
        health = self.models[name].health
        health.failures = failures
        if health.healthy != healthy:
            health.healthy = healthy
            health.on_change()

    @property
    def healthy(self) -> bool:
        return not self.link.closed.is_set() and super().healthy

    async def stop(self, error: Exception) -> None:
        """The engine's loops are the engine's to stop: the calls waiting here are failed by the link."""
