"""A gRPC call's outcome as (status code, details), for the tests that expect refusals."""

from __future__ import annotations

import grpc


def status_of(call) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as error:
        return error.code(), error.details()
    return grpc.StatusCode.OK, ""
