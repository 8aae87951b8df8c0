"""Security: TLS and mutual TLS, bearer tokens (health exempt), models that cannot reach outside their
directory, and a server that never writes to its model directories."""

from __future__ import annotations

import datetime
import hashlib
import json
import ssl
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from modeldir.files import MANIFEST_FILE
from service.grpc_api.client import Client
from testing.server_process import LOCAL_PORTS
from testing.server_thread import ServerThread

ROOT = Path(__file__).resolve().parent.parent


def issue(subject: str, issuer=None, issuer_key=None, ca=False, san=()):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in san]), critical=False)
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    return cert, key


def write_pem(path: Path, cert, key) -> tuple[str, str]:
    cert_file, key_file = path.with_suffix(".crt"), path.with_suffix(".key")
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_file), str(key_file)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for localhost, a client certificate, and a stranger's CA and client."""
    root = tmp_path_factory.mktemp("pki")
    ca, ca_key = issue("attnserve test CA", ca=True)
    stranger_ca, stranger_key = issue("someone else's CA", ca=True)
    files = {"ca": write_pem(root / "ca", ca, ca_key)[0]}
    files["server"] = write_pem(root / "server", *issue("localhost", ca, ca_key, san=["localhost"]))
    files["client"] = write_pem(root / "client", *issue("a client", ca, ca_key))
    files["stranger"] = write_pem(root / "stranger", *issue("a stranger", stranger_ca, stranger_key))
    return files


def embed_status(client: Client) -> grpc.StatusCode:
    try:
        client.embed(["hello"])
        return grpc.StatusCode.OK
    except grpc.RpcError as error:
        return error.code()


def localhost(server: ServerThread) -> str:
    return f"localhost:{server.port}"


def test_tls(minilm_dir, pki):
    cert, key = pki["server"]
    server = ServerThread([minilm_dir], tls_cert=cert, tls_key=key)
    try:
        with Client(localhost(server), tls_ca=pki["ca"], timeout=5) as client:
            assert client.embed(["over TLS"]).vectors.shape == (1, 384)
        with Client(localhost(server), timeout=5) as plaintext:
            assert embed_status(plaintext) == grpc.StatusCode.UNAVAILABLE
        with Client(localhost(server), tls_ca=pki["stranger"][0], timeout=5) as wrong_trust:
            assert embed_status(wrong_trust) == grpc.StatusCode.UNAVAILABLE
    finally:
        server.close()


def https_embed(server: ServerThread, ca: str, client: tuple[str, str] | None = None) -> int:
    """The HTTP API's status for one embedding over TLS, trusting `ca` (and showing `client`'s certificate)."""
    context = ssl.create_default_context(cafile=ca)
    if client:
        context.load_cert_chain(*client)
    url = f"https://localhost:{server.server.http.port}/v1/embeddings"
    return httpx.post(url, json={"input": "over TLS"}, verify=context, timeout=10).status_code


def test_tls_on_the_http_port(minilm_dir, pki):
    cert, key = pki["server"]
    server = ServerThread([minilm_dir], tls_cert=cert, tls_key=key)
    try:
        assert https_embed(server, pki["ca"]) == 200
        with pytest.raises(httpx.TransportError):  # plaintext to a TLS port
            httpx.post(f"http://localhost:{server.server.http.port}/v1/embeddings", json={"input": "x"}, timeout=10)
        with pytest.raises(httpx.TransportError):  # a certificate this client does not trust
            https_embed(server, pki["stranger"][0])
    finally:
        server.close()


def test_mutual_tls_on_the_http_port(minilm_dir, pki):
    cert, key = pki["server"]
    server = ServerThread([minilm_dir], tls_cert=cert, tls_key=key, tls_client_ca=pki["ca"])
    try:
        assert https_embed(server, pki["ca"], pki["client"]) == 200
        for client in (None, pki["stranger"]):  # no certificate, or one from another CA
            with pytest.raises(httpx.TransportError):
                https_embed(server, pki["ca"], client)
    finally:
        server.close()


def test_mutual_tls_requires_a_client_certificate_from_the_ca(minilm_dir, pki):
    cert, key = pki["server"]
    server = ServerThread([minilm_dir], tls_cert=cert, tls_key=key, tls_client_ca=pki["ca"])
    try:
        client_cert, client_key = pki["client"]
        with Client(localhost(server), tls_ca=pki["ca"], tls_cert=client_cert, tls_key=client_key, timeout=5) as ok:
            assert ok.embed(["mutual"]).vectors.shape == (1, 384)
        with Client(localhost(server), tls_ca=pki["ca"], timeout=5) as anonymous:
            assert embed_status(anonymous) == grpc.StatusCode.UNAVAILABLE
        stranger_cert, stranger_key = pki["stranger"]
        with Client(
            localhost(server), tls_ca=pki["ca"], tls_cert=stranger_cert, tls_key=stranger_key, timeout=5
        ) as stranger:
            assert embed_status(stranger) == grpc.StatusCode.UNAVAILABLE
    finally:
        server.close()


def test_bearer_tokens_with_health_exempt(minilm_dir, tmp_path):
    (tmp_path / "tokens").write_text("first-secret\n\nsecond-secret\n")
    server = ServerThread([minilm_dir], auth_token_file=str(tmp_path / "tokens"))
    try:
        for token in ("first-secret", "second-secret"):
            with Client(server.target, token=token, timeout=5) as client:
                assert client.embed(["allowed"]).vectors.shape == (1, 384)
                assert [m.name for m in client.list_models()] == ["minilm"]
        for token in (None, "wrong", "first-secret-but-longer", ""):
            with Client(server.target, token=token, timeout=5) as client:
                with pytest.raises(grpc.RpcError) as error:
                    client.embed(["refused"])
                assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "Bearer" in error.value.details()
        health = health_pb2_grpc.HealthStub(server.channel())
        assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
        counted = server.metrics_registry.get_sample_value(
            "attnserve_requests_total", {"rpc": "Embed", "model": "", "code": "UNAUTHENTICATED"}
        )
        assert counted == 4
    finally:
        server.close()


def test_onnx_external_data_outside_the_model_directory_is_refused(minilm_dir, copy_of, tmp_path):
    """A model directory whose manifest is consistent but whose graph reads a file outside it."""
    onnx = pytest.importorskip("onnx")
    (tmp_path / "secret.bin").write_bytes(np.arange(384, dtype=np.float32).tobytes())
    model_dir = copy_of(minilm_dir)
    graph_path = model_dir / "onnx" / "encoder.onnx"
    graph = onnx.load(graph_path)
    tensor = graph.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", str(Path("..") / ".." / ".." / "secret.bin")
    onnx.save_model(graph, graph_path)
    manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    manifest["sha256"]["onnx/encoder.onnx"] = hashlib.sha256(graph_path.read_bytes()).hexdigest()
    (model_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    result = subprocess.run(
        [sys.executable, "-m", "cli", "serve", *LOCAL_PORTS, "--models", str(model_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "external data at '../../../secret.bin' lies outside the model directory" in result.stderr


def test_serving_never_writes_to_the_model_directories(minilm_dir, numbers_dir):
    def snapshot(root: Path) -> dict:
        return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}

    before = {d: snapshot(d) for d in (minilm_dir, numbers_dir)}
    server = ServerThread([minilm_dir, numbers_dir])
    try:
        with Client(server.target) as client:
            client.embed(["read only"])
            client.generate("12")
    finally:
        server.close()
    assert {d: snapshot(d) for d in (minilm_dir, numbers_dir)} == before


def test_the_deployment_runs_unprivileged_on_a_read_only_filesystem():
    deployment = next(
        d
        for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "attnserve.yaml").read_text())
        if d and d["kind"] == "Deployment"
    )
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001
    assert container["readOnlyRootFilesystem"] and not container["allowPrivilegeEscalation"]
    assert container["capabilities"]["drop"] == ["ALL"]
