"""Two replicas (`attnserve serve` processes) under steady load, restarted one after the other with SIGTERM:
a gRPC channel balancing over both, watching their health, with a retry policy for UNAVAILABLE, and HTTP
callers that retry 503 on the other replica, lose no call, and both replicas take traffic before and after."""

from __future__ import annotations

import json
import socket
import threading

import grpc
import httpx

from service.grpc_api.pb import inference_pb2 as pb
from service.grpc_api.pb import inference_pb2_grpc as pb_grpc
from testing.server_process import ServerProcess

from .waits import wait_until

SERVICE_CONFIG = {  # as the README tells clients to connect
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": ""},
    "methodConfig": [
        {
            "name": [{"service": "attnserve.v1.Inference"}, {"service": "inference.GRPCInferenceService"}],
            "retryPolicy": {
                "maxAttempts": 4,
                "initialBackoff": "0.1s",
                "maxBackoff": "2s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"],
            },
        }
    ],
}


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Load:
    """Callers in threads until stopped: gRPC Embed through the balanced channel, and HTTP embeddings that
    try the other replica on a 503 or a refused connection. Every call that fails in the end is kept."""

    def __init__(self, grpc_target: str, http_urls: list[str]):
        options = [("grpc.service_config", json.dumps(SERVICE_CONFIG)), ("grpc.enable_retries", 1)]
        self.channel = grpc.insecure_channel(grpc_target, options=options)
        self.stub = pb_grpc.InferenceStub(self.channel)
        self.http_urls, self.failures, self.calls = http_urls, [], 0
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.grpc_caller, args=(i,)) for i in range(3)]
        self.threads += [threading.Thread(target=self.http_caller, args=(i,)) for i in range(2)]
        for thread in self.threads:
            thread.start()

    def grpc_caller(self, i: int) -> None:
        while not self.stopping.is_set():
            try:
                self.stub.Embed(pb.EmbedRequest(inputs=[f"grpc caller {i}"]), timeout=30)
                self.calls += 1
            except grpc.RpcError as error:
                self.failures.append(f"gRPC {error.code()}: {error.details()}")

    def http_caller(self, i: int) -> None:
        with httpx.Client(timeout=30) as http:
            turn = i
            while not self.stopping.is_set():
                response = None
                for attempt in range(10):  # round robin over the replicas; the other one on 503 or refusal
                    url = self.http_urls[(turn + attempt) % len(self.http_urls)]
                    try:
                        response = http.post(f"{url}/v1/embeddings", json={"input": f"http caller {i}"})
                    except httpx.TransportError:
                        continue
                    if response.status_code != 503:
                        break
                turn += 1
                if response is not None and response.status_code == 200:  # else: every try failed
                    self.calls += 1
                else:
                    self.failures.append(f"HTTP {getattr(response, 'status_code', None)}")

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)
        self.channel.close()


def answered_ok(server: ServerProcess) -> float:
    """Calls the replica answered OK, over both doors."""
    return server.metric("attnserve_requests_total", code="OK") + server.metric("attnserve_requests_total", code="200")


def test_rolling_restart_of_two_replicas_loses_no_call(minilm_dir):
    ports = free_ports(4)
    flags = [["--port", str(ports[i]), "--http-port", str(ports[2 + i]), "--drain-seconds", "10"] for i in (0, 1)]
    replicas = [ServerProcess(*flags[i], models=[str(minilm_dir)]) for i in (0, 1)]
    load = Load(f"ipv4:127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}", [f"http://127.0.0.1:{p}" for p in ports[2:]])
    try:
        for replica in replicas:
            wait_until(lambda r=replica: answered_ok(r) >= 20, what="both replicas taking traffic")
        for i in (0, 1):
            assert replicas[i].stop() == 0  # SIGTERM: drains, then exits 0
            replicas[i] = ServerProcess(*flags[i], models=[str(minilm_dir)])  # the same ports again
            wait_until(lambda r=replicas[i]: answered_ok(r) >= 20, what=f"replica {i} taking traffic after its restart")
        wait_until(
            lambda: answered_ok(replicas[0]) >= 40 and answered_ok(replicas[1]) >= 20, what="traffic on both after"
        )
        # The channel watches health: no gRPC call reached a restarted replica before its models were warm.
        assert [r.metric("attnserve_requests_total", code="UNAVAILABLE") for r in replicas] == [0, 0]
    finally:
        load.stop()
        for replica in replicas:
            if replica.process.poll() is None:
                replica.stop()
    assert load.failures == [], load.failures
    assert load.calls > 100
