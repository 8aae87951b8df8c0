"""A Whisper model's special tokens, languages, suppressed tokens and alignment heads: read from its
tokenizer.json and checkpoint at import, kept in config.json, and what the transcription decoder builds its
prompts and rules from.

The tokenizer's added tokens are laid out as OpenAI's tokenizer lays them out: <|endoftext|>,
<|startoftranscript|>, one token per language, <|translate|>, <|transcribe|>, <|startoflm|>,
<|startofprev|>, <|nospeech|> (<|nocaptions|> in older files), <|notimestamps|>, then the timestamps
<|0.00|> ... <|30.00|> in steps of 0.02 s up to the vocabulary's end (many tokenizer.json files leave
those out: their ids follow <|notimestamps|> all the same)."""

from __future__ import annotations

import re
from dataclasses import dataclass

LANGUAGE_TOKEN = re.compile(r"^<\|([a-z]{2,3}(?:_[a-z]+)?)\|>$")
TIME_PRECISION = 0.02  # seconds per timestamp token
SPECIAL = {
    "end_of_text": ("<|endoftext|>",),
    "start_of_transcript": ("<|startoftranscript|>",),
    "translate": ("<|translate|>",),
    "transcribe": ("<|transcribe|>",),
    "start_of_lm": ("<|startoflm|>",),
    "start_of_previous": ("<|startofprev|>",),
    "no_speech": ("<|nospeech|>", "<|nocaptions|>"),
    "no_timestamps": ("<|notimestamps|>",),
}


@dataclass(frozen=True, kw_only=True)
class WhisperSettings:
    multilingual: bool  # takes a language and a task in its prompt (an .en model: the start token alone)
    languages: tuple[str, ...]  # the codes of the language tokens in id order ("en", "zh", ...)
    first_language_id: int  # the first language token's id: language i is first_language_id + i
    end_of_text_id: int
    start_of_transcript_id: int
    translate_id: int
    transcribe_id: int
    start_of_lm_id: int
    start_of_previous_id: int
    no_speech_id: int
    no_timestamps_id: int
    suppress_ids: tuple[int, ...]  # never generated (OpenAI's suppress_tokens "-1": these and the specials)
    begin_suppress_ids: tuple[int, ...]  # not generated first (a blank, end of text)
    alignment_heads: tuple[tuple[int, int], ...]  # (decoder layer, head) pairs whose cross-attention aligns words

    def __post_init__(self) -> None:
        for name in ("languages", "suppress_ids", "begin_suppress_ids"):  # lists, read from JSON
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "alignment_heads", tuple(tuple(pair) for pair in self.alignment_heads))

    @property
    def timestamp_begin_id(self) -> int:
        """<|0.00|>: the timestamps follow <|notimestamps|>."""
        return self.no_timestamps_id + 1

    @property
    def never_generated_ids(self) -> tuple[int, ...]:
        """What a transcription never generates (OpenAI's suppress_tokens [-1]): the checkpoint's list and the
        prompt's special tokens."""
        prompt = (self.transcribe_id, self.translate_id, self.start_of_transcript_id, self.start_of_previous_id)
        return tuple(sorted({*self.suppress_ids, *prompt, self.start_of_lm_id, self.no_speech_id}))

    def language_id(self, code: str) -> int:
        return self.first_language_id + self.languages.index(code)


def read_whisper_settings(
    tokenizer: dict,
    vocab_size: int,
    multilingual: bool,
    suppress_ids: list[int],
    begin_suppress_ids: list[int],
    alignment_heads: list,
) -> WhisperSettings:
    """The settings from a tokenizer.json document (its added tokens) and the checkpoint's. Raises
    ValueError naming a special token the tokenizer lacks or one out of place."""
    ids = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", [])}
    found = {}
    for field, names in SPECIAL.items():
        present = [ids[n] for n in names if n in ids]
        if not present:
            raise ValueError(f"the tokenizer has no {' or '.join(names)} token")
        found[field] = present[0]
    if found["no_timestamps"] >= vocab_size - 1:
        raise ValueError("the vocabulary ends before the timestamp tokens that follow <|notimestamps|>")
    between = sorted(
        (i, m.group(1))
        for content, i in ids.items()
        if (m := LANGUAGE_TOKEN.match(content)) and found["start_of_transcript"] < i < found["translate"]
    )
    first = found["start_of_transcript"] + 1
    if not between or [i for i, _ in between] != list(range(first, first + len(between))):
        raise ValueError("the language tokens do not follow <|startoftranscript|> one after another")
    return WhisperSettings(
        multilingual=multilingual,
        languages=tuple(code for _, code in between),
        first_language_id=first,
        **{f"{field}_id": i for field, i in found.items()},
        suppress_ids=tuple(sorted(set(suppress_ids))),
        begin_suppress_ids=tuple(begin_suppress_ids),
        alignment_heads=tuple(tuple(pair) for pair in alignment_heads),
    )


def multilingual_by_vocabulary(vocab_size: int) -> bool:
    """OpenAI's rule where a checkpoint does not say: the multilingual vocabulary has 51,865 tokens or more,
    the English-only one 51,864."""
    return vocab_size >= 51865
