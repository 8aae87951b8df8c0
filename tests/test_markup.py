"""Markup cut into segments and put back around translations (service/core/translation/markup.py and
tag_projection.py), without a model: what is a segment, what passes untouched, where tags land through a
token alignment and without one, and (hypothesis) that any well-formed input gives well-formed output
with every tag kept, whatever the translation and its alignment."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.translation.markup import HTML, XML, MarkupRules, parse_markup
from service.core.translation.tag_projection import Link, place_tags
from service.errors import InvalidArgument

XML_RULES = MarkupRules(tag_handling=XML)
HTML_RULES = MarkupRules(tag_handling=HTML)


def word_links(source: str, target: str, pairs: list[tuple[int, int]]) -> list[Link]:
    """Links between the source's and the target's whitespace-separated words: (target word, source word)."""
    source_words = [m.span() for m in re.finditer(r"\S+", source)]
    target_words = [m.span() for m in re.finditer(r"\S+", target)]
    return [Link(*target_words[t], *source_words[s]) for t, s in pairs]


def translated(text: str, rules: MarkupRules, translate, links=None) -> str:
    """text's markup around its segments' translations; links(source, target) -> the token links."""
    markup = parse_markup(text, rules)
    out = []
    for segment in markup.segments:
        target = translate(segment.plain)
        out.append(place_tags(segment, target, links(segment.plain, target) if links else None))
    return markup.assemble(out)


def identity_links(source: str, target: str) -> list[Link]:
    n = len(re.findall(r"\S+", source))
    return word_links(source, target, [(i, i) for i in range(n)])


def test_inline_tags_stay_in_their_sentence_and_block_tags_split():
    markup = parse_markup('<p class="x">One <b>big</b> dog.</p><p>Two <a href="u">cats</a>.<br>Three</p>', HTML_RULES)
    assert [s.plain for s in markup.segments] == ["One big dog.", "Two cats.", "Three"]
    assert [len(s.children) for s in markup.segments] == [1, 1, 0]
    upper = translated('<p class="x">One <b>big</b> dog.</p>', HTML_RULES, str.upper, identity_links)
    assert upper == '<p class="x">ONE <b>BIG</b> DOG.</p>'


def test_a_reordered_translation_moves_each_tag_with_its_words():
    def french(text):
        return {"the red car": "la voiture rouge"}[text]

    def links(source, target):  # the -> la, red -> rouge, car -> voiture
        return word_links(source, target, [(0, 0), (1, 2), (2, 1)])

    out = translated("the <b>red</b> <i>car</i>", XML_RULES, french, links)
    assert out == "la <i>voiture</i> <b>rouge</b>"


def test_untranslated_elements_pass_untouched():
    text = (
        '<p>Run <code>ls -l</code> now <span translate="no">Attn</span> and <em class="a notranslate">X</em>'
        " ok</p><script>if (a < b) {}</script><style>p{}</style>"
    )
    out = translated(text, HTML_RULES, str.upper, identity_links)
    for kept in ("<code>ls -l</code>", '<span translate="no">Attn</span>', '<em class="a notranslate">X</em>'):
        assert kept in out
    assert out.startswith("<p>RUN ") and out.endswith("OK</p><script>if (a < b) {}</script><style>p{}</style>")


def test_dnt_spans_pass_untouched_in_xml_and_html():
    for rules in (XML_RULES, HTML_RULES):
        out = translated("<p>call <dnt>Attn Serve</dnt> now</p>", rules, str.upper, identity_links)
        assert out == "<p>CALL  <dnt>Attn Serve</dnt>NOW</p>"  # a point, as translate="no": with its next word


def test_weblate_placeables_are_points_that_follow_their_word():
    rules = MarkupRules(tag_handling=XML, ignore_tags=frozenset({"x"}))
    markup = parse_markup('Delete <x id="0"></x> files from <x id="1"></x>?', rules)
    assert markup.segments[0].plain == "Delete  files from ?"
    out = translated('Delete <x id="0"></x> files from <x id="1"></x>?', rules, str.upper, identity_links)
    assert out == 'DELETE  <x id="0"></x>FILES FROM <x id="1"></x>?'


def test_entities_and_whitespace_are_kept():
    out = translated("<p>\n  Fish &amp; <b>chips</b> &lt;3\n</p>", XML_RULES, str.upper, identity_links)
    assert out == "<p>\n  FISH &amp; <b>CHIPS</b> &lt;3\n</p>"


def test_outline_detection_and_splitting_tags():
    text = "<doc><title>Hi there</title>\n<para>Some <em>bold</em> text</para></doc>"
    assert [s.plain for s in parse_markup(text, XML_RULES).segments] == ["Hi there", "Some bold text"]
    flat = MarkupRules(tag_handling=XML, outline_detection=False)
    assert [s.plain for s in parse_markup(text, flat).segments] == ["Hi there\nSome bold text"]
    split = MarkupRules(tag_handling=XML, outline_detection=False, splitting_tags=frozenset({"para", "title"}))
    assert [s.plain for s in parse_markup(text, split).segments] == ["Hi there", "Some bold text"]
    kept_inline = MarkupRules(tag_handling=HTML, non_splitting_tags=frozenset({"div"}))
    assert [s.plain for s in parse_markup("A <div>b</div> c", kept_inline).segments] == ["A b c"]


def test_without_an_alignment_tags_land_by_their_share_at_word_boundaries():
    out = translated("aaa <b>bbb</b> ccc", XML_RULES, lambda t: "xxx yyy zzz")
    assert out == "xxx <b>yyy</b> zzz"


@pytest.mark.parametrize("text", ["<a><b></a></b>", "<b>open", "a & b", "<p x=1>q</p>", "</b>"])
def test_malformed_xml_is_refused_with_deepls_message(text):
    with pytest.raises(InvalidArgument) as refused:
        parse_markup(text, XML_RULES)
    assert refused.value.field == "tag_handling"
    assert "Tag handling parsing failed, please check input." in str(refused.value)


def test_lenient_html_closes_what_it_can_and_keeps_the_rest():
    out = translated("<p>one <b>two</p><li>three</b>", HTML_RULES, str.upper, identity_links)
    assert out == "<p>ONE <b>TWO</p><li>THREE</b>"


NAMES = st.sampled_from(["b", "i", "span", "x", "a"])
WORDS = st.text(alphabet="abc &<>\"'é", min_size=1, max_size=12)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fragments(depth: int = 3):
    text = WORDS.map(_escape)
    empty = NAMES.map(lambda n: f"<{n}/>")
    if depth == 0:
        return st.one_of(text, empty)
    inner = st.lists(fragments(depth - 1), max_size=4).map("".join)
    element = st.tuples(NAMES, st.sampled_from(["", ' id="1"', " k='v>'"]), inner).map(
        lambda t: f"<{t[0]}{t[1]}>{t[2]}</{t[0]}>"
    )
    return st.one_of(text, empty, element)


def tags_of(markup: str) -> list[str]:
    return sorted(el.tag for el in ElementTree.fromstring(f"<r>{markup}</r>").iter())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(fragments(), min_size=1, max_size=5).map("".join),
    st.randoms(use_true_random=False),
    st.booleans(),
)
def test_any_wellformed_input_gives_wellformed_output_with_every_tag(text, random, aligned):
    def translate(source):
        words = source.split()
        random.shuffle(words)
        return " ".join(w.upper() for w in words) or "Z"

    def links(source, target):
        n_source, n_target = len(source.split()), len(target.split())
        if not n_source:
            return []
        return word_links(source, target, [(t, random.randrange(n_source)) for t in range(n_target)])

    out = translated(text, XML_RULES, translate, links if aligned else None)
    assert tags_of(out) == tags_of(text)
    root = ElementTree.fromstring(f"<r>{out}</r>")
    plain = "".join(root.itertext())
    expected = "".join("".join(s.plain.split()) for s in parse_markup(text, XML_RULES).segments)
    assert sorted("".join(plain.split())) == sorted(expected.upper())
