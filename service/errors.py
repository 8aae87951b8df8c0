"""Errors a request can meet, each with the gRPC status it maps to. Raised below the servicer, turned
into a status there: the layers below never see gRPC."""

from __future__ import annotations

import grpc


class RequestError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def invalid(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.NOT_FOUND, message)


def exhausted(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def unavailable(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.UNAVAILABLE, message)


def failed_precondition(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.FAILED_PRECONDITION, message)
