"""A server split across processes (--api-processes 2), started as users start it: two API processes share
the default ports and both answer, the engine process runs the models for both, the metrics port sums
their counts and reports each one's CPU and memory, a client that leaves frees its rows in the engine,
glossaries and document jobs are shared by both, a dead API process is replaced (its document jobs
translated by its replacement), and SIGTERM drains them all."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import deepl
import grpc
import httpx
import numpy as np
import pytest

from service.core.translation.document_store import DocumentStore
from service.grpc_api.client import Client
from service.grpc_api.pb import inference_pb2 as pb
from testing.server_process import ServerProcess

from .default_ports import default_ports
from .waits import wait_until

# all-MiniLM-L6-v2's embedding of this sentence starts so (sentence-transformers; design notes)
SENTENCE = "The delivery truck, which was late, blocked the narrow street."
REFERENCE = [0.00677752, 0.05905368, 0.04631271, 0.06658518, 0.05197431]
ACCESS = re.compile(r"\[(api-\d)\] attnserve\.access")


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def embed_on_new_connection(target: str, text: str) -> list[float]:
    """One Embed call on a channel of its own: a new connection, which the kernel gives either process."""
    with Client(target) as client:
        return client.embed([text], model="minilm").vectors[0].tolist()


def http_embed(port: int, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/embeddings", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def deepl_on_new_connection(port: int) -> deepl.Translator:
    """DeepL's client, with a connection of its own."""
    return deepl.Translator("any-key", server_url=f"http://localhost:{port}")


def upload_document(port: int, text: str) -> dict:
    """A txt document uploaded on a new connection: its handle (document_id, document_key)."""
    fields = {"target_lang": "FR", "source_lang": "ZXX"}
    answer = httpx.post(f"http://localhost:{port}/v2/document", files={"file": ("n.txt", text)}, data=fields)
    assert answer.status_code == 200, answer.text
    return answer.json()


def document_call(port: int, handle: dict, result: bool = False) -> httpx.Response:
    """The job's status, or its result, asked on a new connection."""
    url = f"http://localhost:{port}/v2/document/{handle['document_id']}" + ("/result" if result else "")
    return httpx.post(url, json={"document_key": handle["document_key"]}, timeout=60)


def job_status(port: int, handle: dict) -> str:
    answer = document_call(port, handle)
    assert answer.status_code == 200, answer.text
    return answer.json()["status"]


@pytest.fixture(scope="module")
def split(minilm_dir, numbers_dir, multilingual_numbers_dir):
    """`attnserve serve --api-processes 2` on the default host and ports."""
    models = (str(minilm_dir), str(numbers_dir), str(multilingual_numbers_dir))
    with default_ports():
        server = ServerProcess("--api-processes", "2", models=models, listen=())
        yield server
        assert server.stop() == 0, server.output()


def test_two_api_processes_share_the_ports_and_both_answer(split):
    api = split.children()
    assert len(api) == 2 and all("service.split.api_process" in command_line(pid) for pid in api)
    for _ in range(24):
        assert np.allclose(embed_on_new_connection("localhost:50051", SENTENCE)[:5], REFERENCE, atol=1e-5)
        status, body = http_embed(8080, {"model": "minilm", "input": SENTENCE})
        assert status == 200 and np.allclose(body["data"][0]["embedding"][:5], REFERENCE, atol=1e-5)
    # Each answered call writes an access line, named by the process that answered it.
    answered = wait_until(lambda: set(ACCESS.findall(split.output())) >= {"api-1", "api-2"}, what="both answer")
    assert answered


def test_generation_streams_through_the_engine_and_a_client_that_leaves_frees_its_rows(split):
    with Client("127.0.0.1:50051") as client:
        whole = client.generate("1 2 3", model="numbers")
        streamed = list(client.generate_stream("1 2 3", model="numbers"))
        assert "".join(m.text for m in streamed) == whole.text
        assert [t for m in streamed for t in m.token_ids] == list(whole.token_ids)
        assert streamed[-1].finish_reason == whole.finish_reason == pb.FINISH_REASON_EOS
        # A long answer, left after its first message: the engine frees its row.
        params = pb.GenerationParams(max_new_tokens=60, ignore_eos=True)
        call = client.stub.GenerateStream(pb.GenerateRequest(model="numbers", input="7 7 7", params=params))
        assert next(call).token_ids
        assert split.metric("attnserve_kv_cache_usage_ratio", model="numbers") > 0
        call.cancel()
    wait_until(lambda: split.metric("attnserve_kv_cache_usage_ratio", model="numbers") == 0, what="rows freed")
    wait_until(lambda: split.metric("attnserve_requests_running") == 0, what="no call running")


def test_bad_input_is_refused_by_either_process_naming_the_field(split):
    for _ in range(8):
        with Client("127.0.0.1:50051") as client, pytest.raises(grpc.RpcError) as refused:
            client.embed([], model="minilm")
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "inputs" in refused.value.details()
        status, body = http_embed(8080, {"model": "minilm", "input": "x" * 10, "dimensions": 0})
        assert status == 400 and "dimensions" in json.dumps(body)
    assert np.allclose(embed_on_new_connection("127.0.0.1:50051", SENTENCE)[:5], REFERENCE, atol=1e-5)


def test_the_metrics_port_sums_both_processes(split):
    def embeds() -> float:
        return split.metric("attnserve_requests_total", rpc="Embed", code="OK")

    before = embeds()
    for _ in range(10):
        embed_on_new_connection("127.0.0.1:50051", "a short text")
    wait_until(lambda: embeds() == before + 10, what="10 Embed calls counted")
    text = urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=5).read().decode()
    assert len(re.findall(r"^# HELP attnserve_requests_total ", text, re.M)) == 1  # one family, not one a process
    assert re.search(r'^vllm:num_requests_running\{model_name="minilm"\} 0\.0$', text, re.M)
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    problems = [line for line in checked.stdout.splitlines() + checked.stderr.splitlines() if "vllm:" not in line]
    assert not problems, problems  # promtool asks only that vLLM's names (the picker reads them) lose their ':'


def test_the_metrics_port_reports_each_api_processs_cpu_and_memory(split):
    for _ in range(10):
        embed_on_new_connection("127.0.0.1:50051", "a short text")
    wait_until(lambda: len(split.children()) == 2, what="both API processes running")
    before = split.children_cpu_seconds()  # read from /proc here, as the engine reads it
    text = urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=5).read().decode()
    after = split.children_cpu_seconds()
    cpu = dict(re.findall(r'^attnserve_api_process_cpu_seconds_total\{process="(\d)"\} (\S+)$', text, re.M))
    memory = dict(re.findall(r'^attnserve_api_process_resident_memory_bytes\{process="(\d)"\} (\S+)$', text, re.M))
    assert set(cpu) == set(memory) == {"1", "2"}
    assert 0 < before - 1e-6 <= sum(float(v) for v in cpu.values()) <= after + 1e-6
    assert all(50e6 < float(v) < 4e9 for v in memory.values())  # an API process holds the doors and tokenizers


def test_a_glossary_and_a_document_job_made_through_one_process_are_served_by_both(split):
    glossary = deepl_on_new_connection(8080).create_glossary("numbers", "ZXX", "FR", {"12": "quinze"})
    for _ in range(12):  # each call on a new connection, which the kernel gives either process
        termed = deepl_on_new_connection(8080).translate_text(
            "12", source_lang="ZXX", target_lang="FR", glossary=glossary
        )
        assert termed.text == "quinze"
        assert glossary.glossary_id in {g.glossary_id for g in deepl_on_new_connection(8080).list_glossaries()}
    assert set(re.findall(r"\[(api-\d)\] attnserve\.access.* deepl\.translate ", split.output())) == {"api-1", "api-2"}
    handle = upload_document(8080, "12\n\n405\n")
    wait_until(lambda: job_status(8080, handle) == "done", what="the document translated")
    for _ in range(6):
        assert job_status(8080, handle) == "done"
    french = deepl_on_new_connection(8080).translate_text(["12", "405"], source_lang="ZXX", target_lang="FR")
    result = document_call(8080, handle, result=True)
    assert result.status_code == 200 and result.text == f"{french[0].text}\n\n{french[1].text}\n"
    again = document_call(8080, handle, result=True)
    assert again.status_code == 404 and "downloaded already" in again.text


def test_a_dead_api_process_is_replaced_while_the_other_serves(split):
    first, second = split.children()
    os.kill(first, signal.SIGKILL)
    # Once it is gone (connections it had not taken yet are reset, and a gRPC client retries them), the other
    # serves every new connection, and its replacement takes none before it can serve it.
    wait_until(lambda: first not in split.children(), what="the killed process reaped")
    for _ in range(6):
        assert np.allclose(embed_on_new_connection("127.0.0.1:50051", SENTENCE)[:5], REFERENCE, atol=1e-5)
    replaced = wait_until(lambda: len(split.children()) == 2 and first not in split.children())
    assert replaced and second in split.children()
    wait_until(split.ready, what="the replacement serves")
    assert np.allclose(embed_on_new_connection("127.0.0.1:50051", SENTENCE)[:5], REFERENCE, atol=1e-5)


def test_sigterm_lets_a_running_stream_finish_then_every_process_exits(numbers_dir):
    server = ServerProcess("--api-processes", "2", "--http-port", "-1", models=(str(numbers_dir),))
    api = server.children()
    params = dict(max_new_tokens=60, ignore_eos=True)
    with Client(server.target) as client:
        whole = client.generate("1 2 3", model="numbers", **params)
        stream = client.generate_stream("1 2 3", model="numbers", **params)
        first = next(stream)
        server.process.send_signal(signal.SIGTERM)
        rest = list(stream)
    assert rest[-1].finish_reason == pb.FINISH_REASON_LENGTH
    assert first.text + "".join(m.text for m in rest) == whole.text and len(whole.token_ids) == 60
    assert server.stop() == 0
    assert not [pid for pid in api if Path(f"/proc/{pid}").exists() and "api_process" in command_line(pid)]


def test_the_document_job_of_a_dead_api_process_is_translated_by_its_replacement(multilingual_numbers_dir, tmp_path):
    server = ServerProcess("--api-processes", "2", "--data-dir", str(tmp_path), models=(str(multilingual_numbers_dir),))
    try:
        lines = [str(n) for n in range(1, 2000)]  # seconds of work: it is still translating when its process is killed
        handle = upload_document(server.http_port, "\n\n".join(lines))
        wait_until(lambda: job_status(server.http_port, handle) == "translating", what="the job translating")
        store = DocumentStore(tmp_path)
        owner = store.get(handle["document_id"]).owner
        store.close()
        assert owner in server.children()
        os.kill(owner, signal.SIGKILL)
        wait_until(lambda: len(server.children()) == 2 and owner not in server.children(), what="a replacement")
        wait_until(lambda: job_status(server.http_port, handle) == "done", what="the job translated again")
        result = document_call(server.http_port, handle, result=True)
        french = deepl_on_new_connection(server.http_port).translate_text(
            lines[:3], source_lang="ZXX", target_lang="FR"
        )
        assert result.text.split("\n\n")[:3] == [t.text for t in french]
        assert "document jobs it was translating, queued again: 1" in server.output()
    finally:
        assert server.stop() == 0, server.output()
