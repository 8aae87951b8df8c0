"""One generation as the scheduler sees it: its parameters, its state from arrival to finish, and what it
tells its caller (new text and token ids; at the end the finish reason and usage), which waits in the
sequence until the caller takes it: a caller that is behind takes several tokens in one event."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np

from .beam_search import BeamSearch, BeamSettings
from .logit_rules import LogitRules
from .sampling import SamplingParams
from .text_stream import TextStream

LENGTH, EOS, STOP, CANCELLED = "length", "eos", "stop", "cancelled"


@dataclass(frozen=True, kw_only=True)
class GenerationParams:
    max_new_tokens: int
    sampling: SamplingParams = SamplingParams()
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    beams: BeamSettings | None = None  # beam search (num_beams >= 2); None: greedy or sampling
    # Events token by token (GenerateStream); otherwise one at the end, and the text is decoded once
    # (each step's decode, and waking the caller, would take the cores the model needs).
    stream: bool = True
    probe: bool = False  # the server's own check (warm-up, health probe): not counted in the metrics
    # The first tokens generated, forced: a target language's code (multilingual models); Whisper's language,
    # task and timestamp tokens. Each takes a decoder step and a cache position, but is never reported
    # (text, ids, usage) nor counted in max_new_tokens.
    forced_tokens: tuple[int, ...] = ()
    # The decoder's first input; None: the model's start token. (Whisper's previous text starts with its own.)
    start_token: int | None = None
    # The mean log-probability of the tokens chosen (eos included, the forced tokens not) goes in the
    # last event: it takes every step's logits of the row off the device (beam searches score anyway).
    scores: bool = False
    # A model's own rules over each step's logits (logit_rules.py: Whisper's timestamps, a checkpoint's
    # no-repeat n-grams and minimum length), applied before the token is chosen; they see every step's
    # logits, the forced tokens' too.
    rules: LogitRules | None = None
    # Whether the engine decodes the text; False: the events carry ids and no text (an API process decodes
    # them, as it tokenized the source: service/split/). Stop sequences need the text: they keep it.
    text: bool = True

    @property
    def max_steps(self) -> int:
        """Decoder steps the sequence may take: its new tokens, and the forced ones."""
        return self.max_new_tokens + len(self.forced_tokens)

    @property
    def events_per_token(self) -> bool:
        """Whether the text is followed token by token: to stream it, or to find stop sequences in it."""
        return self.stream or bool(self.stop)

    @property
    def greedy(self) -> bool:
        """The plain argmax: no temperature, no penalty."""
        return self.sampling.temperature == 0.0 and not self.sampling.penalizes

    @property
    def width(self) -> int:
        """Cache rows the sequence takes."""
        return self.beams.num_beams if self.beams else 1


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    generated_tokens: int
    queue_seconds: float  # from arrival to admission
    time_to_first_token: float  # from arrival to the first token


@dataclass(frozen=True)
class Hypothesis:
    """One of a beam search's best finished hypotheses."""

    text: str
    token_ids: list[int]  # without the eos token
    finish_reason: str
    score: float  # what it was ranked by: sum(log p) / generated_length ** length_penalty
    mean_log_prob: float  # sum(log p) / its tokens (eos included, the forced tokens not)
    token_log_probs: tuple[float, ...] = ()  # each of token_ids'


@dataclass(frozen=True)
class Event:
    """New text and token ids of one sequence; the last event has finish_reason and usage (and, for a
    beam search, its n best hypotheses, the first being text and token_ids)."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    usage: Usage | None = None
    hypotheses: tuple[Hypothesis, ...] = ()
    mean_log_prob: float | None = None  # with params.scores, or a beam search's best
    token_log_probs: tuple[float, ...] = ()  # the same: each token's (on the last event, of the whole answer)


@dataclass(eq=False)
class Sequence:
    prompt: list[int]  # the source's tokens (none for audio)
    params: GenerationParams
    text: TextStream
    rng: np.random.Generator
    features: np.ndarray | None = None  # an audio window's log-mel frames (n_mels, frames), the source instead
    arrived: float = field(default_factory=time.perf_counter)
    admitted: float | None = None
    first_token: float | None = None
    row: int | None = None  # greedy and sampled sequences: the cache row it holds (the cache sets it)
    beam_rows: list[BeamRow] = field(default_factory=list)  # beam search: the beams' rows, in beam order
    search: BeamSearch | None = None
    generated: list[int] = field(default_factory=list)
    unsent: list[int] = field(default_factory=list)  # ids not yet in an event
    unsent_text: list[str] = field(default_factory=list)  # text not yet in an event
    ending: Event | None = None  # the last event, once the sequence has finished
    error: Exception | None = None  # the loop stopped or the model failed: the caller gets this
    waiter: asyncio.Future | None = None  # the caller's, while it waits for news
    gone: bool = False  # the caller left

    @property
    def source_length(self) -> int:
        """The encoder's positions: the source's tokens, or an audio window's frames halved by its stem."""
        return len(self.prompt) if self.features is None else (self.features.shape[-1] + 1) // 2

    @property
    def cache_need(self) -> tuple[int, int, int]:
        """What the cache must have room for (GenerationCache.admits): its source, its rows, its steps."""
        return self.source_length, self.params.width, self.params.max_steps

    @property
    def holders(self) -> list:
        """What holds the sequence's cache rows: its beams, or itself."""
        return self.beam_rows if self.search else [self]

    def send(self, text: str) -> None:
        """New text (and the ids since the last event) for the caller: woken if it streams, else kept for
        the last event."""
        if text:
            self.unsent_text.append(text)
        if self.params.stream:
            self._wake()

    def finish(
        self,
        reason: str,
        last_text: str = "",
        hypotheses: tuple[Hypothesis, ...] = (),
        mean_log_prob: float | None = None,
        token_log_probs: tuple[float, ...] = (),
    ) -> None:
        now = time.perf_counter()
        usage = Usage(
            prompt_tokens=len(self.prompt),
            generated_tokens=len(self.generated),
            queue_seconds=(self.admitted or now) - self.arrived,
            time_to_first_token=(self.first_token or now) - self.arrived,
        )
        if last_text:
            self.unsent_text.append(last_text)
        if hypotheses:
            mean_log_prob, token_log_probs = hypotheses[0].mean_log_prob, hypotheses[0].token_log_probs
        self.ending = Event("", [], reason, usage, hypotheses, mean_log_prob, token_log_probs)
        self._wake()

    def fail(self, error: Exception) -> None:
        self.error = error
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    @property
    def has_news(self) -> bool:
        return bool(self.unsent or self.unsent_text or self.ending or self.error)

    def take(self) -> Event:
        """Everything since the last event, in one: the last event if the sequence has finished."""
        if self.error is not None:
            raise self.error
        text = "".join(self.unsent_text)
        ids, self.unsent, self.unsent_text = self.unsent, [], []
        if self.ending is None:
            return Event(text, ids)
        e = self.ending
        return Event(text, ids, e.finish_reason, e.usage, e.hypotheses, e.mean_log_prob, e.token_log_probs)


@dataclass(eq=False)
class BeamRow:
    """One beam's cache row; `beam` is its place among the sequence's running beams."""

    sequence: Sequence
    beam: int
    row: int | None = None


def owner(holder: Sequence | BeamRow) -> Sequence:
    return holder.sequence if isinstance(holder, BeamRow) else holder
