"""The tokenize capability, and the tokenization every other capability does: in threads of their own,
off the event loop, so that the loop keeps accepting while long texts are cut into tokens."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Executor
from dataclasses import dataclass

from modeldir.tokenizer import Encoded, Span

from ...errors import invalid
from ...ops.call_record import CallRecord
from ..models.registry import ModelRegistry
from ..models.served_models import ServedModel
from ..translation.languages import NO_LANGUAGES, LanguageChoice
from .validation import check_inputs, check_texts

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

    async def encode_inputs(
        self, model: ServedModel, inputs: list[str | list[int]], prompt: str, truncate_left: bool, max_tokens: int
    ) -> list[Encoded]:
        """Each input's ids: a text after the prompt, tokenized; token ids as they are. Either cut at
        max_tokens (at the start with truncate_left), and marked truncated where it was longer."""
        texts = [prompt + item for item in inputs if isinstance(item, str)]
        encoded = iter(await self.encode(model, texts, truncate_left=truncate_left, max_tokens=max_tokens))
        out = []
        for item in inputs:
            if isinstance(item, str):
                out.append(next(encoded))
                continue
            ids = (item[-max_tokens:] if truncate_left else item[:max_tokens]) if len(item) > max_tokens else item
            out.append(Encoded(list(ids), model.tokenizer.tokens(ids), len(item) > max_tokens))
        return out

    async def encode_target(self, model: ServedModel, text: str) -> Encoded:
        """A decoder target's own tokens (seq2seq), without special tokens."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, model.tokenizer.encode_target, text)

    async def spans(
        self, model_name: str, inputs: list[str], add_special_tokens: bool, prompt_name: str | None, call: CallRecord
    ) -> list[list[Span]]:
        """Each text's tokens, uncut, with their places in the text (after the prompt named, or the model's
        default prompt): a model with a tokenizer.json."""
        model = self.registry.find(model_name)
        call.use_model(model.name)
        texts = check_texts(inputs, self.max_client_batch_size)
        if not hasattr(model.tokenizer, "spans"):
            raise invalid("model", f"{model.name!r} has sentencepiece models, which give no token offsets")
        prompts = getattr(model, "prompts", {})
        if prompt_name is not None and prompt_name not in prompts:
            has = f"its prompts are {', '.join(sorted(prompts))}" if prompts else "it has no prompts"
            raise invalid("prompt_name", f"{prompt_name!r} is not a prompt of model {model.name!r}; {has}")
        name = prompt_name or getattr(model, "default_prompt", None)
        texts = [prompts[name] + text for text in texts] if name else texts
        work = functools.partial(model.tokenizer.spans, texts, add_special_tokens)
        return await asyncio.get_running_loop().run_in_executor(self.executor, work)

    async def decode(
        self, model_name: str, ids: list[list[int]], skip_special_tokens: bool, call: CallRecord
    ) -> list[str]:
        """Token ids -> text, for each list of ids (checked as token-id inputs are)."""
        model = self.registry.find(model_name)
        call.use_model(model.name)
        check_inputs(ids, self.max_client_batch_size, model.architecture.vocab_size, "ids")
        return [model.tokenizer.decode(i, skip_special_tokens=skip_special_tokens) for i in ids]

    async def tokenize(self, model_name: str, inputs: list[str], call: CallRecord) -> TokenizeResult:
        """The ids and tokens each text becomes for a model (any task), and whether it was truncated."""
        model = self.registry.find(model_name)
        call.use_model(model.name)
        texts = check_texts(inputs, self.max_client_batch_size)
        return TokenizeResult(model.name, await self.encode(model, texts))
