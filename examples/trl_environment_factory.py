"""GRPO with TRL on cudagym's tasks: the environment factory is ``cudagym.integrations.trl.CudaKernelToolEnv``.

Each dataset row is one task of the task set; each rollout plays it through the tools, and the episode's return (the
milestone tier) is the reward:

    pip install 'cudagym[trl]'
    python examples/trl_environment_factory.py --model Qwen/Qwen3-0.6B --backend cuda --task-set builtin
"""

from __future__ import annotations

import argparse
import sys

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from cudagym.integrations.trl import CudaKernelToolEnv, make_dataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="GRPO on CudaKernel-v0 through TRL's environment_factory.")
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
    parser.add_argument("--task-set", default="builtin")
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--max-turns", type=int, default=50)
    parser.add_argument("--output-dir", default="grpo-cudagym")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trainer = GRPOTrainer(
        model=args.model,
        train_dataset=Dataset.from_list(make_dataset(args.task_set)),
        environment_factory=lambda: CudaKernelToolEnv(backend=args.backend, max_turns=args.max_turns),
        args=GRPOConfig(output_dir=args.output_dir, max_completion_length=8192, max_tool_calling_iterations=50),
    )
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
