"""The Translate RPC's messages: a request read into the core's, and a translation written back."""

from __future__ import annotations

from ..core.translation.documents import SPLIT_ALL, SPLIT_NO_NEWLINES, SPLIT_NONE
from ..core.translation.markup import TAG_HANDLINGS, MarkupRules
from ..core.translation.translation import TranslateRequest, Translation, TranslationOptions
from ..errors import invalid
from .pb import inference_pb2 as pb

SENTENCE_SPLITTING = {
    pb.SENTENCE_SPLITTING_UNSPECIFIED: SPLIT_ALL,
    pb.SENTENCE_SPLITTING_NO_NEWLINES: SPLIT_NO_NEWLINES,
    pb.SENTENCE_SPLITTING_NONE: SPLIT_NONE,
}


def markup_rules(markup: pb.Markup) -> MarkupRules | None:
    if not markup.tag_handling:
        return None
    if markup.tag_handling not in TAG_HANDLINGS:
        raise invalid("markup.tag_handling", f"{markup.tag_handling!r}; one of {', '.join(TAG_HANDLINGS)}")
    return MarkupRules(
        tag_handling=markup.tag_handling,
        outline_detection=markup.outline_detection if markup.HasField("outline_detection") else True,
        splitting_tags=frozenset(markup.splitting_tags),
        non_splitting_tags=frozenset(markup.non_splitting_tags),
        ignore_tags=frozenset(markup.ignore_tags),
    )


def translate_request(request: pb.TranslateRequest) -> TranslateRequest:
    options = TranslationOptions(
        num_beams=request.num_beams,
        alternatives=request.alternatives,
        max_new_tokens=request.max_new_tokens,
        split_sentences=SENTENCE_SPLITTING.get(request.sentence_splitting, str(request.sentence_splitting)),
        scores=request.return_scores,
        alignment=request.return_alignment,
        markup=markup_rules(request.markup),
    )
    return TranslateRequest(
        texts=list(request.texts),
        target_language=request.target_language,
        source_language=request.source_language or None,
        model=request.model,
        options=options,
    )


def translation_message(t: Translation) -> pb.Translation:
    message = pb.Translation(
        text=t.text,
        model=t.model,
        source_language=t.source_language or "",
        target_language=t.target_language or "",
        alternatives=t.alternatives,
        sentences=t.sentences,
        prompt_tokens=t.prompt_tokens,
        generated_tokens=t.generated_tokens,
        alignments=[
            pb.SentenceAlignment(
                source_words=a.source_words, target_words=a.target_words, pairs=[i for pair in a.pairs for i in pair]
            )
            for a in t.alignments
        ],
    )
    if t.detected_confidence is not None:
        message.detected_confidence = t.detected_confidence
    if t.mean_log_prob is not None:
        message.score = t.mean_log_prob
    return message
