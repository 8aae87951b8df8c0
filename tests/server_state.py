"""What a test server holds, and the check that a case left nothing of it behind."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from grpc_health.v1 import health_pb2, health_pb2_grpc

from testing.server_thread import ServerThread

from .waits import wait_until


@dataclass(frozen=True)
class Baseline:
    tasks: int
    fds: int


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def baseline(server: ServerThread) -> Baseline:
    return Baseline(server.call_and_wait(lambda: len(asyncio.all_tasks())), open_fds())


def assert_back_to(server: ServerThread, before: Baseline, timeout: float = 60.0) -> None:
    """Nothing left behind: in flight, queued, running, cached, tasks, descriptors; and health SERVING."""

    def state():
        registry = server.engine_core.registry
        out = {"in_flight": server.server.core.admission.in_flight, "tasks": len(asyncio.all_tasks())}
        for model in registry.models.values():
            out.update({f"{model.name} {kind}": n for kind, n in model.holding().items()})
        return out

    def settled() -> bool:
        now = server.call_and_wait(state)
        return (
            not any(v for k, v in now.items() if k != "tasks")
            and now["tasks"] <= before.tasks
            and (open_fds() <= before.fds + 2)
        )

    try:
        wait_until(settled, timeout)
    except AssertionError:
        pass  # the assertions below say what was left
    now = server.call_and_wait(state)
    tasks = now.pop("tasks")
    assert not any(now.values()), now
    assert tasks <= before.tasks, (tasks, before.tasks)
    assert open_fds() <= before.fds + 2, (open_fds(), before.fds)
    health = health_pb2_grpc.HealthStub(server.channel())
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
