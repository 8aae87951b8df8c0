"""Which served model a call that names languages goes to: the one named, or the first that translates
its pair (a multilingual model serving both languages, or a model of that one pair), the source detected
in each text where the call leaves it unset; the refusal names the pair or the target where none does."""

from __future__ import annotations

from dataclasses import dataclass

from modeldir.languages import language_name

from ...errors import InvalidArgument, RequestTooLarge, invalid
from ..calls.validation import check_text
from ..models.registry import ModelRegistry
from ..models.served_models import ServedSeq2SeqModel
from .detection import Detected, LanguageDetector
from .languages import AUTO, SOURCE, LanguageChoice, check_languages, serves_target

MIN_LISTED = 0.01  # a detection's candidates less likely than this are not listed


@dataclass(frozen=True)
class Route:
    """Where one text goes: its model, its languages as that model names them, and how sure the
    detection was (None: the source was given)."""

    model: ServedSeq2SeqModel
    languages: LanguageChoice
    source: str | None
    confidence: float | None


class LanguageRouter:
    def __init__(self, registry: ModelRegistry, max_characters: int, unserved_confidence: float = 0.9):
        """max_characters: the longest text detect() and rank() read (translation_max_characters).
        unserved_confidence: how sure a detection of a language no candidate reads must be to refuse."""
        self.registry, self.max_characters = registry, max_characters
        self.unserved_confidence = unserved_confidence
        self.detector = LanguageDetector()

    def seq2seq_models(self) -> list[ServedSeq2SeqModel]:
        return [m for m in self.registry.models.values() if m.task == "seq2seq"]

    @staticmethod
    def source_codes(model: ServedSeq2SeqModel) -> tuple[str, ...]:
        """The languages a model reads, as it names them (none named: ())."""
        if model.languages is not None and model.languages.needs_source:
            return model.languages.codes
        return model.language_pair[:1]

    def candidates(self, model_name: str, target: str) -> list[ServedSeq2SeqModel]:
        """The models a call may go to: the one named, or every served one that translates into `target`
        (InvalidArgument naming the target where none does)."""
        if model_name:
            return [self.registry.get(model_name, "seq2seq", "Translate")]
        found = [m for m in self.seq2seq_models() if serves_target(m, target)]
        if not found:
            served = sorted({code for m in self.seq2seq_models() for code in self.target_codes(m)})
            raise invalid(
                "target_language", f"{target!r}: no served model translates into it (served: {', '.join(served)})"
            )
        return found

    @staticmethod
    def target_codes(model: ServedSeq2SeqModel) -> tuple[str, ...]:
        if model.languages is not None and model.languages.target != "none":
            return model.languages.codes
        return model.language_pair[1:]

    def detect(self, text: str, models: list[ServedSeq2SeqModel]) -> Detected | None:
        """The text's language among those the models read -> Detected, or None where none can be told."""
        codes = [code for m in models for code in self.source_codes(m)]
        if not codes:
            return None
        outside = self.detector.outside(text, codes, self.unserved_confidence)
        if outside is not None:
            served = ", ".join(sorted(set(codes)))
            raise invalid(
                SOURCE,
                f"unset, and the text is in {language_name(outside.code)} ({outside.code}; detected with confidence "
                f"{outside.confidence:.2f}, at least translation_unserved_confidence), which no served model "
                f"translates from (served: {served}); name the source language to translate it as one of these",
            )
        return self.detector.detect(text, codes)

    def rank(self, text: str) -> list[Detected]:
        """The languages a text may be in, among those the served models read, the likeliest first (those
        under MIN_LISTED after the first left out)."""
        check_text("texts", text)
        if len(text) > self.max_characters:
            message = f"texts: {len(text)} characters; at most {self.max_characters} (translation_max_characters)"
            raise RequestTooLarge(message, "texts")
        ranked = self.detector.rank(text, [code for m in self.seq2seq_models() for code in self.source_codes(m)])
        return ranked[:1] + [d for d in ranked[1:] if d.confidence >= MIN_LISTED]

    def route(self, text: str, source: str | None, target: str, candidates: list[ServedSeq2SeqModel]) -> Route:
        """The first candidate that translates the text's source (detected where unset) into target."""
        confidence = None
        if not source or source.lower() == AUTO:
            detected = self.detect(text, candidates)
            if detected is None:
                if any(self.source_codes(m) and m.languages and m.languages.needs_source for m in candidates):
                    raise invalid(SOURCE, "unset, and the text's language could not be detected; name it")
                source = None  # the model reads any source and names none
            else:
                source, confidence = detected.code, detected.confidence
        first_error = None
        for model in candidates:
            asked = source if self.source_codes(model) else None  # a model that names no source reads any
            try:
                return Route(model, check_languages(model, asked, target), source, confidence)
            except InvalidArgument as error:
                first_error = first_error or error
        if len(candidates) == 1:
            raise first_error
        raise invalid(SOURCE, f"{source!r} to {target!r}: no served model translates this pair")
