"""Evaluate a model on cudagym's tasks with verifiers v1: the taskset id ``cudagym-verifiers``.

The same run as ``vf-eval cudagym-verifiers -m MODEL --client.base-url URL ...``, from Python: verifiers starts a
toolset per rollout that holds a ``CudaKernelEnv`` and serves cudagym's tools as native tool calls; the reward is the
milestone tier, and the outcome (tier, compiled, correct, speedups, each reward term) is in the metrics.

    pip install 'cudagym[verifiers]'
    OPENAI_API_KEY=... python examples/verifiers_rollout.py --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig


def eval_config(args: argparse.Namespace) -> EvalConfig:
    """The evaluation: the tasks ``args.task`` names, played once each by ``args.model``."""
    taskset = {
        "id": "cudagym-verifiers",
        "task_options": {"ids": args.task},
        "task": {"tools": {"backend": args.backend}},
    }
    return EvalConfig.model_validate(
        {
            "env": {"taskset": taskset},
            "model": args.model,
            "client": {"base_url": args.base_url, "api_key_var": args.api_key_var},
            "push": False,
            "rich": None,
            "output_dir": args.output_dir,
        }
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="verifiers v1 evaluation of a model on cudagym tasks.")
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key-var", default="OPENAI_API_KEY", help="the variable holding the endpoint's key")
    parser.add_argument("--task", action="append", default=None, help="a task id (repeatable); default: builtin/relu")
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--output-dir", default="outputs")
    args = parser.parse_args(argv)
    args.task = args.task or ["builtin/relu"]
    return args


def main(argv: list[str] | None = None) -> int:
    episodes = asyncio.run(run_eval(eval_config(parse_args(argv))))
    for episode in episodes:
        for trace in episode.traces:
            print(json.dumps({"task": episode.task.data.id, "reward": trace.reward, "metrics": trace.metrics}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
