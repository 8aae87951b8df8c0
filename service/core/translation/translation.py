"""The translation capability: texts into a target language from a source one (given, or detected), by the
model named or the served one that covers the pair (routing.py); each text cut into sentences and put
back together around their translations (documents.py), every sentence of a call generated at once;
beside each text its detected language, its confidence, its alternatives and its word alignment."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from modeldir.languages import language_tag

from ...engine.sequence import GenerationParams
from ...errors import FailedPrecondition, InvalidArgument, RequestTooLarge, invalid, renamed
from ...ops.call_record import CallRecord
from ..calls.tokenization import Tokenization
from ..calls.validation import GenerationOptions, check_text, generation_params
from ..generation.generation import GenerateResult, answer, whole_answer
from .alignment import SentenceAlignment, sentence_alignment, token_links
from .documents import SPLIT_ALL, SPLIT_MODES, Document, fit_pieces, split_document
from .glossaries import Term
from .markup import Markup, MarkupRules, parse_markup
from .routing import LanguageRouter, Route
from .tag_projection import Link, place_tags
from .term_forcing import with_terms

# The generation options' names as a translation call has them.
OPTION_NAMES = {
    "params.max_new_tokens": "max_new_tokens",
    "params.num_beams": "num_beams",
    "params.answers": "alternatives",
    "params.num_return_sequences": "alternatives",
}
SEGMENTER_FALLBACK = "en"  # sentence rules for a language without a two-letter code
# What a sentence is generated with beside its translation.
NO_ALIGNMENT, WORD_ALIGNMENT, TOKEN_LINKS = "", "words", "tokens"


@dataclass(frozen=True, kw_only=True)
class TranslationLimits:
    max_texts: int  # texts per call (translation_max_texts)
    max_characters: int  # all texts of a call together
    max_sentences: int  # pieces a call's texts are cut into, together


@dataclass(frozen=True, kw_only=True)
class TranslationOptions:
    num_beams: int = 0  # 0: the checkpoint's default
    alternatives: int = 0  # more translations of each text, next best first (a beam search)
    max_new_tokens: int = 0  # per sentence; 0: the model's limit
    split_sentences: str = SPLIT_ALL  # documents.SPLIT_MODES
    scores: bool = False  # each text's confidence: the mean log-probability of its tokens
    alignment: bool = False  # each sentence's word alignment, from cross-attention (needs --attention-maps)
    markup: MarkupRules | None = None  # the texts are XML or HTML: their inline tags kept around their words
    glossary: tuple[Term, ...] = ()  # each source term found must come out as its target term


@dataclass(frozen=True, kw_only=True)
class TranslateRequest:
    texts: list[str]
    target_language: str
    source_language: str | None = None  # None or "auto": detected
    model: str = ""  # empty: the served model that covers the pair
    options: TranslationOptions = TranslationOptions()


@dataclass(frozen=True)
class Translation:
    text: str
    model: str
    source_language: str | None  # the model's code for it, given or detected (None: the model names none)
    target_language: str | None  # the model's code for it (None: the model names none)
    detected_confidence: float | None  # where the source was detected: 0 to 1
    mean_log_prob: float | None  # with options.scores: over all its sentences' tokens, eos included
    alternatives: tuple[str, ...]  # next best first
    sentences: int  # the pieces it was translated as
    prompt_tokens: int
    generated_tokens: int
    alignments: tuple[SentenceAlignment, ...] = ()  # with options.alignment: each sentence's, in order


def segmenter_language(code: str | None) -> str:
    """The two-letter code whose sentence rules apply to a source language (English's for none)."""
    tag = language_tag(code) if code else None
    return tag.language if tag and tag.language and len(tag.language) == 2 else SEGMENTER_FALLBACK


def weighted_mean(results: Sequence[GenerateResult]) -> float | None:
    """The mean log-probability per token over several answers, each weighted by its tokens (and eos)."""
    if any(r.mean_log_prob is None for r in results):
        return None
    weights = [r.usage.generated_tokens + 1 for r in results]
    return sum(r.mean_log_prob * w for r, w in zip(results, weights)) / sum(weights)


def translation_of(route: Route, text: str, results: Sequence[GenerateResult], alternatives: tuple) -> Translation:
    """A text's translation from its sentences' results (none: a text of markup alone)."""
    return Translation(
        text=text,
        model=route.model.name,
        source_language=route.languages.source or route.source,
        target_language=route.languages.target or next(iter(route.model.language_pair[1:]), None),
        detected_confidence=route.confidence,
        mean_log_prob=weighted_mean(results) if results else None,
        alternatives=alternatives,
        sentences=len(results),
        prompt_tokens=sum(r.usage.prompt_tokens for r in results),
        generated_tokens=sum(r.usage.generated_tokens for r in results),
    )


class TranslationService:
    def __init__(self, router: LanguageRouter, tokenization: Tokenization, limits: TranslationLimits, max_beams: int):
        self.router, self.tokenization, self.limits, self.max_beams = router, tokenization, limits, max_beams

    def check(self, request: TranslateRequest) -> None:
        limits, texts = self.limits, request.texts
        if not texts:
            raise invalid("texts", f"empty; send 1 to {limits.max_texts} texts")
        if len(texts) > limits.max_texts:
            raise invalid("texts", f"{len(texts)} texts; at most {limits.max_texts} per call (translation_max_texts)")
        for i, text in enumerate(texts):
            field = f"texts[{i}]" if len(texts) > 1 else "texts"  # one text: as its field names it
            check_text(field, text)
            if not text.strip():
                raise invalid(field, "only whitespace")
        characters = sum(len(t) for t in texts)
        if characters > limits.max_characters:
            raise RequestTooLarge(
                f"texts: {characters} characters; at most {limits.max_characters} per call "
                "(translation_max_characters)",
                "texts",
            )
        if not request.target_language:
            raise invalid("target_language", "required")
        options = request.options
        if options.split_sentences not in SPLIT_MODES:
            raise invalid("split_sentences", f"{options.split_sentences!r}; one of {', '.join(SPLIT_MODES)}")
        for name in ("num_beams", "alternatives", "max_new_tokens"):
            if getattr(options, name) < 0:
                raise invalid(name, f"{getattr(options, name)}; at least 0")
        if options.markup is not None:
            if options.alignment:  # the alignment of a text's sentences: of markup's, they are not its own
                raise invalid("return_alignment", "not served with markup")

    def check_sentences(self, documents: list[Document]) -> int:
        """-> the sentences of a call's documents, at most translation_max_sentences."""
        sentences = sum(len(d.pieces) for d in documents)
        if sentences > self.limits.max_sentences:
            raise RequestTooLarge(
                f"texts: {sentences} sentences; at most {self.limits.max_sentences} per call "
                "(translation_max_sentences)",
                "texts",
            )
        return sentences

    async def _pieces(self, route: Route, document: Document) -> tuple[Document, list[list[int]]]:
        """The document's pieces as ids, each within the model's input; a piece too long cut until it fits."""
        model, languages = route.model, route.languages
        encoded = await self.tokenization.encode(model, document.pieces, languages)
        if any(e.truncated for e in encoded):

            def fits(text: str) -> bool:
                return not self.tokenization.encode_now(model, [text], languages)[0].truncated

            loop = asyncio.get_running_loop()
            document = await loop.run_in_executor(self.tokenization.executor, fit_pieces, document, fits)
            encoded = await self.tokenization.encode(model, document.pieces, languages)
        for piece, e in zip(document.pieces, encoded):
            if e.truncated:  # a single character over the model's input: nothing left to cut
                raise invalid("texts", f"{piece[:20]!r}... does not fit model {model.name!r}'s input")
        return document, [e.ids for e in encoded]

    async def translate(self, request: TranslateRequest, call: CallRecord) -> list[Translation]:
        """Every text translated, in order. One refused or failed sentence stops the others."""
        self.check(request)
        options = request.options
        markups = None
        if options.markup is not None:
            markups = [parse_markup(text, options.markup) for text in request.texts]
            contents = [[segment.plain for segment in markup.segments] for markup in markups]
        else:
            contents = [[text] for text in request.texts]
        router, source, target = self.router, request.source_language, request.target_language
        candidates = router.candidates(request.model, target)
        routes = [  # a text detected by its plain text (a text of markup alone: by itself)
            router.route(" ".join(plain) or text, source, target, candidates)
            for plain, text in zip(contents, request.texts)
        ]
        for route in routes:
            call.use_model(route.model.name)
            if options.alignment and route.model.attention is None:
                raise FailedPrecondition(
                    f"return_alignment: model {route.model.name!r} has no attention-map graph loaded; start the "
                    "server with --tag-alignment (the default, for a model exported with onnx/attention.onnx) or "
                    "--attention-maps",
                    "return_alignment",
                )
        # One document per text (per segment of a text with markup), each cut into sentences.
        owners = [i for i, texts in enumerate(contents) for _ in texts]
        documents = [
            split_document(text, segmenter_language(routes[i].source), options.split_sentences)
            for i, text in zip(owners, (t for texts in contents for t in texts))
        ]
        alignment = WORD_ALIGNMENT if options.alignment else NO_ALIGNMENT
        kinds = [alignment] * len(documents)
        if markups is not None:
            tagged = [segment.tagged for markup in markups for segment in markup.segments]
            kinds = [TOKEN_LINKS if t else NO_ALIGNMENT for t in tagged]
        results = await self._translate_documents([routes[i] for i in owners], documents, options, kinds)
        translations = []
        for i, route in enumerate(routes):
            mine = [k for k, owner in enumerate(owners) if owner == i]
            if markups is None:
                (k,) = mine
                translation = self._translation(route, documents[k], [r for r, _ in results[k]], options.alternatives)
                if options.alignment:
                    translation = dataclasses.replace(translation, alignments=tuple(a for _, a in results[k]))
            else:
                translation = self._markup_translation(
                    route, markups[i], [documents[k] for k in mine], [results[k] for k in mine], options.alternatives
                )
            translations.append(translation)
        call.figures.update(
            inputs=len(request.texts),
            sentences=sum(t.sentences for t in translations),
            prompt_tokens=sum(t.prompt_tokens for t in translations),
            generated_tokens=sum(t.generated_tokens for t in translations),
        )
        return translations

    async def _translate_documents(
        self, routes: list[Route], documents: list[Document], options: TranslationOptions, kinds: list[str]
    ) -> list[list[tuple[GenerateResult, SentenceAlignment | list[Link] | None]]]:
        """Each document's sentences translated, all at once: per document, per sentence, the result and
        what was asked beside it (kinds: per document, NO_ALIGNMENT, WORD_ALIGNMENT or TOKEN_LINKS)."""
        self.check_sentences(documents)  # before any tokenizing: cutting long sentences only adds more
        ids = []
        for i, route in enumerate(routes):
            documents[i], piece_ids = await self._pieces(route, documents[i])
            ids.append(piece_ids)
        self.check_sentences(documents)
        generation = GenerationOptions(
            max_new_tokens=options.max_new_tokens,
            num_beams=options.num_beams,
            answers=options.alternatives + 1 if options.alternatives else None,
            scores=options.scores,
        )
        params = [self._params(route, generation) for route in routes]
        tasks = [
            [
                asyncio.ensure_future(self._generate(route, piece, piece_ids, route_params, kind, options.glossary))
                for piece, piece_ids in zip(document.pieces, pieces)
            ]
            for route, route_params, document, pieces, kind in zip(routes, params, documents, ids, kinds)
        ]
        every = [task for document_tasks in tasks for task in document_tasks]
        try:
            await asyncio.gather(*every)
        finally:
            for task in every:
                task.cancel()
        return [[task.result() for task in document_tasks] for document_tasks in tasks]

    def _params(self, route: Route, options: GenerationOptions) -> GenerationParams:
        """The route's generation parameters, a refusal naming the option as a translation call has it."""
        try:
            return generation_params(
                route.model, options, False, self.max_beams, route.languages.first_token, route.languages.start_token
            )
        except InvalidArgument as error:
            field, message = renamed(error, OPTION_NAMES)
            raise InvalidArgument(message, field) from None

    @staticmethod
    async def _generate(
        route: Route, piece: str, ids: list[int], params: GenerationParams, kind: str, terms: tuple[Term, ...]
    ) -> tuple[GenerateResult, SentenceAlignment | list[Link] | None]:
        """One sentence's translation (with a glossary's terms), and its word alignment or token links
        where asked for."""
        model = route.model
        model.metrics.prompt(len(ids))
        text, token_ids, last = await whole_answer(model, ids, params)
        if terms:
            answered = (text, token_ids, last)
            text, token_ids, last = await with_terms(
                model, piece, ids, params, answered, terms, codes=route.languages.codes(model)
            )
        result = answer(model.name, text, token_ids, last)
        if kind == NO_ALIGNMENT:
            return result, None
        codes = route.languages.codes(model)
        target_ids = [model.special.bos, *params.forced_tokens, *token_ids]
        if kind == TOKEN_LINKS:
            return result, await token_links(model, (piece, ids), (text, target_ids), codes)
        return result, await sentence_alignment(model, ids, target_ids, codes)

    @staticmethod
    def _translation(route: Route, document: Document, results: list[GenerateResult], alternatives: int):
        texts = [r.text for r in results]
        others = []
        for k in range(1, alternatives + 1):  # a sentence with fewer alternatives gives its best
            texts_k = [r.hypotheses[k].text if k < len(r.hypotheses) else r.text for r in results]
            others.append(document.assemble(texts_k))
        return translation_of(route, document.assemble(texts), results, tuple(others))

    def _markup_translation(
        self, route: Route, markup: Markup, documents: list[Document], results: list, alternatives: int
    ) -> Translation:
        """A text with markup put back together: each segment's translation with its tags placed through
        its sentences' token links (shifted to where each sentence stands in the segment); alternatives'
        tags placed by their share of the text (only the best answer is aligned)."""
        rendered, flat = [], []
        for segment, document, pieces in zip(markup.segments, documents, results):
            texts = [r.text for r, _ in pieces]
            flat.extend(r for r, _ in pieces)
            translation = document.assemble(texts)
            links = None
            if segment.tagged:
                source_at, target_at = document.offsets(document.pieces), document.offsets(texts)
                links = [
                    Link(link.target_start + t, link.target_stop + t, link.source_start + s, link.source_stop + s)
                    for (_, piece_links), s, t in zip(pieces, source_at, target_at)
                    for link in piece_links
                ]
            rendered.append(place_tags(segment, translation, links))
        others = tuple(self._markup_alternatives(markup, documents, results, alternatives))
        return translation_of(route, markup.assemble(rendered), flat, others)

    @staticmethod
    def _markup_alternatives(markup: Markup, documents: list[Document], results: list, alternatives: int):
        for k in range(1, alternatives + 1):  # a sentence with fewer alternatives gives its best
            rendered = []
            for segment, document, pieces in zip(markup.segments, documents, results):
                texts = [r.hypotheses[k].text if k < len(r.hypotheses) else r.text for r, _ in pieces]
                rendered.append(place_tags(segment, document.assemble(texts), None))
            yield markup.assemble(rendered)
