"""Documents cut into sentences and put back together (service/core/translation/documents.py), languages detected
(py3langid) and spelled as DeepL and LibreTranslate spell them: no model, no server."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.translation.detection import LanguageDetector
from service.core.translation.documents import (
    SPLIT_ALL,
    SPLIT_MODES,
    SPLIT_NO_NEWLINES,
    SPLIT_NONE,
    fit_pieces,
    split_document,
)
from service.http_api.deepl_api import deepl_codes, language_in, language_out
from service.http_api.libretranslate_api import language_code

# Text with the shapes documents have: words, sentence ends, abbreviations, spaces, tabs and line breaks
# of every kind, blank lines, and any other unicode now and then.
pieces = st.sampled_from(
    [
        "Hello",
        "world",
        "Dr.",
        "U.S.",
        "3.5",
        "end.",
        "Why?",
        "Yes!",
        "...",
        ",",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\r",
        "\n\n",
        "\u00a0",
        "\u3002",
        "これは文です。",
        "Привет.",
    ]
) | st.text(max_size=8)
documents = st.lists(pieces, max_size=40).map(" ".join) | st.lists(pieces, max_size=40).map("".join)
LINE_BREAKS = re.compile(r"\r\n|\r|\n")


@settings(max_examples=500, deadline=None)
@given(text=documents, mode=st.sampled_from(SPLIT_MODES), language=st.sampled_from(["en", "fr", "ja", "xx"]))
def test_a_document_is_its_pieces_and_what_lies_between_them(text, mode, language):
    document = split_document(text, language, mode)
    assert document.assemble(document.pieces) == text
    for piece in document.pieces:
        assert piece and piece == piece.strip()  # the whitespace around each piece stays in the document
        if mode == SPLIT_ALL:
            assert not LINE_BREAKS.search(piece)


@settings(max_examples=500, deadline=None)
@given(text=documents, language=st.sampled_from(["en", "de"]))
def test_n_lines_in_are_n_lines_out_in_order(text, language):
    """Each piece 'translated' to a marked text of its own: the lines come back, each with the
    translations of its own pieces, in order."""
    document = split_document(text, language, SPLIT_ALL)
    translated = document.assemble([f"<{i}>" for i in range(len(document.pieces))])
    assert LINE_BREAKS.findall(translated) == LINE_BREAKS.findall(text)
    marks = [int(m) for m in re.findall(r"<(\d+)>", translated)]
    assert marks == list(range(len(document.pieces)))
    for line_in, line_out in zip(LINE_BREAKS.split(text), LINE_BREAKS.split(translated)):
        assert bool(line_in.strip()) == bool(re.search(r"<\d+>", line_out))


def test_sentences_and_paragraphs_are_cut_as_a_reader_would():
    text = "Dr. Smith arrived at 3 p.m. on Monday. He left!\n\n  Second paragraph, one line.\r\nLast line?  "
    document = split_document(text, "en")
    assert document.pieces == [
        "Dr. Smith arrived at 3 p.m. on Monday.",
        "He left!",
        "Second paragraph, one line.",
        "Last line?",
    ]
    assert document.assemble(["A.", "B!", "C.", "D?"]) == "A. B!\n\n  C.\r\nD?  "
    broken = "A line that\ngoes on. Next."
    assert split_document(broken, "en").pieces == ["A line that", "goes on.", "Next."]
    assert split_document(broken, "en", SPLIT_NO_NEWLINES).pieces == ["A line that\ngoes on.", "Next."]
    assert split_document("  One. Two.\n", "en", SPLIT_NONE).pieces == ["One. Two."]


@settings(max_examples=300, deadline=None)
@given(text=documents, limit=st.integers(1, 30))
def test_a_piece_too_long_is_cut_until_every_piece_fits_and_nothing_is_lost(text, limit):
    def fits(piece: str) -> bool:
        return len(piece) <= limit

    document = fit_pieces(split_document(text, "en"), fits)
    assert document.assemble(document.pieces) == text
    assert all(fits(piece) or len(piece) < 2 for piece in document.pieces)


def test_a_long_sentence_is_cut_after_its_clauses_first_then_at_spaces():
    sentence = "one two three, four five six; seven eight nine"
    document = fit_pieces(split_document(sentence, "en"), lambda piece: len(piece) <= 20)
    assert document.pieces == ["one two three,", "four five six;", "seven eight nine"]
    assert document.assemble(["1,", "2;", "3"]) == "1, 2; 3"
    spaceless = fit_pieces(split_document("これは長い文です", "ja"), lambda piece: len(piece) <= 4)
    assert "".join(spaceless.pieces) == "これは長い文です" and all(len(p) <= 4 for p in spaceless.pieces)


CANDIDATES = ["eng_Latn", "fra_Latn", "deu_Latn", "spa_Latn", "zxx_Zyyy"]


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("The delivery truck, which was late, blocked the narrow street.", "eng_Latn"),
        ("Le camion de livraison, qui était en retard, bloquait la rue étroite.", "fra_Latn"),
        ("Der Lieferwagen, der zu spät war, blockierte die enge Straße.", "deu_Latn"),
        ("El camión de reparto, que llegó tarde, bloqueó la calle estrecha.", "spa_Latn"),
        ("trois cent quarante-deux", "fra_Latn"),
        ("three hundred and forty-two", "eng_Latn"),
        ("342 017", "zxx_Zyyy"),  # no letters: no linguistic content
    ],
)
def test_the_language_is_detected_among_the_candidates(text, language):
    detector = LanguageDetector()
    ranked = detector.rank(text, CANDIDATES)
    assert ranked[0].code == language and ranked[0].confidence > 0.6
    assert detector.detect(text, CANDIDATES) == ranked[0]
    assert sum(d.confidence for d in ranked) == pytest.approx(1.0, abs=1e-3)


def test_detection_knows_only_what_it_can_tell_apart():
    detector = LanguageDetector()
    assert detector.detect("342", ["eng_Latn", "fra_Latn"]) is None  # no letters, and no zxx to say so
    assert detector.detect("Hello there", ["qya"]) is None  # a language the model does not know
    only = detector.detect("Hello there", ["fra_Latn"])
    assert only.code == "fra_Latn" and only.confidence == 1.0  # one candidate: nothing to tell apart


def test_deepl_and_libretranslate_spell_languages_their_own_way():
    assert [language_in(c, target=True) for c in ("EN-GB", "en-us", "PT-BR", "ZH", "ZH-HANS", "ZH-HANT", "FR")] == [
        "en-GB",
        "en-US",
        "pt-BR",
        "zh-Hans",
        "zh-Hans",
        "zh-Hant",
        "fr",
    ]
    assert language_in("ZH", target=False) == "zh"  # a source ZH is any Chinese
    assert [language_out(c) for c in ("fra_Latn", "__fr__", "fr_XX", "zho_Hant", "zxx_Zyyy")] == [
        "FR",
        "FR",
        "FR",
        "ZH",
        "ZXX",
    ]
    assert deepl_codes("eng_Latn", target=True) == ["EN-GB", "EN-US"]
    assert deepl_codes("por_Latn", target=True) == ["PT-BR", "PT-PT"]
    assert deepl_codes("zho_Hans", target=True) == ["ZH", "ZH-HANS"]
    assert deepl_codes("zho_Hant", target=True) == ["ZH-HANT"]
    assert deepl_codes("eng_Latn", target=False) == ["EN"]
    assert [language_code(c) for c in ("fra_Latn", "zho_Hant", "zxx_Zyyy", "de", "pt_XX")] == [
        "fr",
        "zh-Hant",
        "zxx",
        "de",
        "pt",
    ]


def test_tokens_group_into_words_by_their_marks():
    from service.core.translation.alignment import words_of

    pieces = ["fra_Latn", "\u2581trois", "\u2581cent", "\u2581quar", "ante", "-", "deux", "</s>"]
    special = [True, False, False, False, False, False, False, True]
    assert words_of(pieces, special) == (["trois", "cent", "quarante-deux"], [-1, 0, 1, 2, 2, 2, 2, -1])
    wordpiece = ["[CLS]", "the", "tele", "##scope", "[SEP]"]
    assert words_of(wordpiece, [True, False, False, False, True]) == (["the", "telescope"], [-1, 0, 1, 1, -1])


def test_each_target_word_aligns_with_what_its_generating_step_attended_to_most():
    import numpy as np

    from service.core.translation.alignment import align

    # Decoder positions: start, code, t1, t2, t3 (target words 0, 0, 1); source positions: code, s1, s2, s3,
    # eos (source words 0, 1, 1). Position p's attention is what generated the token at p + 1.
    weights = np.zeros((5, 5))
    weights[1, 3] = 1.0  # t1 (word 0) from s3 (word 1)
    weights[2, 1] = 1.0  # t2 (word 0) from s1 (word 0)
    weights[3, 4], weights[3, 2] = 2.0, 1.0  # t3 (word 1): eos is special, so s2 (word 1)
    assert align(weights, [-1, 0, 1, 1, -1], [-1, -1, 0, 0, 1]) == [(0, 0), (1, 0), (1, 1)]
