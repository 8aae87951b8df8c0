"""Bearer tokens, for every front door alike: read from the token file, and checked in constant time."""

from __future__ import annotations

import hmac
from pathlib import Path

BEARER = "Bearer "
REQUIRED = "authorization: a valid 'Bearer <token>' is required"


def read_tokens(path: str) -> list[bytes]:
    tokens = [line.strip().encode() for line in Path(path).read_text().splitlines() if line.strip()]
    if not tokens:
        raise ValueError(f"auth_token_file {path} holds no token")
    return tokens


def bearer_allowed(authorization: str | None, tokens: list[bytes], schemes: tuple[str, ...] = (BEARER,)) -> bool:
    """Whether an 'authorization' value carries one of the tokens, after one of the schemes (DeepL's
    clients send 'DeepL-Auth-Key <token>'). Every token is compared whatever the outcome: the time taken
    says nothing about which matched."""
    presented = b""
    scheme = next((s for s in schemes if isinstance(authorization, str) and authorization.startswith(s)), None)
    if scheme is not None:
        presented = authorization[len(scheme) :].encode()
    matches = [hmac.compare_digest(presented, token) for token in tokens]
    return bool(presented) and any(matches)
