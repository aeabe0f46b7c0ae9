"""The machine's evaluation pool: one set of evaluators, compile workers and a fair queue for every environment.

``cudagym pool`` serves it on the evaluation service's socket (environments connect with ``service_socket=...``, as
to ``cudagym serve``); :class:`PoolEvaluatorFactory` uses a pool in the environment's own process. The modules:
``jobs`` (what is submitted), ``fair_queue`` (round robin over sessions), ``evaluators`` (evaluators shared by task,
bounded and evicted), ``compile_lane`` (builds on the cores), ``pool`` (the dispatcher), ``client`` (the
environment's evaluator), ``server`` (the socket and the command). ``docs/pool.md`` says how it shares work.
"""

from __future__ import annotations

from cudagym.pool.client import PoolEvaluator, PoolEvaluatorFactory
from cudagym.pool.evaluators import PoolLimits
from cudagym.pool.fair_queue import FairQueue
from cudagym.pool.jobs import JobStage, PoolJob
from cudagym.pool.pool import EvaluationPool, PoolStats

__all__ = [
    "EvaluationPool",
    "FairQueue",
    "JobStage",
    "PoolEvaluator",
    "PoolEvaluatorFactory",
    "PoolJob",
    "PoolLimits",
    "PoolStats",
]
