"""A request's source and target language checked against what its model serves, as every front door
refuses them alike: resolved to the checkpoint's codes, with the target's forced first token (or decoder
start token) where the model takes one (modeldir/languages.py says where each family puts its codes)."""

from __future__ import annotations

from dataclasses import dataclass

from modeldir.languages import UnknownLanguage, language_tag

from ...errors import invalid
from ..models.served_models import ServedModel

SOURCE, TARGET = "source_language", "target_language"  # the field names on every door
AUTO = "auto"  # a source language to detect, as LibreTranslate (and an unset one) asks


@dataclass(frozen=True)
class LanguageChoice:
    """A request's languages as the model names them (None: none taken)."""

    source: str | None = None
    target: str | None = None
    first_token: int | None = None  # the decoder's forced first token: the target's code
    start_token: int | None = None  # or the decoder's start token: the target's code (mBART-25)

    def codes(self, model: ServedModel) -> set[int]:
        """The ids of the language tokens this choice puts in the source or the decoder."""
        return {model.tokenizer.language_id(code) for code in (self.source, self.target) if code}

    @property
    def frames_source(self) -> bool:
        """The source's text is framed with language tokens (the tokenizer's encode takes them)."""
        in_decoder = self.first_token is not None or self.start_token is not None
        return self.source is not None or (self.target is not None and not in_decoder)


NO_LANGUAGES = LanguageChoice()


def _same_language(asked: str, own: str) -> bool:
    if asked.lower() == own.lower():
        return True
    a, b = language_tag(asked), language_tag(own)
    return bool(a and b and a.language == b.language)


def _check_pair(model: ServedModel, source: str | None, target: str | None) -> LanguageChoice:
    """A model of one language pair (or of none it names) takes only its own languages, and needs none."""
    pair = model.language_pair
    for field, asked, own in ((SOURCE, source, pair[0] if pair else None), (TARGET, target, pair[1] if pair else None)):
        if not asked:
            continue
        if own is None:
            raise invalid(field, f"{asked!r}: model {model.name!r} names no languages; leave {field} unset")
        if not _same_language(asked, own):
            raise invalid(field, f"{asked!r}: model {model.name!r} translates {pair[0]} to {pair[1]} only")
    return NO_LANGUAGES


def check_languages(model: ServedModel, source: str | None, target: str | None) -> LanguageChoice:
    """The request's languages for `model`: each resolved to the model's code, the ones it needs
    required, the ones it does not take refused; errors name the field and list what the model serves."""
    languages = model.languages
    if languages is None:
        return _check_pair(model, source, target)
    if languages.needs_source and not source:
        raise invalid(SOURCE, f"required by model {model.name!r}: one of {languages.listing('')}")
    if source and not languages.needs_source:
        pair = model.language_pair
        if not (pair and _same_language(source, pair[0])):  # its own source language is no news
            raise invalid(SOURCE, f"model {model.name!r} takes no source language (it reads any); leave it unset")
        source = None
    if languages.target != "none" and not target:
        raise invalid(TARGET, f"required by model {model.name!r}: one of {languages.listing('')}")
    try:
        source = languages.resolve(SOURCE, source) if source else None
        target = languages.resolve(TARGET, target) if target else None
    except UnknownLanguage as error:
        raise invalid(error.field, error.message) from None
    code = model.tokenizer.language_id(target) if target else None
    if languages.target == "first_token":
        return LanguageChoice(source, target, first_token=code)
    return LanguageChoice(source, target, start_token=code if languages.target == "decoder_start" else None)


def serves_target(model: ServedModel, target: str) -> bool:
    """The model translates into `target` (from some source it may need named)."""
    languages, pair = model.languages, model.language_pair
    if languages is not None and languages.target != "none":
        try:
            languages.resolve(TARGET, target)
        except UnknownLanguage:
            return False
        return True
    return bool(pair) and _same_language(target, pair[1])
