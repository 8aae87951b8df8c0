"""ServerConfig read once from CLI flags and ATTNSERVE_* environment variables.

Precedence: a flag, else its environment variable (ATTNSERVE_ + the field name in capitals), else the
default.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from .config import ENV_PREFIX, ConfigError, ServerConfig


def _parse(kind, text: str):
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {text!r}")
    if kind == "paths":
        return tuple(Path(p) for p in text.split(",") if p.strip())
    return kind(text)


def _kind(f: dataclasses.Field):
    kinds = {"int": int, "float": float, "bool": bool, "bool | None": bool, "str": str}
    return "paths" if f.name == "models" else kinds[f.type]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field; defaults stay None so that the environment can fill what the flags leave."""
    for f in dataclasses.fields(ServerConfig):
        flag = "--" + f.name.replace("_", "-")
        env = ENV_PREFIX + f.name.upper()
        default = f.default
        shown = ",".join(str(p) for p in default) if f.name == "models" else default
        help_text = f"{f.metadata['help']} (env {env}; default: {shown})"
        kind = _kind(f)
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif kind == "paths":
            parser.add_argument(flag, nargs="+", type=Path, default=None, metavar="DIR", help=help_text)
        else:
            parser.add_argument(flag, type=kind, default=None, choices=f.metadata["choices"], help=help_text)


def from_sources(args: argparse.Namespace | None = None, environ: dict | None = None) -> ServerConfig:
    environ = os.environ if environ is None else environ
    values = {}
    for f in dataclasses.fields(ServerConfig):
        flag_value = getattr(args, f.name, None) if args is not None else None
        env = ENV_PREFIX + f.name.upper()
        if flag_value is not None:
            values[f.name] = tuple(flag_value) if f.name == "models" else flag_value
        elif env in environ:
            try:
                values[f.name] = _parse(_kind(f), environ[env])
            except ValueError as e:
                raise ConfigError(f"{env}: {e}") from e
    return ServerConfig(**values)
