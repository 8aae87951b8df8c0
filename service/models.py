"""The models a server serves: loaded from verified model directories, warmed up, found by name."""

from __future__ import annotations

import logging
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .batcher import BatchLimits, EmbeddingBatcher
from .errors import invalid, not_found
from .model_files import ModelFiles, open_model_dir
from .runner import EncoderRunner, SessionSettings, create_session, provider_of
from .tokenizer import TextTokenizer, pad_batch

log = logging.getLogger("attnserve.models")


@dataclass
class ServedModel:
    files: ModelFiles
    tokenizer: TextTokenizer
    provider: str
    encoder: EncoderRunner | None = None  # embedding models
    batcher: EmbeddingBatcher | None = None  # embedding models, once started
    decoder_session: object | None = None  # seq2seq models
    encoder_session: object | None = None

    @property
    def name(self) -> str:
        return self.files.name

    @property
    def task(self) -> str:
        return self.files.task

    @property
    def config(self) -> dict:
        return self.files.config

    @property
    def max_input_tokens(self) -> int:
        return self.config["max_input_tokens"]

    @property
    def normalize_by_default(self) -> bool:
        return bool(self.config.get("normalize", True))


def load_model(model_dir: Path, settings: SessionSettings) -> ServedModel:
    """Open, verify and warm up one model directory (blocking: call it in a thread)."""
    files = open_model_dir(model_dir)
    tokenizer = TextTokenizer(files.tokenizer, files.config["max_input_tokens"])
    encoder_session = create_session(files.encoder, settings)
    model = ServedModel(files, tokenizer, provider_of(encoder_session))
    if files.task == "embedding":
        model.encoder = EncoderRunner(encoder_session)
        _warm_up_encoder(model)
    else:
        model.encoder_session = encoder_session
        model.decoder_session = create_session(files.decoder, settings)
    log.info("model %s (%s) loaded from %s on %s", files.name, files.task, model_dir, model.provider)
    return model


def _warm_up_encoder(model: ServedModel) -> None:
    """First calls allocate and plan: run them before the first request does, short and longest."""
    for text, repeat in (("warm up", 1), ("warm up " * model.max_input_tokens, 2)):
        ids, mask = pad_batch([e.ids for e in model.tokenizer.encode([text] * repeat)], model.config["pad_id"])
        vectors = model.encoder.embed(ids, mask)
        if not np.isfinite(vectors).all():
            raise RuntimeError(f"model {model.name}: warm-up produced non-finite embeddings")


class ModelRegistry:
    def __init__(self, models: list[ServedModel]):
        self.models = {}
        self.defaults: dict[str, ServedModel] = {}
        for model in models:
            if model.name in self.models:
                raise ValueError(f"two model directories are both named {model.name!r}")
            self.models[model.name] = model
            self.defaults.setdefault(model.task, model)

    def get(self, name: str, task: str, rpc: str) -> ServedModel:
        """The model called `name` (empty: the default for the task), which must be of `task`."""
        if not name:
            if task not in self.defaults:
                raise not_found(f"model: no {task} model is served, so {rpc} has no default")
            return self.defaults[task]
        model = self.models.get(name)
        if model is None:
            raise not_found(f"model: {name!r} is not served here (served: {', '.join(sorted(self.models))})")
        if model.task != task:
            raise invalid(f"model: {name!r} is a {model.task} model; {rpc} needs one of task {task!r}")
        return model

    def find(self, name: str) -> ServedModel:
        """Any model by name (empty: the first one loaded)."""
        if not name:
            return next(iter(self.models.values()))
        if name not in self.models:
            raise not_found(f"model: {name!r} is not served here (served: {', '.join(sorted(self.models))})")
        return self.models[name]

    def start(self, limits: BatchLimits, executor: Executor, on_batch=None) -> None:
        """Start the batching loops (on the running event loop)."""
        for model in self.models.values():
            if model.task == "embedding":
                model.batcher = EmbeddingBatcher(
                    model.encoder.embed, model.config["pad_id"], limits, executor, model.name, on_batch,
                    make_run_options=ort.RunOptions,
                )
                model.batcher.start()

    async def stop(self, error: Exception) -> None:
        """Stop the batching loops; calls still waiting on them get `error`."""
        for model in self.models.values():
            if model.batcher:
                await model.batcher.stop(error)
