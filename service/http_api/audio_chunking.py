"""OpenAI's chunking_strategy field of an audio upload: absent, the recording is decoded window after window,
each continuing the text before it; "auto" or a server_vad object, it is cut at its silences by the model's
voice activity detector and its pieces decoded at once. The object comes as JSON text (OpenAPI's default for
an object in a multipart body) or as bracketed fields, chunking_strategy[threshold]=0.4, as OpenAI's SDK
sends it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..core.transcription.speech_chunks import FIELD, SilenceCuts, silence_cuts
from ..core.transcription.transcription import MAX_SILENCE_MS

DEFAULTS = SilenceCuts()


class ServerVad(BaseModel):
    """Where to cut: OpenAI's server_vad fields (faster-whisper's batched defaults where absent); the limits
    are the core's (core/transcription/transcription.py check_chunking)."""

    model_config = ConfigDict(extra="forbid")
    type: str = Field(json_schema_extra={"const": "server_vad"})
    threshold: float = Field(DEFAULTS.threshold, gt=0.0, lt=1.0, description="speech at this probability or more")
    silence_duration_ms: int = Field(
        DEFAULTS.silence_duration_ms, ge=0, le=MAX_SILENCE_MS, description="a silence this long ends a piece"
    )
    prefix_padding_ms: int = Field(
        DEFAULTS.prefix_padding_ms, ge=0, le=MAX_SILENCE_MS, description="kept on each side of speech"
    )


def is_chunking_key(key: str) -> bool:
    return key == FIELD or (key.startswith(f"{FIELD}[") and key.endswith("]"))


def chunking_of(fields: dict[str, str]) -> SilenceCuts | None:
    """The form's chunking strategy; None where none is asked for."""
    if FIELD in fields:
        return silence_cuts(fields[FIELD])
    bracketed = {key[len(FIELD) + 1 : -1]: value for key, value in fields.items() if is_chunking_key(key)}
    return silence_cuts(bracketed) if bracketed else None
