"""DeepL's v3 multilingual glossaries through DeepL's own SDK (DeepLClient's *_multilingual_glossary
helpers, unchanged): dictionaries created, merged, replaced, read and deleted; a translation takes the
dictionary of its pair; v2 and v3 see the same store; a first release's store moves into this one's."""

from __future__ import annotations

import sqlite3

import deepl
import pytest
from deepl.api_data import MultilingualGlossaryDictionaryEntries as Entries

from service.core.translation.glossaries import GLOSSARY_FILE, GlossaryStore, Term
from testing.server_thread import ServerThread

from .http_client import http

deepl.http_client.max_network_retries = 0


@pytest.fixture(scope="module")
def server(multilingual_numbers_dir):
    running = ServerThread([multilingual_numbers_dir])
    yield running
    running.close()


def client_of(server) -> deepl.DeepLClient:
    return deepl.DeepLClient("any-key", server_url=f"http://localhost:{server.server.http.port}")


def test_deepls_sdk_manages_multilingual_glossaries_and_a_translation_takes_its_pairs_dictionary(server):
    client = client_of(server)
    made = client.create_multilingual_glossary(
        "numbers", [Entries("ZXX", "FR", {"12": "quinze"}), Entries("ZXX", "DE", {"12": "fünfzehn"})]
    )
    assert made.name == "numbers" and made.creation_time.tzinfo is not None
    assert sorted((d.source_lang, d.target_lang, d.entry_count) for d in made.dictionaries) == [
        ("ZXX", "DE", 1),
        ("ZXX", "FR", 1),
    ]
    for target, term in (("FR", "quinze"), ("DE", "fünfzehn")):
        assert client.translate_text("12", source_lang="ZXX", target_lang=target, glossary=made).text == term
    with pytest.raises(deepl.DeepLException, match="has no dictionary for zxx to es"):
        client.translate_text("12", source_lang="ZXX", target_lang="ES", glossary=made.glossary_id)
    merged = client.update_multilingual_glossary_dictionary(made, Entries("ZXX", "FR", {"7": "neuf", "12": "onze"}))
    assert {(d.target_lang, d.entry_count) for d in merged.dictionaries} == {("FR", 2), ("DE", 1)}
    assert client.translate_text("12", source_lang="ZXX", target_lang="FR", glossary=made).text == "onze"
    replaced = client.replace_multilingual_glossary_dictionary(made, Entries("ZXX", "FR", {"405": "quatre"}))
    assert (replaced.target_lang, replaced.entry_count) == ("FR", 1)
    read = client.get_multilingual_glossary_entries(made, "ZXX", "FR").dictionaries[0]
    assert (read.source_lang, read.target_lang, read.entries) == ("zxx", "fr", "405\tquatre")
    assert client.update_multilingual_glossary_name(made, "renamed").name == "renamed"
    client.delete_multilingual_glossary_dictionary(made, source_lang="ZXX", target_lang="DE")
    assert [d.target_lang for d in client.get_multilingual_glossary(made.glossary_id).dictionaries] == ["FR"]
    assert client.get_glossary(made.glossary_id).entry_count == 1  # one dictionary: v2 reads it too
    one_pair = client.create_glossary("v2", "ZXX", "DE", {"7": "acht"})
    listed = {g.glossary_id: g for g in client.list_multilingual_glossaries()}
    assert [d.entry_count for d in listed[one_pair.glossary_id].dictionaries] == [1]
    client.delete_multilingual_glossary(made)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_multilingual_glossary(made.glossary_id)


def test_bad_multilingual_glossaries_are_refused_by_name(server):
    base = f"http://localhost:{server.server.http.port}/v3/glossaries"
    two = (
        http()
        .post(
            base,
            json={
                "name": "two",
                "dictionaries": [
                    {"source_lang": "zxx", "target_lang": "fr", "entries": "1\tun"},
                    {"source_lang": "zxx", "target_lang": "de", "entries": "1\teins"},
                ],
            },
        )
        .json()
    )
    for response, status, message in [
        (http().post(base, json={"name": "x", "dictionaries": []}), 400, "dictionaries: a list of dictionaries"),
        (http().post(base, json={"name": "", "dictionaries": []}), 400, "name: required"),
        (http().post(base, json={"name": "x", "dictionaries": [{"source_lang": "zxx"}]}), 400, "target_lang: required"),
        (
            http().post(
                base, json={"name": "x", "dictionaries": [{"source_lang": "zxx", "target_lang": "fr", "entries": "a"}]}
            ),
            400,
            "entries: line 1",
        ),
        (http().post(base, json={"name": "x", "dictionaries": ["tsv"]}), 400, "dictionaries[0]: an object"),
        (http().patch(f"{base}/{two['glossary_id']}", json={}), 400, "nothing to change"),
        (
            http().patch(
                f"{base}/{two['glossary_id']}",
                json={"dictionaries": [{"source_lang": "zxx", "target_lang": "fr", "entries": "1\tun"}] * 2},
            ),
            400,
            "dictionaries: a language pair listed twice",
        ),
        (
            http().get(f"{base}/{two['glossary_id']}/entries?source_lang=zxx&target_lang=es"),
            404,
            "no dictionary for zxx to es",
        ),
        (http().get(f"{base}/{two['glossary_id']}/entries?source_lang=zxx"), 400, "target_lang: required"),
        (http().get(f"{base}/nope"), 404, "no glossary 'nope'"),
        (
            http().get(f"http://localhost:{server.server.http.port}/v2/glossaries/{two['glossary_id']}"),
            400,
            "has 2 dictionaries",
        ),
    ]:
        assert response.status_code == status and message in response.json()["message"], response.text


def test_a_first_release_store_moves_into_dictionaries(tmp_path):
    with sqlite3.connect(tmp_path / GLOSSARY_FILE) as db:  # the table the first release wrote
        db.execute(
            "create table glossaries (id text primary key, name text not null, source_lang text not null, "
            "target_lang text not null, creation_time text not null, entries text not null)"
        )
        db.execute("insert into glossaries values ('g1', 'old', 'en', 'zxx', '2026-12-05T00:00:00.000Z', 'twelve\t21')")
    store = GlossaryStore(tmp_path)
    glossary = store.get("g1")
    assert (glossary.name, glossary.only.source_lang, glossary.only.target_lang) == ("old", "en", "zxx")
    assert glossary.only.entries == (Term("twelve", "21"),)
    assert GlossaryStore(tmp_path).get("g1") == glossary  # moved once, kept
