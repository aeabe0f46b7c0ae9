"""``cudagym pool``: the machine pool behind the evaluation service's socket.

The server speaks the service's protocol (:mod:`cudagym.service`), so environments use it with the same client,
``service_socket=PATH`` or :class:`~cudagym.service.ServiceEvaluatorFactory`; where ``cudagym serve`` gives every
session an evaluator of its own, this server gives every session a :class:`~cudagym.pool.client.PoolEvaluator` on
one :class:`~cudagym.pool.pool.EvaluationPool`, whose evaluators all sessions share.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from pathlib import Path
from typing import Any

from cudagym.backends import Backend, resolve_backend
from cudagym.eval_config import EvalConfig
from cudagym.evaluator import Evaluator
from cudagym.pool.client import PoolEvaluator
from cudagym.pool.evaluators import PoolLimits
from cudagym.pool.pool import EvaluationPool
from cudagym.service import EvaluationServer, add_server_arguments, default_socket_path, run_server
from cudagym.service_messages import ServerInfo
from cudagym.tasks.task import Task


class PoolServer(EvaluationServer):
    """An evaluation server whose sessions share one pool (see the module docstring).

    Args:
        socket_path, backend, cache_dir: as for ``EvaluationServer``.
        limits: the pool's bounds (default ``PoolLimits()``: sized to the machine).
        pool: a pool to serve instead of one of its own (its backend must be ``backend``); the server does not close
            it.
    """

    def __init__(
        self,
        socket_path: str | Path,
        backend: Backend,
        *,
        cache_dir: str | Path | None = None,
        limits: PoolLimits | None = None,
        pool: EvaluationPool | None = None,
    ) -> None:
        super().__init__(socket_path, backend, cache_dir=cache_dir)
        if pool is not None and pool.backend.name != backend.name:
            raise ValueError(f"the pool runs the {pool.backend.name} backend, the server {backend.name}")
        self._owns_pool = pool is None
        self.pool = pool or EvaluationPool(backend, cache_dir=self.cache_dir, limits=limits)
        self._session_ids = itertools.count(1)

    def make_evaluator(self, task: Task, config: EvalConfig) -> Evaluator:
        return PoolEvaluator(self.pool, task, self.backend, config, session=f"connection-{next(self._session_ids)}")

    def info(self) -> ServerInfo:
        return dataclasses.replace(super().info(), pool=dataclasses.asdict(self.pool.stats()))

    def shutdown(self) -> None:
        super().shutdown()
        if self._owns_pool:
            self.pool.close()


def limits_from(args: argparse.Namespace, backend: Backend) -> PoolLimits:
    """The pool's bounds from ``cudagym pool``'s arguments (the backend's defaults where one is not given)."""
    given: dict[str, Any] = {
        "max_evaluators": args.max_evaluators,
        "max_per_task": args.max_per_task,
        "compile_workers": args.compile_workers,
        "idle_seconds": args.idle_seconds,
        "memory_bytes": int(args.memory_gb * (1 << 30)) if args.memory_gb else None,
    }
    return PoolLimits.for_backend(backend, **given)


def _pool_command(args: argparse.Namespace) -> int:
    backend = resolve_backend(args.backend)
    socket_path = args.socket or default_socket_path()
    return run_server(
        PoolServer(socket_path, backend, cache_dir=args.cache_dir, limits=limits_from(args, backend)), "pool"
    )


def add_pool_command(sub: Any) -> None:
    """Adds ``cudagym pool`` to the CLI's subcommands."""
    pool = sub.add_parser("pool", help="run the machine's evaluation pool (evaluators shared by every environment)")
    add_server_arguments(pool)
    pool.add_argument(
        "--max-evaluators",
        type=int,
        help="evaluators at once (default: one per core, 4-16; on cuda at most one per 20 GiB of device memory)",
    )
    pool.add_argument("--max-per-task", type=int, help="evaluators of one task at once (default: --max-evaluators)")
    pool.add_argument("--compile-workers", type=int, help="builds at once (default: the cores)")
    pool.add_argument("--memory-gb", type=float, help="idle evaluators are closed above this (default: half the RAM)")
    pool.add_argument("--idle-seconds", type=float, help="an evaluator unused this long is closed (default 600)")
    pool.set_defaults(func=_pool_command)
