"""The server as users start it: `attnserve serve` with its default host and ports, reached the ways users
reach it (127.0.0.1, ::1 and localhost; the openai SDK, a gRPC channel, a scrape), the README's own
OpenAI example run verbatim, and the serve path loading nothing of the build side."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import openai
import pytest

from service.grpc_api.client import Client
from service.ops.listen import listening_host, listening_sockets
from testing.server_process import ServerProcess
from testing.server_thread import ServerThread

from .default_ports import default_ports

ROOT = Path(__file__).resolve().parent.parent
# `attnserve serve` as its console script runs it, that lists at exit what it loaded of the build side.
PROBE = (
    "import atexit, sys;"
    "atexit.register(lambda: print('build side loaded:', sorted(m for m in sys.modules "
    "if m == 'torch' or m.split('.')[0] == 'model'), file=sys.stderr, flush=True));"
    "from cli.main import main; main()"
)
ADDRESSES = {"127.0.0.1": "127.0.0.1", "::1": "[::1]", "localhost": "localhost"}


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def server(minilm_dir, numbers_dir, multilingual_numbers_dir, number_rankers, whisper_tiny_en):
    """`attnserve serve --models minilm numbers numbers-multilingual numbers-reranker numbers-language
    whisper-tiny.en`: nothing else, as `make run` serves them after its build."""
    models = (str(minilm_dir), str(numbers_dir), str(multilingual_numbers_dir), *map(str, number_rankers.values()))
    models += (str(whisper_tiny_en),)
    with default_ports():
        process = ServerProcess(models=models, listen=(), launcher=(sys.executable, "-c", PROBE))
        yield process
        if process.process.poll() is None:
            process.stop()


def test_it_listens_on_the_default_ports_of_every_address(server):
    assert (server.port, server.http_port, server.metrics_port) == (50051, 8080, 9464)
    listening = next(line for line in server.output().splitlines() if "listening:" in line)
    assert "gRPC on [::]:50051 (IPv4 and IPv6)" in listening, listening
    assert "HTTP API on [::]:8080 (IPv4 and IPv6)" in listening, listening
    assert "metrics on [::]:9464 (IPv4 and IPv6)" in listening, listening


@pytest.mark.parametrize("address", list(ADDRESSES))
def test_every_door_answers_by_ipv4_ipv6_and_localhost(server, address):
    if address == "::1" and not ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    host = ADDRESSES[address]
    with openai.OpenAI(base_url=f"http://{host}:8080/v1", api_key="unused", max_retries=0) as sdk:
        by_http = sdk.embeddings.create(model="minilm", input=["a cat sleeps"], encoding_format="float")
    with Client(f"{host}:50051") as client:
        by_grpc = client.embed(["a cat sleeps"], model="minilm").vectors
    np.testing.assert_allclose(by_http.data[0].embedding, by_grpc[0], atol=1e-6)
    assert len(by_grpc[0]) == 384
    scrape = urllib.request.urlopen(f"http://{host}:9464/metrics", timeout=10).read().decode()
    assert re.search(r'attnserve_requests_total\{code="200",model="minilm",rpc="http.embeddings"\} [1-9]', scrape)


def test_without_ipv6_every_port_listens_on_every_ipv4_address(minilm_dir, monkeypatch, caplog):
    """A kernel without IPv6 cannot make the dual-stack socket: 0.0.0.0 on every port, and the log says so."""
    monkeypatch.setattr(socket, "has_dualstack_ipv6", lambda: False)
    with caplog.at_level("WARNING", logger="attnserve.listen"):
        server = ServerThread([minilm_dir])
    try:
        assert server.server.config.host == "0.0.0.0"
        ports = (server.server.http.port, server.server.metrics_server.port)
        assert server.server.http.addresses == [f"0.0.0.0:{ports[0]}"]
        assert server.server.metrics_server.addresses == [f"0.0.0.0:{ports[1]}"]
        assert "this kernel has no IPv6: listening on every IPv4 address (0.0.0.0)" in caplog.text
        with Client(server.target) as client:
            assert len(client.embed(["a cat sleeps"]).vectors[0]) == 384
    finally:
        server.close()


@pytest.mark.parametrize("host", ["[::]", "127.0.0.1", "localhost"])
def test_connections_to_the_http_port_send_at_once(host):
    """Nagle's algorithm off on every accepted connection (asyncio does it only for IPPROTO_TCP sockets):
    otherwise an answer written as headers, then body, waits for the client's delayed acknowledgement,
    40 ms for each request after a keep-alive connection's first."""

    async def accepted_nodelay() -> list[int]:
        found: list[int] = []

        async def handle(reader, writer):
            found.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        for i, sock in enumerate(listening_sockets(listening_host(host), 0)):
            server = await asyncio.start_server(handle, sock=sock)
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2], family=sock.family)
            while len(found) <= i:  # until this socket's connection is accepted
                await asyncio.sleep(0.001)
            writer.close()
            server.close()
        return found

    flags = asyncio.run(accepted_nodelay())
    assert flags and all(flags)


def readme_openai_example() -> str:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"The OpenAI SDKs work unchanged:\n\n```python\n(.*?)```", readme, re.S)
    assert block, "README.md's OpenAI example"
    return block.group(1)


def test_the_readme_openai_example_works_verbatim(server):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(readme_openai_example(), "README.md", "exec"), {})
    assert printed.getvalue() == "three hundred and twelve thousand, four hundred and five"


def readme_block(after: str, language: str) -> str:
    readme = (ROOT / "README.md").read_text()
    block = re.search(re.escape(after) + rf"\n\n```{language}\n(.*?)```", readme, re.S)
    assert block, f"README.md's block after {after!r}"
    return block.group(1)


def test_the_readme_translation_examples_work_verbatim(server, tmp_path, monkeypatch):
    """DeepL's own client, unchanged, and LibreTranslate's requests by curl, at the default HTTP port."""
    printed = io.StringIO()
    monkeypatch.chdir(tmp_path)  # the example's document and its translation are written here
    with contextlib.redirect_stdout(printed):
        exec(compile(readme_block("DeepL's Python client works unchanged:", "python"), "README.md", "exec"), {})
    assert printed.getvalue() == (
        "trois cent douze mille quatre cent cinq ZXX\ndreihundertzwölf\n\nsieben\n312405 FR\n"
        "trois cent douze mille <b>quatre cent cinq</b>\nnombre douze\ntrois cent douze\n\nsept\n\n"
    )
    script = readme_block("tests/test_markup_serving.py sends as recorded:", "sh")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    decoder, out, recorded = json.JSONDecoder(), done.stdout.strip(), []
    while out:  # the answers, one after another
        answer, end = decoder.raw_decode(out)
        recorded.append(answer)
        out = out[end:].lstrip()
    assert recorded[0]["translations"][0]["text"] == 'trois cent douze mille <x id="3"></x>quatre cent cinq'
    assert (
        recorded[1]["translatedText"]
        == "<p>douze</p><p>trois cent douze mille <b>quatre cent cinq</b> <code>34</code></p>"
    )
    answers = []
    for command in readme_block("LibreTranslate's shapes, with curl:", "sh").strip().splitlines():
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout))
    assert answers[0] == {
        "translatedText": "trois cent douze mille quatre cent cinq",
        "detectedLanguage": {"confidence": 100.0, "language": "zxx"},
    }
    assert answers[1]["translatedText"] == ["twelve", "seven"] and len(answers[1]["alternatives"]) == 2
    assert answers[2][0]["language"] == "fr"
    assert {"code": "en", "name": "English", "targets": ["de", "es", "fr", "zxx"]} in answers[3]


def test_the_readme_transcription_examples_work_verbatim(server, tmp_path, monkeypatch):
    """espeak-ng speaks, curl uploads (the install line aside), the OpenAI SDK asks for subtitles, and
    `attnserve transcribe` prints the segments: each answer as the README shows it."""
    monkeypatch.chdir(tmp_path)
    for command in readme_block("`make run` serves tiny.en beside the other models:", "sh").strip().splitlines():
        if command.startswith(("sudo ", "#")):
            continue
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    shown = readme_block("`make run` serves tiny.en beside the other models:", "sh").strip().splitlines()[-1]
    assert json.loads(done.stdout) == json.loads(shown.removeprefix("# "))
    example = readme_block("The OpenAI SDK works unchanged, subtitles too:", "python")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "README.md", "exec"), {})
    expected = [line.removeprefix("# ").removeprefix("#") for line in example.splitlines() if line.startswith("#")]
    assert printed.getvalue().strip().splitlines() == expected
    shown = readme_block("(`--format json --word-timestamps`: a JSON line per segment, with its words):", "sh")
    command, *output = shown.strip().splitlines()
    done = subprocess.run(["bash", "-c", f"{ROOT}/{command}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [line.removeprefix("# ") for line in output]


def test_the_readme_rerank_and_classify_examples_work_verbatim(server):
    """The bundled reranker and classifier by the gRPC client and by curl, at the default ports."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(readme_block("Rerank and Classify over gRPC:", "python"), "README.md", "exec"), {})
    assert printed.getvalue().splitlines() == ["1 quatre mille sept cent onze", "de"]
    command = readme_block("Cohere's and Jina's rerank shape, with curl:", "sh").strip()
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["index"] for r in results][:1] == [1] and len(results) == 2


def test_the_readme_tei_and_cohere_examples_work_verbatim(server, monkeypatch):
    """huggingface_hub's InferenceClient and Cohere's SDK, unchanged, and TEI's routes by curl, at the
    default HTTP port."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest's: no hub here
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(readme_block("InferenceClient works\nunchanged:", "python"), "README.md", "exec"), {})
        exec(compile(readme_block("Cohere's SDK works unchanged:", "python"), "README.md", "exec"), {})
    assert printed.getvalue().splitlines() == ["(2, 384)", "True", "fr", "384 48", "1"]
    answers = []
    for command in readme_block("TEI's other routes, with curl:", "sh").strip().splitlines():
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout))
    assert [r["index"] for r in answers[0]] == [1, 0] and 0 <= answers[0][1]["score"] < answers[0][0]["score"] <= 1
    assert len(answers[1]) == 1 and len(answers[1][0]) == 4


def test_the_readme_kserve_rest_examples_work_verbatim(server):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(readme_block("tritonclient.http works unchanged:", "python"), "README.md", "exec"), {})
    assert printed.getvalue() == "(2, 384)\n"
    command = readme_block("tritonclient.http works unchanged:", "python")  # the curl block follows it
    readme = (ROOT / "README.md").read_text()
    curl = re.search(re.escape(command) + r"```\n\n```sh\n(.*?)```", readme, re.S).group(1)
    done = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outputs"][0]["shape"] == [1, 384]


def test_serving_loads_nothing_of_the_build_side(server):
    """Last in this module: it stops the server, whose probe then says what it loaded."""
    assert server.stop() == 0
    loaded = [line for line in server.output().splitlines() if line.startswith("build side loaded:")]
    assert loaded == ["build side loaded: []"], server.output()[-2000:]
