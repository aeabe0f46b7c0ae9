"""``cudagym serve-openenv``: the environment served over OpenEnv's HTTP and WebSocket protocol.

This module only adds the subcommand; the server (``cudagym.integrations.openenv``) is imported when the command
runs, so the CLI works without the ``openenv`` extra installed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_openenv_command(sub: Any) -> None:
    """Adds ``cudagym serve-openenv`` to the CLI's subcommands."""
    serve = sub.add_parser("serve-openenv", help="serve the environment over OpenEnv (needs cudagym[openenv])")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--task-set", default="builtin", help="task set name (default builtin)")
    serve.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    serve.add_argument("--max-turns", type=int, default=200, help="tool calls per episode (default 200)")
    serve.add_argument(
        "--max-concurrent-envs", type=int, default=4, help="episodes (WebSocket sessions) at once (default 4)"
    )
    serve.add_argument("--cache-dir", help="build and baseline cache (default: the usual cache directory)")
    serve.set_defaults(func=_serve_openenv_command)


def _serve_openenv_command(args: argparse.Namespace) -> int:
    try:
        from cudagym.integrations.openenv import serve_openenv
    except ImportError as exc:
        print(f"cudagym serve-openenv needs OpenEnv: pip install 'cudagym[openenv]' ({exc})", file=sys.stderr)
        return 2
    serve_openenv(
        host=args.host,
        port=args.port,
        task_set=args.task_set,
        backend=args.backend,
        max_turns=args.max_turns,
        max_concurrent_envs=args.max_concurrent_envs,
        cache_dir=args.cache_dir,
    )
    return 0
