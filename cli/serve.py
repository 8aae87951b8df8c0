"""`attnserve serve`: the server, configured from flags and ATTNSERVE_* variables (never torch)."""

from __future__ import annotations

import sys


def cmd_serve(args) -> None:
    import asyncio

    from service.ops.config import ConfigError
    from service.ops.config_sources import from_sources
    from service.ops.logs import configure as configure_logs
    from service.server import serve

    try:
        config = from_sources(args)
    except ConfigError as error:
        sys.exit(f"attnserve serve: {error}")
    configure_logs(config.log_level, config.log_format)
    if config.front_processes > 1:  # the doors in API processes, the models in this one
        from service.split.engine_process import serve_split as serve
    try:
        sys.exit(asyncio.run(serve(config)))
    except OSError as error:
        sys.exit(f"attnserve serve: {error}")
