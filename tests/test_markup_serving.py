"""Markup through the translation doors of a real server (the translation fixture, started as users start
it: tag alignment on by default): DeepL's SDK with tag_handling, Weblate's and Discourse's recorded
requests, gRPC Translate's markup; tags land around the words they enclosed (through the bundled
multilingual numbers model's alignment), untranslated parts pass untouched, malformed XML is refused in
each API's shape, and (hypothesis) any well-formed input comes back well-formed with its tags."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import deepl
import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.bundled.multilingual_numbers import DIGITS, example
from service.grpc_api.pb import inference_pb2 as pb

from .http_client import http

deepl.http_client.max_network_retries = 0


@pytest.fixture(scope="module")
def base_url(translating) -> str:
    return f"http://localhost:{translating.server.http.port}"


@pytest.fixture(scope="module")
def translator(base_url):
    return deepl.Translator("any-key", server_url=base_url)


def words(number: int, target: str) -> str:
    return example(number, DIGITS, target)[1]


def test_deepls_sdk_keeps_each_tag_around_the_words_it_enclosed(translator):
    fr = translator.translate_text("312<b>405</b>", source_lang="ZXX", target_lang="FR", tag_handling="xml")
    assert fr.text == "trois cent douze mille <b>quatre cent cinq</b>"
    es = translator.translate_text("1<b>234</b>567", source_lang="ZXX", target_lang="ES", tag_handling="html")
    assert es.text == "un millón <b>doscientos treinta y cuatro</b> mil quinientos sesenta y siete"
    back = translator.translate_text(
        "<b>trois cent douze mille</b> quatre cent cinq", target_lang="ZXX", tag_handling="xml"
    )
    assert (back.text, back.detected_source_lang) == ("<b>312</b>405", "FR")
    # Inline tags keep a sentence whole; block tags (and splitting_tags) split it.
    blocks = translator.translate_text(
        "<doc><n>12</n>\n<n>7</n></doc>", source_lang="ZXX", target_lang="DE", tag_handling="xml"
    )
    assert blocks.text == f"<doc><n>{words(12, 'deu_Latn')}</n>\n<n>{words(7, 'deu_Latn')}</n></doc>"
    split = translator.translate_text(
        "12<br/>7",
        source_lang="ZXX",
        target_lang="DE",
        tag_handling="xml",
        outline_detection=False,
        splitting_tags=["br"],
    )
    assert split.text == f"{words(12, 'deu_Latn')}<br/>{words(7, 'deu_Latn')}"


def test_weblates_request_keeps_its_placeables(base_url):
    """As Weblate's DeepL machinery posts it: JSON, its placeables as <x id="N"></x>, ignore_tags ["x"]."""
    body = {
        "text": ['312<x id="3"></x>405', '<x id="0"></x> 21', '7 <x id="5"></x>'],
        "source_lang": "ZXX",
        "target_lang": "FR",
        "formality": "default",
        "tag_handling": "xml",
        "ignore_tags": ["x"],
    }
    response = http().post(f"{base_url}/v2/translate", json=body, headers={"authorization": "DeepL-Auth-Key k"})
    assert response.status_code == 200, response.text
    assert [t["text"] for t in response.json()["translations"]] == [
        'trois cent douze mille <x id="3"></x>quatre cent cinq',
        '<x id="0"></x> vingt et un',
        'sept <x id="5"></x>',
    ]


def test_discourses_request_translates_html_and_passes_code_untouched(base_url):
    """As Discourse's translator posts to LibreTranslate: format html, the language detected."""
    body = {
        "q": '<p>12</p>\n<p>312<b>405</b> <code>34</code> <span translate="no">56</span><script>if (a<b) {}</script></p>',
        "source": "auto",
        "target": "fr",
        "format": "html",
    }
    answer = http().post(f"{base_url}/translate", json=body).json()
    assert answer["translatedText"] == (
        '<p>douze</p>\n<p>trois cent douze mille <b>quatre cent cinq</b> <code>34</code> <span translate="no">56'
        "</span><script>if (a<b) {}</script></p>"
    )
    assert answer["detectedLanguage"]["language"] == "zxx"
    lenient = http().post(
        f"{base_url}/translate", json={"q": "<b>12", "source": "zxx", "target": "es", "format": "html"}
    )
    assert lenient.json() == {"translatedText": "<b>doce"}


def test_grpc_translate_takes_markup_and_entities_come_back_escaped(translating):
    markup = pb.Markup(tag_handling="xml", ignore_tags=["x"])
    request = pb.TranslateRequest(
        texts=["<p>312<b>405</b></p>\n<p><x>&lt;kept&gt; &amp;</x></p>"],
        source_language="zxx",
        target_language="fra_Latn",
        markup=markup,
    )
    (t,) = translating.stub().Translate(request, timeout=60).translations
    assert t.text == "<p>trois cent douze mille <b>quatre cent cinq</b></p>\n<p><x>&lt;kept&gt; &amp;</x></p>"
    assert t.sentences == 1 and t.generated_tokens > 0


@pytest.mark.parametrize("text", ["<b>12", "12</b>", "<a><b>1</a></b>", "1 & 2", "<p a=1>2</p>"])
def test_malformed_xml_is_refused_in_each_apis_shape(translator, translating, text):
    with pytest.raises(deepl.DeepLException) as raised:
        translator.translate_text(text, source_lang="ZXX", target_lang="FR", tag_handling="xml")
    assert raised.value.http_status_code == 400
    assert "tag_handling: Tag handling parsing failed, please check input." in str(raised.value)
    request = pb.TranslateRequest(texts=[text], target_language="fr", markup=pb.Markup(tag_handling="xml"))
    with pytest.raises(grpc.RpcError) as refused:
        translating.stub().Translate(request, timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith("tag_handling: Tag handling parsing failed")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tag_handling": "json"}, "tag_handling: 'json'; one of xml, html"),
        ({"tag_handling": "xml", "tag_handling_version": "v3"}, "tag_handling_version: 'v3'; one of v1, v2"),
        ({"tag_handling": "xml", "ignore_tags": 5}, "ignore_tags: a comma-separated string of tag names"),
        ({"tag_handling": "xml", "outline_detection": "maybe"}, "outline_detection: 'maybe': true or false"),
    ],
)
def test_tag_options_are_refused_by_name(base_url, fields, message):
    body = {"text": ["12"], "target_lang": "FR", "source_lang": "ZXX", **fields}
    response = http().post(f"{base_url}/v2/translate", json=body)
    assert response.status_code == 400 and response.json()["message"].startswith(message), response.text


NUMBERS = st.integers(0, 999_999).map(str)
TAGS = st.sampled_from(["b", "i", "span"])


def fragments(depth: int = 2):
    text = st.one_of(NUMBERS, st.just(" "), st.just(" &amp; "))
    if depth == 0:
        return text
    inner = st.lists(fragments(depth - 1), min_size=1, max_size=3).map("".join)
    element = st.tuples(TAGS, inner).map(lambda t: f"<{t[0]}>{t[1]}</{t[0]}>")
    empty = st.just("<br/>")
    return st.one_of(text, element, empty)


def element_tags(markup: str) -> list[str]:
    return sorted(el.tag for el in ElementTree.fromstring(f"<r>{markup}</r>").iter())


@settings(max_examples=25, deadline=None)
@given(
    st.lists(fragments(), min_size=1, max_size=3).map("".join).filter(str.strip),
    st.sampled_from(["fra_Latn", "deu_Latn"]),
)
def test_any_wellformed_markup_comes_back_wellformed_with_every_tag(translating, text, target):
    request = pb.TranslateRequest(
        texts=[text], source_language="zxx", target_language=target, markup=pb.Markup(tag_handling="xml")
    )
    (t,) = translating.stub().Translate(request, timeout=120).translations
    assert element_tags(t.text) == element_tags(text)


def test_alternatives_of_markup_keep_their_tags(base_url):
    body = {"q": "<p>312<b>405</b></p>", "source": "zxx", "target": "en", "format": "html", "alternatives": 2}
    answer = http().post(f"{base_url}/translate", json=body).json()
    best = answer["translatedText"]
    assert best.replace("<b>", "").endswith("four hundred and five</b></p>") and best.count("<b>") == 1
    assert best.replace("<b>", "").replace("</b>", "") == f"<p>{words(312405, 'eng_Latn')}</p>"
    assert len(answer["alternatives"]) == 2
    for alternative in answer["alternatives"]:
        assert alternative.startswith("<p>") and alternative.endswith("</b></p>") and alternative.count("<b>") == 1
