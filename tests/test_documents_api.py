"""Documents translated through DeepL's /v2/document (its SDK's translate_document, unchanged) and
LibreTranslate's /translate_file: every format served, its text equal to the same pieces translated as
texts, its formatting kept; jobs that outlive a restart under --data-dir; bad uploads refused by name in
each API's shape, never with a 5xx."""

from __future__ import annotations

import io
import os
import sqlite3
import time

import deepl
import docx
import httpx
import openpyxl
import pptx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.core.translation.document_jobs import DocumentJobs
from service.core.translation.document_store import DONE, QUEUED, TRANSLATING, DocumentStore, new_job
from service.core.translation.files.formats import FORMATS
from testing.server_thread import ServerThread

from .http_client import http
from .waits import wait_until

deepl.http_client.max_network_retries = 0


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


def word_document(paragraphs: list[list[tuple[str, bool]]]) -> bytes:
    """A docx of paragraphs, each its runs as (text, bold)."""
    document = docx.Document()
    for runs in paragraphs:
        paragraph = document.add_paragraph()
        for text, bold in runs:
            paragraph.add_run(text).bold = bold
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_deepls_sdk_translates_a_docx_from_its_path(server, tmp_path):
    translator = translator_of(server)
    source, target = tmp_path / "numbers.docx", tmp_path / "numbers.fr.docx"
    source.write_bytes(word_document([[("12", False)], [("4", False), ("05", True)], [("7", True)]]))
    status = translator.translate_document_from_filepath(source, target, source_lang="ZXX", target_lang="FR")
    assert status.status.value == "done" and status.billed_characters == len("12405") + len("7")
    texts = [r.text for r in translator.translate_text(["12", "405", "7"], source_lang="ZXX", target_lang="FR")]
    translated = docx.Document(str(target))
    assert [p.text for p in translated.paragraphs] == texts
    assert [r.bold for r in translated.paragraphs[2].runs] == [True]


def deepl_url(server) -> str:
    return f"http://localhost:{server.server.http.port}/v2/document"


def upload(server, filename: str, data: bytes, **fields) -> httpx.Response:
    fields = {"target_lang": "FR", "source_lang": "ZXX", **fields}
    return http().post(deepl_url(server), files={"file": (filename, data)}, data=fields)


def finished(server, handle: dict) -> dict:
    """The job's status once it is done or failed."""

    def ended() -> dict | None:
        url = f"{deepl_url(server)}/{handle['document_id']}"
        status = http().post(url, json={"document_key": handle["document_key"]})
        assert status.status_code == 200, status.text
        return status.json() if status.json()["status"] in ("done", "error") else None

    return wait_until(ended, what=f"document {handle['document_id']} done or failed")


def translated(server, filename: str, data: bytes, **fields) -> bytes:
    answer = upload(server, filename, data, **fields)
    assert answer.status_code == 200, answer.text
    assert finished(server, answer.json())["status"] == "done"
    result = http().post(
        f"{deepl_url(server)}/{answer.json()['document_id']}/result",
        json={"document_key": answer.json()["document_key"]},
    )
    assert result.status_code == 200, result.text
    return result.content


def french(server, texts: list[str]) -> list[str]:
    return [r.text for r in translator_of(server).translate_text(texts, source_lang="ZXX", target_lang="FR")]


def slides(texts: list[str], notes: str) -> bytes:
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text, slide.placeholders[1].text = texts
    slide.notes_slide.notes_text_frame.text = notes
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def sheet() -> bytes:
    workbook = openpyxl.Workbook()
    workbook.active["A1"], workbook.active["A2"], workbook.active["A3"] = "12", 405, "=A2*2"
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


XLIFF_1 = (
    '<?xml version="1.0" encoding="UTF-8"?><xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">'
    '<file source-language="zxx" datatype="plaintext" original="n"><body>'
    '<trans-unit id="1"><source>12</source></trans-unit>'
    '<trans-unit id="2"><source><x id="p"/>405</source></trans-unit></body></file></xliff>'
)
XLIFF_2 = (
    '<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="zxx"><file id="f">'
    '<unit id="1"><segment><source>12</source></segment></unit>'
    '<unit id="2"><segment><source><ph id="p"/>405</source><target>old</target></segment></unit></file></xliff>'
)


def test_every_format_comes_back_in_its_own_format_with_its_text_translated(server):
    twelve, four_hundred_five, seven = french(server, ["12", "405", "7"])
    text = translated(server, "n.txt", b"12\n\n405\n").decode()
    assert text == f"{twelve}\n\n{four_hundred_five}\n"
    page = translated(server, "n.html", b"<html><body><p>12</p><p><b>7</b></p></body></html>").decode()
    assert page == f"<html><body><p>{twelve}</p><p><b>{seven}</b></p></body></html>"
    deck = pptx.Presentation(io.BytesIO(translated(server, "n.pptx", slides(["12", "405"], "7"))))
    shapes = deck.slides[0].shapes
    assert (shapes.title.text, deck.slides[0].placeholders[1].text) == (twelve, four_hundred_five)
    assert deck.slides[0].notes_slide.notes_text_frame.text == seven
    book = openpyxl.load_workbook(io.BytesIO(translated(server, "n.xlsx", sheet())))
    assert [cell.value for cell in book.active["A"]] == [twelve, 405, "=A2*2"]  # numbers and formulas left alone
    first = translated(server, "n.xlf", XLIFF_1.encode()).decode()
    assert f"<target>{twelve}</target>" in first and f'<target><x id="p"/>{four_hundred_five}</target>' in first
    assert 'target-language="fr"' in first
    second = translated(server, "n.xliff", XLIFF_2.encode()).decode()
    assert f"<target>{twelve}</target>" in second and f'<target><ph id="p"/>{four_hundred_five}</target>' in second
    assert 'trgLang="fr"' in second and "old" not in second
    cues = "1\n00:00:01,000 --> 00:00:02,000\n12\n\n2\n00:00:02,500 --> 00:00:04,000\n<i>7</i>\n\n"
    assert translated(server, "n.srt", cues.encode()).decode() == cues.replace("12", twelve).replace(
        ">7<", f">{seven}<"
    )
    web = "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\n12\n\n00:00:02.500 --> 00:00:04.000 align:start\n405\n"
    assert translated(server, "n.vtt", web.encode()).decode() == web.replace("12", twelve).replace(
        "405", four_hundred_five
    )


def test_a_file_keeps_its_name_in_any_script_and_its_format_under_either_extension(server):
    answer = upload(server, "числа.htm", b"<p>12</p>", output_format="html").json()
    finished(server, answer)
    result = http().post(
        f"{deepl_url(server)}/{answer['document_id']}/result", json={"document_key": answer["document_key"]}
    )
    assert result.status_code == 200 and result.text == f"<p>{french(server, ['12'])[0]}</p>"
    disposition = result.headers["content-disposition"]
    assert disposition == "attachment; filename=\"_____.htm\"; filename*=UTF-8''%D1%87%D0%B8%D1%81%D0%BB%D0%B0.htm"


def test_a_result_is_sent_once_and_only_with_its_key(server):
    answer = upload(server, "n.txt", b"12").json()
    assert finished(server, answer) == {"document_id": answer["document_id"], "status": "done", "billed_characters": 2}
    result = f"{deepl_url(server)}/{answer['document_id']}/result"
    wrong = http().post(result, json={"document_key": "0" * 64})
    assert wrong.status_code == 404 and "document_key" in wrong.json()["message"]
    unknown = http().post(f"{deepl_url(server)}/{'A' * 32}", json={"document_key": answer["document_key"]})
    assert unknown.status_code == 404 and "no document" in unknown.json()["message"]
    assert (
        http().post(result, data={"document_key": answer["document_key"]}).content == french(server, ["12"])[0].encode()
    )
    again = http().post(result, json={"document_key": answer["document_key"]})
    assert again.status_code == 404 and "downloaded already" in again.json()["message"]
    status = http().post(f"{deepl_url(server)}/{answer['document_id']}", json={"document_key": answer["document_key"]})
    assert status.json()["status"] == "downloaded"


def test_a_job_cut_off_by_a_stop_runs_again_when_the_server_starts(multilingual_numbers_dir, tmp_path):
    """A job left translating in the data directory (as a server that stopped mid-job leaves it) is
    translated by the next server on that directory."""
    store = DocumentStore(tmp_path)
    job = new_job(
        filename="n.txt", format="txt", target_language="fr", source_language="zxx", glossary_id=None, characters=2
    )
    store.add(job, b"12")
    store.set_status(job.document_id, TRANSLATING)
    store.close()
    restarted = ServerThread([multilingual_numbers_dir], data_dir=str(tmp_path))
    try:
        handle = {"document_id": job.document_id, "document_key": job.document_key}
        assert finished(restarted, handle)["status"] == "done"
        result = http().post(
            f"{deepl_url(restarted)}/{job.document_id}/result", json={"document_key": job.document_key}
        )
        assert result.content == french(restarted, ["12"])[0].encode()
        assert not list((tmp_path / "documents").iterdir())  # a result downloaded leaves no file behind
    finally:
        restarted.close()


def test_a_document_over_a_calls_sentences_is_sent_in_smaller_calls(multilingual_numbers_dir):
    small = ServerThread([multilingual_numbers_dir], translation_max_sentences=8)
    try:
        text = translated(small, "n.txt", "\n\n".join(["12"] * 30).encode()).decode()
        assert text == "\n\n".join(french(small, ["12"]) * 30)
    finally:
        small.close()


@pytest.fixture(scope="module")
def limited(multilingual_numbers_dir):
    running = ServerThread([multilingual_numbers_dir], document_max_bytes=4000, document_max_characters=50)
    yield running
    running.close()


def test_bad_uploads_are_refused_by_name_in_deepls_shape(server, limited):
    for answer, status, message in [
        (upload(server, "n.pdf", b"%PDF-1.7"), 400, "file: 'pdf': not a document format served; one of txt,"),
        (upload(server, "n", b"12"), 400, "file: a file name without an extension"),
        (upload(server, "n.docx", b"12"), 400, "file: not a docx file (not a zip package)"),
        (upload(server, "n.xlf", b"<xliff"), 400, "file: not an XLIFF file"),
        (upload(server, "n.xlf", b"<a/>"), 400, "file: not XLIFF 1.2 or 2.x"),
        (upload(server, "n.srt", b"12 --> 13"), 400, "file: not a SubRip (srt) file"),
        (upload(server, "n.txt", b"\xff\xfe\x00\xd8"), 400, "file: not a text file in UTF-8 or UTF-16"),
        (upload(server, "n.txt", b""), 400, "file: empty"),
        (upload(server, "n.txt", b" ...\n"), 400, "file: no text to translate"),
        (upload(server, "n.txt", b"12", target_lang=""), 400, "target_lang: required"),
        (
            upload(server, "n.txt", b"12", target_lang="JA"),
            400,
            "target_lang: 'ja': no served model translates into it",
        ),
        (upload(server, "n.txt", b"12", output_format="docx"), 400, "output_format: 'docx': a document comes back"),
        (upload(server, "n.txt", b"12", formality="more"), 400, "'formality' is not supported for given"),
        (upload(server, "n.txt", b"12", glossary_id="nope"), 404, "glossary_id: no glossary 'nope'"),
        (upload(server, "n.txt", b"12", colour="red"), 400, "colour: not a field of this call"),
        (http().post(deepl_url(server), data={"target_lang": "FR"}), 400, "file: required: the document, as a file"),
        (http().post(deepl_url(server), json={"target_lang": "FR"}), 400, "file: required: the document, as a file"),
        (upload(limited, "n.txt", b"12 " * 2000), 413, "(document_max_bytes)"),
        (
            upload(limited, "n.txt", b"12\n\n" * 30),
            413,
            "file: 60 characters of text; at most 50 (document_max_characters)",
        ),
        (http().post(f"{deepl_url(server)}/{'A' * 32}", json={}), 400, "document_key: required"),
        (http().post(f"{deepl_url(server)}/{'A' * 32}/result", json={"document_key": "k", "x": 1}), 400, "x: not a"),
    ]:
        assert answer.status_code == status and message in answer.json()["message"], answer.text
    assert upload(server, "n.txt", b"12").status_code == 200  # the server goes on serving


def test_a_file_whose_text_the_model_refuses_ends_as_an_error_its_status_names(server):
    answer = upload(server, "n.txt", b"12\x00").json()
    status = finished(server, answer)
    assert status["status"] == "error" and "NUL" in status["error_message"]
    result = http().post(
        f"{deepl_url(server)}/{answer['document_id']}/result", json={"document_key": answer["document_key"]}
    )
    assert result.status_code == 400 and "was not translated" in result.json()["message"]


def test_libretranslate_translates_a_file_and_sends_it_once(server):
    base = f"http://localhost:{server.server.http.port}"
    answer = http().post(
        f"{base}/translate_file", files={"file": ("n.txt", b"12")}, data={"source": "zxx", "target": "fr"}
    )
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert url.startswith(f"{base}/download_file/") and url.endswith(".txt")
    assert http().get(url).content == french(server, ["12"])[0].encode()
    again = http().get(url)
    assert again.status_code == 404 and "downloaded already" in again.json()["error"]
    for response, message in [
        (http().post(f"{base}/translate_file", files={"file": ("n.pdf", b"x")}, data={"target": "fr"}), "file: 'pdf'"),
        (http().post(f"{base}/translate_file", files={"file": ("n.txt", b"12")}, data={}), "target: required"),
        (http().get(f"{base}/download_file/nothing"), "no such file"),
    ]:
        assert response.status_code in (400, 404) and message in response.json()["error"], response.text
    settings = http().get(f"{base}/frontend/settings").json()
    assert settings["filesTranslation"] is True and ".docx" in settings["supportedFilesFormat"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(FORMATS),
    st.one_of(st.binary(max_size=300), st.text(max_size=200).map(str.encode), st.just(word_document([[("x", True)]]))),
)
def test_any_bytes_under_any_format_are_translated_or_refused_never_a_server_error(server, document_format, data):
    answer = upload(server, f"f.{document_format}", data)
    assert answer.status_code in (200, 400, 413), answer.text
    if answer.status_code == 200:
        assert finished(server, answer.json())["status"] in ("done", "error")
    else:
        assert answer.json()["message"].startswith("file: ")


def test_processes_sharing_a_store_claim_each_job_once_and_requeue_a_dead_ones(tmp_path):
    """The API processes of a split server share one store: a queued job is claimed by one of them, the
    jobs of one that died are queued again (and only its), and a done job is downloaded once."""
    first, second = DocumentStore(tmp_path), DocumentStore(tmp_path)
    order = dict(filename="n.txt", format="txt", target_language="fr", source_language="zxx", glossary_id=None)
    jobs = [first.add(new_job(characters=2, **order), b"12") for _ in range(3)]
    assert second.queued() == [job.document_id for job in jobs]
    assert first.claim(jobs[0].document_id) and not second.claim(jobs[0].document_id)
    assert second.get(jobs[0].document_id).owner == os.getpid()
    assert second.claim(jobs[1].document_id)
    with second._lock, second._db:  # as if another process, since gone, had claimed it
        second._db.execute("update jobs set owner = 1 where document_id = ?", (jobs[1].document_id,))
    assert first.requeue_interrupted(owner=1) == 1 and second.queued() == [jobs[1].document_id, jobs[2].document_id]
    assert second.get(jobs[0].document_id).status == TRANSLATING
    first.set_status(jobs[0].document_id, DONE)
    assert second.take_done(jobs[0].document_id) and not first.take_done(jobs[0].document_id)
    assert first.requeue_interrupted() == 0 and first.get(jobs[2].document_id).status == QUEUED


def test_a_jobs_progress_is_kept_in_the_store_so_either_process_tells_the_time_left(tmp_path):
    """The process translating a job writes its progress; a status call that lands on another process
    reads it from the store (a job not yet begun, or queued again, has no estimate)."""
    running, other = DocumentStore(tmp_path), DocumentStore(tmp_path)
    order = dict(filename="n.txt", format="txt", target_language="fr", source_language="zxx", glossary_id=None)
    job = running.add(new_job(characters=1000, **order), b"12")
    assert running.claim(job.document_id)
    assert DocumentJobs.seconds_remaining(other.get(job.document_id)) is None  # nothing translated yet
    with running._lock, running._db:  # claimed 1,000 s ago
        running._db.execute("update jobs set started = ? where document_id = ?", (time.time() - 1000, job.document_id))
    running.advance(job.document_id, 200)
    running.advance(job.document_id, 50)
    seen = other.get(job.document_id)
    assert seen.characters_done == 250
    assert 3000 <= DocumentJobs.seconds_remaining(seen) <= 3100  # 750 left at 0.25 a second (slower as time goes)
    assert running.requeue_interrupted() == 1
    again = other.get(job.document_id)
    assert (again.started, again.characters_done, DocumentJobs.seconds_remaining(again)) == (None, 0, None)


def test_a_store_of_an_earlier_release_gains_the_columns_added_since(tmp_path):
    with sqlite3.connect(tmp_path / "documents.sqlite3") as db:
        db.execute(
            "create table jobs (document_id text primary key, document_key text not null, status text not null, "
            "filename text not null, format text not null, target_language text not null, source_language text, "
            "glossary_id text, characters integer not null, error text, created real not null)"
        )
        db.execute("insert into jobs values ('A', 'K', 'translating', 'n.txt', 'txt', 'fr', 'zxx', null, 2, null, 0)")
    store = DocumentStore(tmp_path)
    assert store.get("A").owner is None and store.requeue_interrupted() == 1 and store.claim("A")
    store.advance("A", 2)
    assert store.get("A").characters_done == 2 and store.get("A").started > 0
