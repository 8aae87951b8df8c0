"""Domain errors: what a request can meet, named by kind, never by a transport's status code. Raised by
the core and the engine; each front door maps each kind to its own status in one place."""

from __future__ import annotations

import re


class ServiceError(Exception):
    """A request refused or not finished. `field` names the request field at fault, where one is."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message, self.field = message, field

    def __reduce__(self):  # pickled (the engine link, service/split/) with its field
        return type(self), (self.message, self.field)


class InvalidArgument(ServiceError):
    """The request is wrong: a field out of range, too long, contradicting another."""


class NotFound(ServiceError):
    """The request names a model that is not served."""


class Overloaded(ServiceError):
    """A queue or a concurrency limit is full: the same request may succeed later."""


class QueueFull(Overloaded):
    """A model's queue (texts to embed, sequences waiting for a cache row) holds no more."""


class Unavailable(ServiceError):
    """The server is starting or shutting down."""


class FailedPrecondition(ServiceError):
    """The server is not set up for this request (a capability that is off)."""


class DeadlineExceeded(ServiceError):
    """The request ran out of time on the server's side (a stream whose client stopped reading)."""


class Unauthenticated(ServiceError):
    """The call carries no valid credentials (a bearer token, when the server requires one)."""


class RequestTooLarge(InvalidArgument):
    """The request is larger than the server reads (max_message_bytes)."""


class Internal(ServiceError):
    """The server failed while handling the request (what failed is in its log, not in the message)."""


def invalid(field: str, problem: str) -> InvalidArgument:
    """An InvalidArgument whose message starts with the field: 'inputs[3]: empty text'."""
    return InvalidArgument(f"{field}: {problem}", field)


_FIELD = re.compile(r"^(?P<name>[a-z_.]+)(?P<index>(\[\d+\])*)$")


def renamed(error: ServiceError, names: dict[str, str]) -> tuple[str | None, str]:
    """The error's field and message with the core's field name replaced by a front door's: names maps
    'params.max_new_tokens' to 'max_tokens', 'inputs' to 'input' (indices such as [3] or [3][1] are kept)."""
    field, message = error.field, error.message
    match = _FIELD.match(field or "")
    if not match or match["name"] not in names:
        return field, message
    new = names[match["name"]] + (match["index"] or "")
    if message.startswith(f"{field}:"):
        message = new + message[len(field) :]
    return new, message
