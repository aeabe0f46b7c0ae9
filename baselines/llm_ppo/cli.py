"""``cudagym baselines llm-ppo``: CUDA Agent's staged recipe on a Hugging Face causal LM.

``cudagym baselines llm-ppo [--stage single-turn|rft|value|agentic|all ...] [--model NAME|PATH|tiny]
[--init CHECKPOINT] [--task ID ...] [--rft-task ID ...] [--rft-data FILE ...] [--value-data FILE ...] [--out DIR]
[--envs K] [--single-turn-steps N] [--agentic-steps N] [--max-turns N] [--max-new-tokens N] ...`` runs the named
stages in the recipe's order and prints one line per stage (its mean reward or its last loss) and the artefacts.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cudagym.tasks.cli import add_sizes_option, parse_sizes

STAGE_CHOICES = ("single-turn", "rft", "value", "agentic", "all")


def _configure(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--stage", action="append", choices=STAGE_CHOICES, help="a stage to run (repeatable; default all)")
    add("--model", default="tiny", help="Hugging Face model name or folder, or 'tiny' (built here; default)")
    add("--init", type=Path, help="start from this checkpoint (an earlier stage's OUT/<stage> folder)")
    add("--task-set", default="builtin")
    add("--task", action="append", metavar="ID", help="a task the RL stages play (repeatable; default: all)")
    add("--rft-task", action="append", metavar="ID", help="a task the scripted agent plays for RFT data")
    add("--rft-data", action="append", type=Path, metavar="FILE", help="RFT chat JSONL (cudagym rft-export)")
    add("--value-data", action="append", type=Path, metavar="FILE", help="chat JSONL with recorded returns")
    add("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    add("--reward", default="milestone", help="the environment's reward shaper (default milestone)")
    add("--service-socket", help="evaluate through the evaluation service listening there (cudagym serve)")
    add("--out", type=Path, default=Path("llm_ppo_out"), help="output folder (default llm_ppo_out)")
    add("--envs", type=int, default=4, help="environments playing at once: episodes per PPO step (default 4)")
    add("--single-turn-steps", type=int, default=4)
    add("--agentic-steps", type=int, default=4)
    add("--max-turns", type=int, default=8, help="assistant messages per agentic episode (default 8)")
    add("--max-new-tokens", type=int, default=512)
    add("--max-context-tokens", type=int, default=16384)
    add("--actor-lr", type=float, default=1e-5)
    add("--critic-lr", type=float, default=2e-5)
    add("--kl-coef", type=float, default=0.05)
    add("--epochs", type=int, default=1, help="PPO passes over each batch")
    add("--minibatch", type=int, default=4, help="sequences per optimiser step")
    add("--sft-epochs", type=int, default=2)
    add("--sft-lr", type=float, help="the actor's learning rate in RFT (default: --actor-lr)")
    add("--value-epochs", type=int, default=4)
    add("--temperature", type=float, default=1.0)
    add("--device", default="auto")
    add("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    add("--lora-rank", type=int, help="train LoRA adapters of this rank on the actor (needs peft)")
    add("--fast-timing", action="store_true", help="short timing and no torch.compile baseline (smoke runs)")
    add("--seed", type=int, default=0)
    add_sizes_option(parser)


def spec_from_args(args: argparse.Namespace) -> Any:
    """The :class:`RecipeSpec` the command line describes."""
    from cudagym.baselines.llm_ppo.config import PPOSettings, Stage
    from cudagym.baselines.llm_ppo.recipe import RecipeSpec

    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    names = args.stage or ["all"]
    stages = tuple(Stage) if "all" in names else tuple(Stage(name) for name in names)
    settings = PPOSettings(
        kl_coef=args.kl_coef,
        actor_lr=args.actor_lr,
        critic_lr=args.critic_lr,
        epochs=args.epochs,
        minibatch=args.minibatch,
        max_new_tokens=args.max_new_tokens,
        max_context_tokens=args.max_context_tokens,
        temperature=args.temperature,
        sft_epochs=args.sft_epochs,
        sft_lr=args.sft_lr,
        value_epochs=args.value_epochs,
    )
    eval_config = None
    if args.fast_timing:
        from cudagym.evaluator import EvalConfig
        from cudagym.harness.timing import TimingConfig

        timing = TimingConfig(warmup=2, warmup_seconds=0.02, min_reps=5, max_reps=50, budget_seconds=0.2)
        eval_config = EvalConfig(num_checks=3, timing=timing, compile_baseline=False)
    return RecipeSpec(
        out=args.out,
        model=args.model,
        stages=stages,
        task_set=args.task_set,
        task_ids=tuple(args.task) if args.task else None,
        task_options={"sizes": sizes} if sizes else {},
        rft_tasks=tuple(args.rft_task) if args.rft_task else None,
        rft_data=tuple(args.rft_data or ()),
        value_data=tuple(args.value_data or ()),
        init=args.init,
        backend=args.backend,
        reward=args.reward,
        eval_config=eval_config,
        env_options={"service_socket": args.service_socket} if args.service_socket else {},
        envs=args.envs,
        single_turn_steps=args.single_turn_steps,
        agentic_steps=args.agentic_steps,
        max_turns=args.max_turns,
        settings=settings,
        device=args.device,
        dtype=args.dtype,
        lora_rank=args.lora_rank,
        seed=args.seed,
    )


def _run(args: argparse.Namespace) -> int:
    from cudagym.baselines.llm_ppo.recipe import run_recipe

    report = run_recipe(spec_from_args(args))
    print(f"{'stage':<12} {'steps':>5} {'mean reward':>12} {'last loss':>12} {'seconds':>8}  checkpoint")
    for result in report.results:
        last = result.steps[-1] if result.steps else {}
        loss = last.get("sft_loss", last.get("value_loss"))
        reward = "" if result.mean_reward is None else f"{result.mean_reward:.3f}"
        shown = "" if loss is None else f"{loss:.4f}"
        print(
            f"{result.stage.value:<12} {len(result.steps):>5} {reward:>12} {shown:>12} {result.seconds:>8.1f}  "
            f"{result.checkpoint}"
        )
    for name, path in report.files.items():
        print(f"{name}: {path}")
    return 0


def add_llm_ppo_command(subparsers: Any) -> None:
    """Adds ``llm-ppo`` to the ``baselines`` group's subparsers."""
    help_text = "CUDA Agent's staged PPO recipe (single-turn RL, RFT, value pretraining, agentic PPO) on an LLM"
    parser = subparsers.add_parser("llm-ppo", help=help_text, description=help_text)
    _configure(parser)
    parser.set_defaults(func=_run)
