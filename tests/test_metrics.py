"""Metrics as operators see them: a real Prometheus scrapes a real server on loopback under load."""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from service.engine.call_price import MAX_PRICE
from service.grpc_api.client import Client
from service.grpc_api.pb import inference_pb2 as pb
from service.ops.inference_extension_metrics import NAMES
from service.ops.logs import JsonFormatter
from service.ops.metrics import observe_all
from testing.server_thread import ServerThread

from .waits import wait_until

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def metrics_url(server) -> str:
    return f"http://127.0.0.1:{server.server.metrics_server.port}"


@pytest.fixture(scope="module")
def prometheus(served, tmp_path_factory):
    """Debian's prometheus (make test installs it), scraping the server every second, with our alert rules."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed: `make test` installs Debian's prometheus package"
    workdir = tmp_path_factory.mktemp("prometheus")
    shutil.copy(DEPLOY / "prometheus" / "alerts.yml", workdir / "alerts.yml")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["alerts.yml"],
        "scrape_configs": [
            {
                "job_name": "attnserve",
                "static_configs": [{"targets": [f"127.0.0.1:{served.server.metrics_server.port}"]}],
            }
        ],
    }
    (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if http_get(f"{base}/-/ready")[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.2)
    else:
        process.kill()
        raise AssertionError(f"prometheus did not start: {process.stderr.read().decode()[-2000:]}")
    yield base
    process.terminate()
    process.wait(10)


def query(base: str, expression: str) -> list:
    status, body = http_get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expression})}")
    assert status == 200, body
    return json.loads(body)["data"]["result"]


def scalar(base: str, expression: str) -> float | None:
    result = query(base, expression)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_sees_rates_latencies_and_cache_usage_move(served, prometheus):
    # The session's server has answered other tests' calls: the load's are counted from here.
    registry = served.metrics_registry
    embeds_before = (
        registry.get_sample_value("attnserve_requests_total", {"rpc": "Embed", "model": "minilm", "code": "OK"}) or 0
    )
    generated_before = registry.get_sample_value("attnserve_generated_tokens_total", {"model": "numbers"}) or 0

    def decode_batches() -> tuple[float, float]:  # rows and steps of every decode step so far
        labels = {"model": "numbers", "stage": "decode"}
        return tuple(registry.get_sample_value(f"attnserve_batch_size_{k}", labels) or 0 for k in ("sum", "count"))

    rows_before, steps_before = decode_batches()
    embed_calls = generate_calls = 0
    stop = threading.Event()

    def embed_load():
        nonlocal embed_calls
        with Client(served.target) as client:
            while not stop.is_set():
                client.embed(["a sentence to embed, and then another one"] * 4)
                embed_calls += 1

    def generate_load():
        nonlocal generate_calls
        with Client(served.target) as client:
            while not stop.is_set():
                client.generate("7", ignore_eos=True, max_new_tokens=63)
                generate_calls += 1

    cache_seen = 0.0
    with ThreadPoolExecutor(5) as pool:
        futures = [pool.submit(embed_load)] + [pool.submit(generate_load) for _ in range(4)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not cache_seen:
            time.sleep(1)
            cache_seen = scalar(prometheus, 'max_over_time(attnserve_kv_cache_usage_ratio{model="numbers"}[1m])') or 0
        time.sleep(3)
        stop.set()
        [f.result() for f in futures]
    load_end = time.time()
    # Wait for a scrape that saw the whole load (every second; later on a busy machine).
    embed_ok = 'attnserve_requests_total{rpc="Embed", model="minilm", code="OK"}'
    generated = 'attnserve_generated_tokens_total{model="numbers"}'
    wait_until(
        lambda: (
            scalar(prometheus, embed_ok) == embeds_before + embed_calls
            and scalar(prometheus, generated) == generated_before + 63 * generate_calls
        ),
        what="a scrape after the load",
    )

    assert scalar(prometheus, 'up{job="attnserve"}') == 1
    assert cache_seen > 0, "cache usage never rose above 0 while generations ran"
    assert scalar(prometheus, 'attnserve_kv_cache_usage_ratio{model="numbers"}') == 0  # all rows freed
    assert scalar(prometheus, 'attnserve_kv_cache_capacity_tokens{model="numbers"}') == 64 * (64 + 32)
    assert 1 <= scalar(prometheus, 'attnserve_split_cost_tokens{model="minilm"}') <= MAX_PRICE  # exported, scraped
    assert scalar(prometheus, embed_ok) - embeds_before == embed_calls > 5  # every call counted, once
    since_load = math.ceil(time.time() - load_end)  # the rate over the load's last 10 s
    assert scalar(prometheus, f'sum(rate(attnserve_requests_total{{code="OK"}}[10s] offset {since_load}s))') > 1
    p50 = scalar(
        prometheus,
        'histogram_quantile(0.5, sum by (le) (rate(attnserve_request_duration_seconds_bucket{rpc="Embed"}[1m])))',
    )
    assert 0 < p50 < 1
    ttft = scalar(
        prometheus, "histogram_quantile(0.99, sum by (le) (rate(attnserve_time_to_first_token_seconds_bucket[1m])))"
    )
    assert 0 < ttft < 5
    rows, steps = decode_batches()
    assert 1 < (rows - rows_before) / (steps - steps_before) <= 4  # the four generation clients shared steps
    assert scalar(prometheus, generated) - generated_before == 63 * generate_calls > 0
    rules = json.loads(http_get(f"{prometheus}/api/v1/rules")[1])["data"]["groups"][0]["rules"]
    assert len(rules) == 8 and all(r["health"] == "ok" for r in rules)


def test_promtool_accepts_the_exposition(served):
    """promtool's lint passes on everything but the Inference Extension's names, whose colons (vLLM's
    names, which the endpoint picker reads) its naming convention flags; Prometheus takes them."""
    status, text = http_get(f"{metrics_url(served)}/metrics")
    assert status == 200 and "attnserve_build_info" in text
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    flagged = {line.split()[0] for line in result.stderr.splitlines() if line.strip()}
    assert flagged == set(NAMES), result.stdout + result.stderr
    assert (
        'vllm:num_requests_waiting{model_name="numbers"}' in text
        and 'vllm:kv_cache_usage_perc{model_name="numbers"}' in text
    )


def exposed_families(text: str) -> set[str]:
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M):
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "info": ["_info"]}
        names.update([name] + [name + s for s in suffixes.get(kind, [])])
    return names


def test_every_metric_the_dashboard_queries_is_exported(served):
    with Client(served.target) as client:  # touch every labelled series
        client.embed(["x"])
        client.generate("1")
    exposed = exposed_families(http_get(f"{metrics_url(served)}/metrics")[1])
    dashboard = json.loads((DEPLOY / "grafana" / "attnserve.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\battnserve_[a-z_]+", target["expr"])
    }
    assert len(queried) >= 12
    assert queried <= exposed, sorted(queried - exposed)
    alerts = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    assert set(re.findall(r"\battnserve_[a-z_]+", alerts)) <= exposed


def test_health_endpoints_follow_the_server(numbers_dir):
    server = ServerThread([numbers_dir], load=False)
    try:
        base = metrics_url(server)
        assert http_get(f"{base}/healthz") == (200, "ok\n")
        assert http_get(f"{base}/readyz")[0] == 503
        server.load()
        # Split, the API side tells the engine it serves over their link: ready once that message is read.
        wait_until(lambda: http_get(f"{base}/readyz") == (200, "ready\n"), what="ready once loaded")
        server.call_and_wait(server.server.core.start_draining)
        wait_until(lambda: http_get(f"{base}/readyz")[0] == 503, what="not ready while draining")
        assert http_get(f"{base}/nothing")[0] == 404
    finally:
        server.close()


def access_records(caplog) -> int:
    return sum(r.name == "attnserve.access" for r in caplog.records)


def test_one_json_access_line_per_call(served, caplog):
    caplog.set_level("INFO", logger="attnserve.access")
    with Client(served.target) as client:
        client.stub.Embed(pb.EmbedRequest(inputs=["hi", "there"]), metadata=[("x-request-id", "trace-42")])
        client.generate("312405")
        # A refused call is logged before its status reaches the caller, every time.
        for attempt in range(30):
            logged = access_records(caplog)
            with pytest.raises(grpc.RpcError):
                client.embed(["x"], model="nope")
            assert access_records(caplog) == logged + 1, f"attempt {attempt}: the refusal was not logged yet"
    records = [r for r in caplog.records if r.name == "attnserve.access"]
    assert len(records) == 32
    embed, generate, refused = records[-32], records[-31], records[-1]
    assert (embed.request_id, embed.rpc, embed.model, embed.code, embed.inputs) == (
        "trace-42",
        "Embed",
        "minilm",
        "OK",
        2,
    )
    assert embed.prompt_tokens == 3 + 3 and embed.seconds > 0
    assert (generate.rpc, generate.model, generate.generated_tokens, generate.finish_reason) == (
        "Generate",
        "numbers",
        10,
        "eos",
    )
    assert re.fullmatch(r"[0-9a-f]{32}", generate.request_id)
    assert (refused.code, refused.model) == ("NOT_FOUND", "")  # an unknown name never becomes a label

    line = json.loads(JsonFormatter().format(embed))
    assert line["logger"] == "attnserve.access" and line["request_id"] == "trace-42" and line["code"] == "OK"


@given(values=st.lists(st.floats(0, 20, allow_nan=False) | st.sampled_from([0.005, 0.1, 1.0, 10.0]), max_size=50))
def test_many_values_observed_at_once_scrape_as_one_by_one(values):
    """A step's inter-token times go into the histogram at once (ops/metrics.py observe_all)."""
    scrapes = []
    for at_once in (False, True):
        registry = CollectorRegistry()
        histogram = Histogram("seconds", "", ["model"], registry=registry).labels("m")
        if at_once:
            observe_all(histogram, np.asarray(values))
        else:
            for value in values:
                histogram.observe(value)
        scrapes.append(re.sub(r"seconds_created.*\n", "", generate_latest(registry).decode()))
    one_by_one, at_once = scrapes
    sums = [float(re.search(r"seconds_sum\{.*\} (\S+)", s).group(1)) for s in scrapes]
    assert math.isclose(sums[0], sums[1], rel_tol=1e-9, abs_tol=1e-9)
    assert re.sub(r"seconds_sum.*\n", "", one_by_one) == re.sub(r"seconds_sum.*\n", "", at_once)


@given(created=st.floats(1e9, 4e9))
def test_log_timestamps_are_what_datetime_writes(created):
    """The JSON formatter makes a second's text once (ops/logs.py): the same text as datetime's, rounding included."""
    from datetime import datetime, timezone

    expected = datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="milliseconds")
    assert JsonFormatter().timestamp(created) == expected
