"""The languages a multilingual model serves and where their codes go: a requested code (the checkpoint's
own, or a BCP-47 / ISO 639-1 / ISO 639-3 code that names one of them unambiguously) resolved to the
checkpoint's code, and a source framed with its language tokens as the checkpoint's tokenizer frames it.

Where the codes go (ModelConfig.source_language and target_language):
- M2M100, mBART-50 and NLLB-200: `[source code] text </s>` (NLLB's legacy_behaviour: `text </s> [source
  code]`), and the decoder's first generated token is the target's code, forced (first_token);
- Marian checkpoints with several targets: `>>fra<< text </s>`, the target's code at the start of the
  source (source_prefix), and no source code;
- mBART-25 (mbart-large-cc25 and its fine-tunes, mbart-large-en-ro): `text </s> [source code]`, and the
  target's code is the decoder's start token (decoder_start), as transformers' decoder_start_token_id.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Literal

import langcodes

SourcePlace = Literal["none", "prefix", "suffix"]
TargetPlace = Literal["none", "first_token", "source_prefix", "decoder_start"]
LISTED = 12  # codes an error lists, the nearest first


class UnknownLanguage(ValueError):
    """A requested language the model does not serve (or names ambiguously), with what it serves."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True)
class _Tag:
    language: str | None
    script: str | None
    territory: str | None


def language_tag(code: str) -> _Tag | None:
    """A code's language, script and territory as BCP-47 reads them (fra_Latn, fr_XX, __fr__ alike);
    None where it is no language tag. mBART's placeholder territory XX is none."""
    try:
        tag = langcodes.Language.get(code.strip("_").replace("_", "-"))
    except (ValueError, LookupError):
        return None
    if not tag.language or not tag.is_valid():
        return None
    return _Tag(tag.language, tag.script, None if tag.territory == "XX" else tag.territory)


@cache
def language_name(tag: str) -> str:
    """A BCP-47 tag's English name ("en-GB" -> "English (United Kingdom)"): language_data's tables, about a
    millisecond a name, looked up once per tag."""
    return langcodes.Language.get(tag).display_name()


def _agrees(served: _Tag, asked: _Tag) -> bool:
    """The served code is what the asked one names: the same language, and no script or territory that
    both give and that differ."""
    if served.language != asked.language:
        return False
    return all(
        theirs is None or mine is None or theirs == mine
        for theirs, mine in ((served.script, asked.script), (served.territory, asked.territory))
    )


@dataclass(frozen=True)
class Languages:
    codes: tuple[str, ...]  # as the checkpoint names them: fra_Latn (NLLB), fr (M2M100), fr_XX (mBART), fra (Marian)
    token: str = "{}"  # a code's token: "__{}__" (M2M100), ">>{}<<" (Marian), the code itself (NLLB, mBART)
    source: SourcePlace = "none"
    target: TargetPlace = "none"

    @property
    def needs_source(self) -> bool:
        return self.source != "none"

    @cached_property
    def _tags(self) -> dict[str, _Tag | None]:
        """Each served code as BCP-47 reads it: parsed once, not at every request."""
        return {code: language_tag(code) for code in self.codes}

    def token_of(self, code: str) -> str:
        return self.token.format(code)

    def resolve(self, field: str, asked: str) -> str:
        """The checkpoint's code for a requested one; UnknownLanguage naming the field and listing what the
        model serves, nearest first, where no code or more than one matches."""
        if not self.codes:
            raise UnknownLanguage(field, f"{asked!r}: this model serves no choice of language")
        exact = {code.lower(): code for code in self.codes}
        if asked.lower() in exact:
            return exact[asked.lower()]
        tag = language_tag(asked)
        matches = [code for code, served in self._tags.items() if tag and served and _agrees(served, tag)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise UnknownLanguage(field, f"{asked!r} names several languages of this model: {', '.join(matches)}")
        raise UnknownLanguage(field, f"{asked!r} is not a language of this model; it serves {self.listing(asked)}")

    def listing(self, asked: str) -> str:
        """The served codes, nearest to `asked` first (the same language, then the most alike spelling)."""
        tag = language_tag(asked)
        asked = asked.lower()

        def distance(code: str) -> tuple[bool, float]:
            served = self._tags[code]
            same = bool(tag and served and served.language == tag.language)
            return (not same, -difflib.SequenceMatcher(None, asked, code.lower()).ratio())

        ordered = sorted(self.codes, key=distance)
        more = len(ordered) - LISTED
        return ", ".join(ordered[:LISTED]) + (f" and {more} more ({len(ordered)} in all)" if more > 0 else "")

    def frame(
        self, content: list[int], source_id: int | None, target_id: int | None, eos_id: int, max_tokens: int
    ) -> tuple[list[int], bool]:
        """A source's ids with its language tokens and eos, as the checkpoint's tokenizer frames them,
        truncated to max_tokens (the frame kept): -> ids, and whether the content was cut."""
        before = [source_id] if self.source == "prefix" and source_id is not None else []
        if self.target == "source_prefix" and target_id is not None:
            before = [target_id, *before]
        after = [eos_id, source_id] if self.source == "suffix" and source_id is not None else [eos_id]
        room = max_tokens - len(before) - len(after)
        return [*before, *content[:room], *after], len(content) > room
