"""The tokenize capability, and the tokenization every other capability does: in threads of their own,
off the event loop, so that the loop keeps accepting while long texts are cut into tokens."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import dataclass

from modeldir.tokenizer import Encoded

from ..ops.call_record import CallRecord
from .languages import NO_LANGUAGES, LanguageChoice
from .registry import ModelRegistry
from .served_models import ServedModel
from .validation import check_texts

# Texts this short are tokenized on the event loop (a sentence: ~65 us); longer ones in the threads.
INLINE_CHARACTERS = 1024


@dataclass(frozen=True)
class TokenizeResult:
    model: str
    encoded: list[Encoded]


class Tokenization:
    def __init__(self, registry: ModelRegistry, executor: Executor, max_client_batch_size: int):
        self.registry, self.executor, self.max_client_batch_size = registry, executor, max_client_batch_size

    async def encode(
        self,
        model: ServedModel,
        texts: list[str],
        languages: LanguageChoice = NO_LANGUAGES,
        truncate_left: bool = False,
        max_tokens: int | None = None,
    ) -> list[Encoded]:
        """Each text's ids; a multilingual model's framed with the call's language codes. truncate_left
        (embedding models): a text too long loses its first tokens instead of its last; max_tokens: cut at
        fewer tokens than the model takes (a ColBERT model's queries)."""
        args = (model, texts, languages, truncate_left, max_tokens)
        if sum(len(t) for t in texts) <= INLINE_CHARACTERS:  # tens of microseconds: cheaper than a thread's round trip
            return self.encode_now(*args)
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.encode_now, *args)

    @staticmethod
    def encode_now(
        model: ServedModel,
        texts: list[str],
        languages: LanguageChoice = NO_LANGUAGES,
        truncate_left: bool = False,
        max_tokens: int | None = None,
    ) -> list[Encoded]:
        """encode(), in the calling thread."""
        if languages.frames_source:
            return model.tokenizer.encode(texts, source=languages.source, target=languages.target)
        if truncate_left or max_tokens:
            return model.tokenizer.encode(texts, truncate_left=truncate_left, max_tokens=max_tokens)
        return model.tokenizer.encode(texts)

    async def encode_target(self, model: ServedModel, text: str) -> Encoded:
        """A decoder target's own tokens (seq2seq), without special tokens."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, model.tokenizer.encode_target, text)

    async def tokenize(self, model_name: str, inputs: list[str], call: CallRecord) -> TokenizeResult:
        """The ids and tokens each text becomes for a model (any task), and whether it was truncated."""
        model = self.registry.find(model_name)
        call.use_model(model.name)
        texts = check_texts(inputs, self.max_client_batch_size)
        return TokenizeResult(model.name, await self.encode(model, texts))
