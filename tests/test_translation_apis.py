"""DeepL's API, through DeepL's own Python client pointed at the server, and LibreTranslate's, through raw
requests in every shape it has: the same translations as attnserve.v1 Translate, languages listed as each
API lists them, bad input refused in each API's own shape and status, never a 5xx, fuzzed."""

from __future__ import annotations

import json

import deepl
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.bundled.multilingual_numbers import DIGITS, example
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http

JSON_TYPE = {"content-type": "application/json"}
deepl.http_client.max_network_retries = 0  # a 429 or 5xx is the test's to see, not the client's to retry


@pytest.fixture(scope="module")
def base_url(translating) -> str:
    # localhost, as users write it: the HTTP port listens on IPv4 and IPv6 alike.
    return f"http://localhost:{translating.server.http.port}"


@pytest.fixture(scope="module")
def translator(base_url):
    return deepl.Translator("any-key", server_url=base_url)


def words(number: int, target: str) -> str:
    return example(number, DIGITS, target)[1]


def test_deepl_translates_one_text_and_several(translator):
    one = translator.translate_text("312405", target_lang="FR", source_lang="ZXX")
    assert (one.text, one.detected_source_lang, one.billed_characters) == (words(312405, "fra_Latn"), "ZXX", 6)
    several = translator.translate_text(["21", "7\n\n80"], target_lang="DE")
    assert [r.text for r in several] == [words(21, "deu_Latn"), f"{words(7, 'deu_Latn')}\n\n{words(80, 'deu_Latn')}"]
    assert [r.detected_source_lang for r in several] == ["ZXX", "ZXX"]
    digits = translator.translate_text("trois cent douze mille quatre cent cinq", target_lang="ZXX")
    assert (digits.text, digits.detected_source_lang) == ("312405", "FR")
    assert translator.translate_text("12", target_lang="EN-GB").text == "twelve"


def test_deepl_sentence_splitting_and_formality_that_falls_back(translator):
    kept = translator.translate_text("12. 7.", target_lang="ES", split_sentences="1")
    whole = translator.translate_text("12", target_lang="ES", split_sentences="0", preserve_formatting=True)
    assert kept.text.count(" ") >= 1 and whole.text == "doce"
    assert translator.translate_text("12", target_lang="ES", formality="prefer_more").text == "doce"


def test_deepl_lists_languages_as_deepl_does(translator):
    sources = {(lang.code, lang.name) for lang in translator.get_source_languages()}
    assert {("EN", "English"), ("FR", "French"), ("DE", "German"), ("ES", "Spanish")} <= sources
    targets = {lang.code: lang for lang in translator.get_target_languages()}
    assert {"EN-GB", "EN-US", "FR", "DE", "ES", "IT", "ZXX"} <= set(targets) and "EN" not in targets
    assert targets["EN-US"].name == "English (United States)" and targets["FR"].supports_formality is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(target_lang="JA"), "target_lang: 'ja': no served model translates into it"),
        (dict(target_lang="FR", source_lang="JA"), "source_lang: 'ja' is not a language of this model"),
        (dict(target_lang="FR", tag_handling="yaml"), "tag_handling: 'yaml'; one of xml, html"),
        (dict(target_lang="FR", formality="more"), "formality: 'formality' is not supported for given 'target_lang'."),
        (dict(target_lang="FR", formality="formal"), "formality: 'formal': one of default, prefer_more, prefer_less"),
        (dict(target_lang="FR", model_type="quality_optimized"), "model_type: model types are not served"),
        (dict(target_lang="FR", split_sentences="2"), "split_sentences: '2'; one of 1, nonewlines, 0"),
        (dict(target_lang="FR", extra_body_parameters={"beams": 3}), "beams: not a parameter of /v2/translate"),
    ],
)
def test_deepl_refuses_in_its_own_shape(translator, options, message):
    with pytest.raises(deepl.DeepLException) as raised:
        translator.translate_text("12", **options)
    assert raised.value.http_status_code == 400 and f"Bad request, message: {message}" in str(raised.value)


def test_deepl_refusals_by_raw_requests_and_form_bodies(base_url):
    form = http().post(f"{base_url}/v2/translate", data={"text": ["5", "6"], "target_lang": "EN-GB"})
    assert [t["text"] for t in form.json()["translations"]] == ["five", "six"]
    assert "billed_characters" not in form.json()["translations"][0]  # only when asked for
    listed = http().post(f"{base_url}/v2/languages", data={"type": "target"}).json()
    assert {"language": "EN-GB", "name": "English (United Kingdom)", "supports_formality": False} in listed
    cases = [
        (dict(json={"target_lang": "FR"}), 400, "text: required"),
        (dict(json={"text": [], "target_lang": "FR"}), 400, "text: empty"),
        (dict(json={"text": ["5", 6], "target_lang": "FR"}), 400, "text: a text or a list of texts"),
        (dict(json={"text": "5"}), 400, "target_lang: required"),
        (dict(json={"text": "5", "target_lang": 3}), 400, "target_lang: a string, not int"),
        (dict(content=b"{not json", headers={"content-type": "application/json"}), 400, "body: not valid JSON"),
        (dict(json=["5"]), 400, "body: a JSON object is required, not list"),
        (dict(json={"text": "5 " * 3001, "target_lang": "FR"}), 413, "at most 6000 per call"),
    ]
    for request, status, message in cases:
        response = http().post(f"{base_url}/v2/translate", **request)
        assert (response.status_code, message in response.json()["message"]) == (status, True), response.text
    wrong = http().get(f"{base_url}/v2/languages", params={"type": "both"})
    assert wrong.status_code == 400 and wrong.json() == {"message": "type: 'both'; source or target"}


def test_libretranslate_translates_in_every_shape(base_url):
    def post(body: dict) -> httpx.Response:
        return http().post(f"{base_url}/translate", json=body, timeout=60)

    assert post({"q": "21", "source": "zxx", "target": "es"}).json() == {"translatedText": words(21, "spa_Latn")}
    detected = post({"q": "21", "source": "auto", "target": "fr", "format": "text"}).json()
    assert detected == {
        "translatedText": words(21, "fra_Latn"),
        "detectedLanguage": {"confidence": 100.0, "language": "zxx"},
    }
    several = post({"q": ["5", "cinq"], "source": "auto", "target": "de"}).json()
    assert several["translatedText"][0] == words(5, "deu_Latn")
    assert [d["language"] for d in several["detectedLanguage"]] == ["zxx", "fr"]
    alternatives = post({"q": "312405", "source": "zxx", "target": "en", "alternatives": 2}).json()
    assert len(alternatives["alternatives"]) == 2 and alternatives["translatedText"] == words(312405, "eng_Latn")
    assert len(set(alternatives["alternatives"]) | {alternatives["translatedText"]}) == 3
    form = http().post(f"{base_url}/translate", data={"q": "6", "source": "zxx", "target": "en"}).json()
    assert form == {"translatedText": "six"}


def test_libretranslate_detects_and_lists(base_url):
    detected = http().post(f"{base_url}/detect", json={"q": "trois cent douze mille"}).json()
    assert detected[0]["language"] == "fr" and detected[0]["confidence"] > 50
    assert all(set(d) == {"confidence", "language"} for d in detected)
    languages = {entry["code"]: entry for entry in http().get(f"{base_url}/languages").json()}
    assert languages["fr"] == {"code": "fr", "name": "French", "targets": ["de", "en", "es", "zxx"]}
    assert languages["en"]["targets"] == ["de", "es", "fr", "it", "zxx"]  # Italian by the Marian model


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"q": "5", "source": "zxx", "target": "fr", "format": "md"}, "format: 'md'; one of text, html"),
        ({"q": "5", "source": "zxx"}, "target: required"),
        ({"q": "", "source": "zxx", "target": "fr"}, "q: empty text"),
        ({"q": ["5", ""], "source": "zxx", "target": "fr"}, "q[1]: empty text"),
        ({"q": "5", "source": "xx", "target": "fr"}, "source: 'xx' is not a language of this model"),
        ({"q": "5", "source": "zxx", "target": "xx"}, "target: 'xx': no served model translates into it"),
        ({"q": "5", "source": "zxx", "target": "fr", "alternatives": 9}, "alternatives: 9; from 0 to 3"),
        ({"q": "5", "target": "fr", "glossary": "x"}, "glossary: not a field of /translate"),
    ],
)
def test_libretranslate_refuses_in_its_own_shape(base_url, body, message):
    response = http().post(f"{base_url}/translate", json=body)
    assert response.status_code == 400 and set(response.json()) == {"error"}
    assert response.json()["error"].startswith(message)


def test_a_lone_surrogate_is_refused_by_name_on_every_door(base_url):
    """JSON may escape a lone surrogate ("\\ud800"), which decodes to a str no tokenizer takes."""
    for path, body, field in [
        ("/v2/translate", '{"text": "\\ud800 12", "target_lang": "FR"}', "text"),
        ("/translate", '{"q": ["5", "\\udfff"], "source": "zxx", "target": "fr"}', "q[1]"),
        ("/detect", '{"q": "ab\\ud800"}', "q"),
        ("/v1/completions", '{"prompt": "\\ud800", "model": "numbers"}', "prompt"),
    ]:
        response = http().post(f"{base_url}{path}", content=body.encode(), headers=JSON_TYPE)
        assert response.status_code == 400 and f"{field}: not valid Unicode: a lone surrogate" in response.text


def test_keys_guard_both_apis_in_their_own_ways(multilingual_numbers_dir, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret\n")
    server = ServerThread([multilingual_numbers_dir], auth_token_file=str(tokens))
    try:
        url = f"http://localhost:{server.server.http.port}"
        with pytest.raises(deepl.AuthorizationException) as raised:
            deepl.Translator("wrong", server_url=url).translate_text("5", target_lang="FR")
        assert raised.value.http_status_code == 403 and "authorization" in str(raised.value)
        assert deepl.Translator("s3cret", server_url=url).translate_text("5", target_lang="FR").text == "cinq"
        body = {"q": "5", "source": "zxx", "target": "fr"}
        refused = http().post(f"{url}/translate", json=body)
        assert refused.status_code == 403 and refused.json()["error"].startswith("api_key: a valid key is required")
        assert http().post(f"{url}/translate", json={**body, "api_key": "s3cret"}).json() == {"translatedText": "cinq"}
        bearer = http().post(f"{url}/translate", json=body, headers={"authorization": "Bearer s3cret"})
        assert bearer.json() == {"translatedText": "cinq"}
        assert http().post(f"{url}/detect", json={"q": "cinq", "api_key": "wrong"}).status_code == 403
    finally:
        server.close()


def test_the_http_doors_translate_as_grpc_does(translating, translator):
    text = "999999999.\n1001"
    request = pb.TranslateRequest(texts=[text], source_language="zxx", target_language="spa_Latn")
    (grpc_answer,) = translating.stub().Translate(request, timeout=60).translations
    assert translator.translate_text(text, source_lang="ZXX", target_lang="ES").text == grpc_answer.text
    base = f"http://localhost:{translating.server.http.port}"
    libre = http().post(f"{base}/translate", json={"q": text, "source": "zxx", "target": "es"}).json()
    assert libre["translatedText"] == grpc_answer.text


# Any code point, lone surrogates too: JSON's "\ud800" escapes decode to them.
ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=20)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
LANGUAGES = st.sampled_from(["FR", "EN-GB", "DE", "ZXX", "auto", "zxx", "fr", "it", "EN", "ZH-HANT", ""])
FIELDS = {
    "/v2/translate": [
        "text",
        "source_lang",
        "target_lang",
        "split_sentences",
        "formality",
        "model",
        "preserve_formatting",
        "show_billed_characters",
        "glossary_id",
    ],
    "/translate": ["q", "source", "target", "format", "alternatives", "api_key", "model"],
    "/detect": ["q", "api_key"],
    "/v2/languages": ["type"],
}


@st.composite
def bodies(draw) -> tuple[str, dict]:
    path = draw(st.sampled_from(sorted(FIELDS)))
    names = st.sampled_from(FIELDS[path]) | st.text(max_size=8)
    values = LANGUAGES | st.lists(st.text(max_size=30), max_size=4) | JSON
    return path, draw(st.dictionaries(names, values, max_size=5))


@settings(max_examples=400, deadline=None)
@given(request=bodies(), form=st.booleans())
def test_no_body_gets_a_server_error_and_the_server_serves_on(base_url, request, form):
    path, body = request
    if form:  # a form carries strings alone, and UTF-8 alone
        body = {k: v if isinstance(v, list) and all(isinstance(x, str) for x in v) else str(v) for k, v in body.items()}
        body = {k: v.encode(errors="replace").decode() if isinstance(v, str) else v for k, v in body.items()}
        response = http().post(f"{base_url}{path}", data=body, timeout=60)
    else:  # ASCII JSON, its escapes carrying whatever the text holds
        content = json.dumps(body).encode()
        response = http().post(f"{base_url}{path}", content=content, headers=JSON_TYPE, timeout=60)
    assert response.status_code in (200, 400, 404, 413), response.text
    if response.status_code != 200:
        assert set(response.json()) == ({"message"} if path.startswith("/v2") else {"error"})


def test_deepl_usage_counts_the_characters_translated(translator, base_url):
    before = translator.get_usage()
    assert before.character.limit == 10**12 and not before.any_limit_reached
    translator.translate_text(["12", "345"], source_lang="ZXX", target_lang="FR")
    after = http().get(f"{base_url}/v2/usage").json()
    assert after["character_count"] - before.character.count >= 5  # other tests may translate meanwhile
    refused = http().get(f"{base_url}/v2/usage", params={"auth_key": "k"})
    assert refused.status_code == 400 and refused.json() == {"message": "auth_key: not a parameter of /v2/usage"}


def test_deepl_takes_fifty_texts_and_a_context(translator):
    fifty = translator.translate_text([str(n) for n in range(50)], source_lang="ZXX", target_lang="ES")
    assert [r.text for r in fifty[:3]] == [words(0, "spa_Latn"), words(1, "spa_Latn"), words(2, "spa_Latn")]
    with pytest.raises(deepl.DeepLException) as raised:
        translator.translate_text([str(n) for n in range(51)], source_lang="ZXX", target_lang="ES")
    assert "text: 51 texts; at most 50 per call (translation_max_texts)" in str(raised.value)
    assert translator.translate_text("12", target_lang="FR", context="a price list").text == "douze"


def test_a_text_in_a_language_no_model_reads_is_refused_not_translated(translator, base_url):
    """Detected among every language the detector knows, sure enough: refused naming it (where the
    candidates alone would have picked the nearest served one)."""
    italian = "Questa è una frase italiana abbastanza lunga."
    with pytest.raises(deepl.DeepLException) as raised:
        translator.translate_text(italian, target_lang="ZXX")
    assert raised.value.http_status_code == 400
    assert "source_lang: unset, and the text is in Italian (it; detected with confidence 0.99" in str(raised.value)
    refused = http().post(f"{base_url}/translate", json={"q": italian, "source": "auto", "target": "zxx"})
    assert refused.status_code == 400 and refused.json()["error"].startswith(
        "source: unset, and the text is in Italian"
    )
    # Number words, which the detector can take for a neighbour language, are never that sure of one.
    assert translator.translate_text("treinta y cuatro", target_lang="ZXX").text == "34"


def test_libretranslates_frontend_settings(base_url):
    settings = http().get(f"{base_url}/frontend/settings").json()
    assert settings["charLimit"] == 6000 and settings["keyRequired"] is False and settings["apiKeys"] is False
    assert settings["language"]["source"] == {"code": "auto", "name": "Auto Detect"}
    assert settings["language"]["target"]["code"] in {"de", "en", "es", "fr", "it", "zxx"}
    assert settings["filesTranslation"] is True
    assert settings["supportedFilesFormat"] == [
        ".txt",
        ".html",
        ".htm",
        ".docx",
        ".pptx",
        ".xlsx",
        ".xlf",
        ".xliff",
        ".srt",
        ".vtt",
    ]
