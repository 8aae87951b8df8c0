"""DeepL's v2 glossaries: entries read from TSV and CSV and refused by name, kept across a restart under
--data-dir, managed and applied through DeepL's own SDK and Weblate's recorded requests, and named on
gRPC Translate; a term found in the source comes out as its target term (forced where the translation
missed it), on the bundled multilingual numbers model."""

from __future__ import annotations

import threading

import deepl
import grpc
import pytest

from service.core.translation.glossaries import Dictionary, GlossaryStore, Term, read_entries
from service.core.translation.term_forcing import occurrences
from service.errors import InvalidArgument, NotFound
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_thread import ServerThread

from .http_client import http

deepl.http_client.max_network_retries = 0


def test_entries_are_read_from_tsv_and_csv_and_refused_by_name():
    assert read_entries("twelve\t21\n\nthousand\tk\n", "tsv") == (Term("twelve", "21"), Term("thousand", "k"))
    assert read_entries('"a, b",c\nd,e,en,de\n', "csv") == (Term("a, b", "c"), Term("d", "e"))
    for text, entries_format, message in [
        ("one", "tsv", "entries: line 1: a source and a target term"),
        ("a\tb\nA\t\n", "tsv", "entries: line 2: an empty term"),
        ("a\tb\na\tc", "tsv", "entries: line 2: 'a' is listed twice"),
        ("\n\n", "tsv", "entries: no entries"),
        ("a\tb", "xlsx", "entries_format: 'xlsx'; one of tsv, csv"),
        ('"a\rb",c', "csv", "entries: line 1: a term over 1024 characters or with a tab, a line break"),
        ("a\u2028b,c", "csv", "entries: line 1: a term over 1024 characters or with a tab, a line break"),
        ("a\x07,c", "csv", "with a tab, a line break or a control character"),
        ("a\rb,c", "csv", "entries: not CSV: new-line character seen in unquoted field"),
    ]:
        with pytest.raises(InvalidArgument, match=message):
            read_entries(text, entries_format)


def test_terms_are_found_as_whole_words_case_insensitively():
    terms = [Term("New York", "NY"), Term("york", "Y"), Term("a", "b")]
    found = occurrences("Flights to new york and York, a banana", terms)
    assert [(t.source, start) for t, start, _ in found] == [("New York", 11), ("york", 24), ("a", 30)]


def test_the_store_outlives_a_restart(tmp_path):
    first = GlossaryStore(tmp_path / "data")
    made = first.create("g", (Dictionary("en", "zxx", (Term("twelve", "21"),)),))
    again = GlossaryStore(tmp_path / "data")
    assert again.get(made.glossary_id) == made and [g.glossary_id for g in again.all()] == [made.glossary_id]
    again.delete(made.glossary_id)
    with pytest.raises(NotFound, match="glossary_id: no glossary"):
        GlossaryStore(tmp_path / "data").get(made.glossary_id)
    assert GlossaryStore(None).durable is False


def test_merges_from_two_processes_stores_at_once_all_land(tmp_path):
    """What two API processes do with one glossary (each its own store on the shared data directory): every
    PATCH's terms are kept, none lost to the other's write of what it had read."""
    made = GlossaryStore(tmp_path).create("g", (Dictionary("en", "zxx", (Term("start", "0"),)),))
    stores, rounds = [GlossaryStore(tmp_path) for _ in range(2)], 200
    start = threading.Barrier(2)

    def merge(store: GlossaryStore, name: str) -> None:
        start.wait()
        for i in range(rounds):
            store.update(made.glossary_id, None, (Dictionary("en", "zxx", (Term(f"{name}{i}", str(i)),)),))

    threads = [threading.Thread(target=merge, args=(store, name)) for store, name in zip(stores, "ab")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kept = {term.source for term in GlossaryStore(tmp_path).get(made.glossary_id).only.entries}
    assert kept == {"start"} | {f"{name}{i}" for name in "ab" for i in range(rounds)}


def test_a_glossary_another_process_deleted_takes_no_merge(tmp_path):
    first, second = GlossaryStore(tmp_path), GlossaryStore(tmp_path)
    made = first.create("g", (Dictionary("en", "zxx", (Term("a", "b"),)),))
    second.delete(made.glossary_id)
    for change in (
        lambda: first.update(made.glossary_id, "new", (Dictionary("en", "zxx", (Term("c", "d"),)),)),
        lambda: first.replace(made.glossary_id, Dictionary("en", "zxx", (Term("c", "d"),))),
    ):
        with pytest.raises(NotFound, match="glossary_id: no glossary"):
            change()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def server(multilingual_numbers_dir, data_dir):
    running = ServerThread([multilingual_numbers_dir], data_dir=str(data_dir))
    yield running
    running.close()


def translator_of(server) -> deepl.Translator:
    return deepl.Translator("any-key", server_url=f"http://localhost:{server.server.http.port}")


def test_deepls_sdk_manages_glossaries_and_they_outlive_a_restart(server, multilingual_numbers_dir, data_dir):
    translator = translator_of(server)
    pairs = {(p.source_lang, p.target_lang) for p in translator.get_glossary_languages()}
    assert {("zxx", "fr"), ("en", "zxx"), ("fr", "de")} <= pairs
    made = translator.create_glossary("numbers", "ZXX", "FR", {"12": "quinze", "405": "cinq cent"})
    assert (made.name, made.ready, made.source_lang, made.target_lang, made.entry_count) == (
        "numbers",
        True,
        "ZXX",
        "FR",
        2,
    )
    assert made.creation_time.tzinfo is not None
    assert translator.get_glossary(made.glossary_id).name == "numbers"
    assert translator.get_glossary_entries(made) == {"12": "quinze", "405": "cinq cent"}
    restarted = ServerThread([multilingual_numbers_dir], data_dir=str(data_dir))
    try:
        again = translator_of(restarted)
        assert made.glossary_id in {g.glossary_id for g in again.list_glossaries()}
        again.delete_glossary(made)
        with pytest.raises(deepl.GlossaryNotFoundException):
            again.get_glossary(made.glossary_id)
    finally:
        restarted.close()


def test_a_glossarys_terms_come_out_as_its_target_terms(server):
    translator = translator_of(server)
    glossary = translator.create_glossary("fr", "ZXX", "FR", {"12": "quinze", "405": "cinq cent"})
    plain = translator.translate_text(["12", "405", "7"], source_lang="ZXX", target_lang="FR")
    assert [r.text for r in plain] == ["douze", "quatre cent cinq", "sept"]
    termed = translator.translate_text(["12", "405", "7"], source_lang="ZXX", target_lang="FR", glossary=glossary)
    assert termed[0].text == "quinze" and termed[1].text.startswith("cinq cent") and termed[2].text == "sept"
    words = translator.create_glossary("digits", "EN", "ZXX", {"twelve": "21"})
    assert (
        "21"
        in translator.translate_text(
            "three hundred and twelve", source_lang="EN", target_lang="ZXX", glossary=words
        ).text
    )
    request = pb.TranslateRequest(
        texts=["12"], source_language="zxx", target_language="fra_Latn", glossary_id=glossary.glossary_id
    )
    (t,) = server.stub().Translate(request, timeout=60).translations
    assert t.text == "quinze"


def test_a_do_not_translate_term_comes_out_whole(server):
    """A term forced into a language of spaces ends a word: the model's continuation cannot glue onto it
    (without the rule, "256" forced came out "2560")."""
    translator = translator_of(server)
    kept = translator.create_glossary("kept", "ZXX", "FR", {n: n for n in ("256", "146", "498", "653")})
    texts = ["256", "146", "498", "653"]
    assert [
        r.text for r in translator.translate_text(texts, source_lang="ZXX", target_lang="FR", glossary=kept)
    ] == texts


def test_weblates_glossary_calls(server):
    """As Weblate's DeepL machinery sends them: the pairs, the list, a TSV glossary by JSON, a translation
    naming it, the oldest deleted."""
    base = f"http://localhost:{server.server.http.port}"
    key = {"authorization": "DeepL-Auth-Key k"}
    pairs = http().get(f"{base}/v2/glossary-language-pairs", headers=key).json()["supported_languages"]
    assert {"source_lang": "zxx", "target_lang": "de"} in pairs
    created = http().post(
        f"{base}/v2/glossaries",
        headers=key,
        json={
            "name": "weblate:1:ZXX:DE",
            "source_lang": "ZXX",
            "target_lang": "DE",
            "entries": "7\tsechs",
            "entries_format": "tsv",
        },
    )
    assert created.status_code == 201, created.text
    glossary_id = created.json()["glossary_id"]
    listed = http().get(f"{base}/v2/glossaries", headers=key).json()["glossaries"]
    assert {g["name"]: g["glossary_id"] for g in listed}["weblate:1:ZXX:DE"] == glossary_id
    body = {
        "text": ["7", "8"],
        "source_lang": "ZXX",
        "target_lang": "DE",
        "tag_handling": "xml",
        "ignore_tags": ["x"],
        "glossary_id": glossary_id,
    }
    translated = http().post(f"{base}/v2/translate", headers=key, json=body).json()["translations"]
    assert [t["text"] for t in translated] == ["sechs", "acht"]
    assert http().delete(f"{base}/v2/glossaries/{glossary_id}", headers=key).status_code == 204
    gone = http().delete(f"{base}/v2/glossaries/{glossary_id}", headers=key)
    assert gone.status_code == 404 and gone.json()["message"].startswith("glossary_id: no glossary")


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"glossary_id": "nope", "source_lang": "ZXX"}, 404, "glossary_id: no glossary 'nope' on this server"),
        ({"glossary_id": "GLOSSARY"}, 400, "source_lang: required with a glossary"),
        (
            {"glossary_id": "GLOSSARY", "source_lang": "EN"},
            400,
            "glossary_id: glossary 'GLOSSARY' is for zxx to fr, not en to fr",
        ),
    ],
)
def test_a_glossary_that_does_not_fit_is_refused_in_deepls_shape(server, body, status, message):
    base = f"http://localhost:{server.server.http.port}"
    glossary_id = translator_of(server).create_glossary("g", "ZXX", "FR", {"1": "un"}).glossary_id
    fields = {"text": ["12"], "target_lang": "FR", **{k: v.replace("GLOSSARY", glossary_id) for k, v in body.items()}}
    response = http().post(f"{base}/v2/translate", json=fields)
    assert response.status_code == status and response.json()["message"] == message.replace("GLOSSARY", glossary_id)


def test_bad_glossaries_are_refused_by_name(server):
    base = f"http://localhost:{server.server.http.port}"
    for body, message in [
        (
            {"name": "g", "source_lang": "EN", "target_lang": "JA", "entries": "a\tb"},
            "target_lang: 'en' to 'ja': no served model",
        ),
        (
            {"name": "g", "source_lang": "EN", "target_lang": "ZXX", "entries": "a"},
            "entries: line 1: a source and a target term",
        ),
        ({"source_lang": "EN", "target_lang": "ZXX", "entries": "a\tb"}, "name: required"),
        (
            {"name": "g", "source_lang": "EN", "target_lang": "ZXX", "entries": "a\tb", "dictionaries": []},
            "dictionaries: not a parameter",
        ),
    ]:
        response = http().post(f"{base}/v2/glossaries", json=body)
        assert response.status_code == 400 and response.json()["message"].startswith(message), response.text
    request = pb.TranslateRequest(texts=["12"], source_language="zxx", target_language="fr", glossary_id="nope")
    with pytest.raises(grpc.RpcError) as refused:
        server.stub().Translate(request, timeout=60)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
