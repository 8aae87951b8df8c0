"""Which language a text is in, among the ones a call could translate from: py3langid's naive Bayes
model (about 140 languages, shipped in its package; loaded at the first detection), restricted to the
candidates, its probability the confidence. A text with no letters (digits, signs) is in no language:
ISO 639's "zxx", where a candidate is that. Beside it, which language among all it knows, to tell a text
in none of the candidates (outside)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from modeldir.languages import language_tag

NO_LANGUAGE = "zxx"  # ISO 639-2: no linguistic content


@dataclass(frozen=True)
class Detected:
    code: str  # the candidate's own spelling (a checkpoint's code)
    confidence: float  # 0 to 1


class LanguageDetector:
    def __init__(self):
        self._identifier = None
        self._everything = None  # a second copy, never restricted: which language, among all it knows
        self._known: frozenset[str] = frozenset()  # the ISO 639-1 codes the model tells apart
        self._restricted: tuple[str, ...] = ()  # the languages it is restricted to now
        self._lock = threading.Lock()  # the model's restriction is state every detection shares

    def _model(self):
        if self._identifier is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            self._known = frozenset(self._identifier.nb_classes)
        return self._identifier

    def outside(self, text: str, candidates: Iterable[str], confidence: float) -> Detected | None:
        """The text's language among every one the model knows, where none of `candidates` is it and the
        model is at least `confidence` sure (its ISO 639-1 code); else None."""
        if confidence > 1 or not any(ch.isalpha() for ch in text):
            return None
        languages = {tag.language for tag in map(language_tag, candidates) if tag and tag.language}
        with self._lock:
            if self._everything is None:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                self._everything = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            language, probability = self._everything.classify(text)
        if language in languages or probability < confidence:
            return None
        return Detected(language, float(probability))

    def detect(self, text: str, candidates: Iterable[str]) -> Detected | None:
        """The most likely of `candidates` (any codes BCP-47 reads: fra_Latn, fr, __fr__) for `text`; None
        where no candidate is a language the model knows (or, for a text without letters, is zxx)."""
        ranked = self.rank(text, candidates)
        return ranked[0] if ranked else None

    def rank(self, text: str, candidates: Iterable[str]) -> list[Detected]:
        """Every candidate the model knows, the most likely first, their confidences summing to 1."""
        by_language: dict[str, str] = {}
        for code in candidates:
            tag = language_tag(code)
            if tag and tag.language:
                by_language.setdefault(tag.language, code)
        if not any(ch.isalpha() for ch in text):
            return [Detected(by_language[NO_LANGUAGE], 1.0)] if NO_LANGUAGE in by_language else []
        with self._lock:
            model = self._model()
            known = tuple(sorted(language for language in by_language if language in self._known))
            if len(known) < 2:
                return [Detected(by_language[language], 1.0) for language in known]
            if known != self._restricted:  # a restriction costs ~1.5 ms: calls mostly share one
                model.set_languages(known)
                self._restricted = known
            ranked = model.rank(text)
        return [Detected(by_language[language], float(probability)) for language, probability in ranked]
