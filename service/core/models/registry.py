"""The served models by name, with one default per task, and what a listing of them says (core/info.py)."""

from __future__ import annotations

from ...errors import NotFound, invalid
from ..info import ModelInfo
from .served_models import ServedCrossEncoder, ServedEmbeddingModel, ServedModel


class ModelRegistry:
    def __init__(self, models: list[ServedModel]):
        self.models: dict[str, ServedModel] = {}
        self.defaults: dict[str, ServedModel] = {}  # the first model of each task
        for model in models:
            if model.name in self.models:
                raise ValueError(f"two model directories are both named {model.name!r}")
            self.models[model.name] = model
            self.defaults.setdefault(model.task, model)

    def get(self, name: str, task: str, rpc: str) -> ServedModel:
        """The model called `name` (empty: the default for the task), which must be of `task`."""
        if not name:
            if task not in self.defaults:
                raise NotFound(f"model: no {task} model is served, so {rpc} has no default", "model")
            return self.defaults[task]
        model = self.find(name)
        if model.task != task:
            article = "an" if model.task[0] in "aeiou" else "a"
            raise invalid("model", f"{name!r} is {article} {model.task} model; {rpc} needs one of task {task!r}")
        return model

    def find(self, name: str) -> ServedModel:
        """Any model by name (empty: the first one loaded)."""
        if not name:
            return next(iter(self.models.values()))
        if name not in self.models:
            served = ", ".join(sorted(self.models))
            raise NotFound(f"model: {name!r} is not served here (served: {served})", "model")
        return self.models[name]

    def infos(self) -> list[ModelInfo]:
        return [self.info(m) for m in self.models.values()]

    def info(self, m: ServedModel) -> ModelInfo:
        languages = m.languages
        return ModelInfo(
            m.name,
            m.task,
            m.dimensions,
            m.max_input_tokens,
            m.provider,
            m.opset,
            self.defaults.get(m.task) is m,
            languages=languages.codes if languages else (),
            needs_source_language=bool(languages and languages.needs_source),
            needs_target_language=bool(languages and languages.target != "none"),
            language_pair=m.language_pair,
            prompt_names=tuple(m.prompts) if isinstance(m, ServedEmbeddingModel) else (),
            default_prompt_name=(m.default_prompt or "") if isinstance(m, ServedEmbeddingModel) else "",
            labels=m.labels if isinstance(m, ServedCrossEncoder) else (),
            outputs=m.outputs if m.task == "embedding" else (),
            pooling=m.pooling if isinstance(m, ServedEmbeddingModel) else "",
            precision=m.precision,
            vocab_size=m.architecture.vocab_size,
            max_new_tokens=m.limits.max_new_tokens if m.task == "seq2seq" else 0,
            token_offsets=hasattr(m.tokenizer, "spans"),
        )

    @property
    def healthy(self) -> bool:
        return all(m.health.healthy for m in self.models.values())

    async def stop(self, error: Exception) -> None:
        """Stop the batching and scheduling loops; calls still waiting on them get `error`."""
        for model in self.models.values():
            await model.stop(error)
