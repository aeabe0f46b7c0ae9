"""The staged LLM recipe (cudagym.baselines.llm_ppo) for N steps: mean reward per stage, and the policy before and
after on the tasks it trained on and on held-out ones.

    python benchmarks/llm_ppo_curve.py --backend cpu --device cpu --hidden 64 --layers 2 --train-tasks 1 \
        --held-out 1 --single-turn-steps 1 --agentic-steps 1 --envs 2 --max-turns 2 --max-new-tokens 16 \
        --eval-episodes 1 --sft-epochs 1 --value-epochs 2 --fast-timing

(the CPU form: mechanics only; docs/ppo.md has the H200 command)

Tasks: the built-in tasks with a reference solution for the backend, in id order; the first ``--train-tasks`` are
played by the RL stages and by the scripted agent (the RFT data), the next ``--held-out`` are only measured
(``--task`` and ``--held-out-task`` name them instead: a policy must fit a whole solution file in one message of
``--max-new-tokens``, so the tasks with short solutions suit a short run). The
model is the tiny Qwen3 built here (``--hidden``, ``--layers``), or ``--model NAME`` (a local folder or a cached Hub
model). Before and after the recipe, ``--eval-episodes`` sampled episodes per task group are played without updates;
their mean episode reward is the "policy" table, also kept in ``OUT/policy_untrained.json`` and
``OUT/policy_trained.json`` as soon as each is measured. The run's artefacts are under ``--out``. Prints two tables.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from cudagym.backends import resolve_backend
from cudagym.baselines.llm_ppo import PPOSettings, RecipeSpec, load_policy, run_recipe
from cudagym.baselines.llm_ppo.render import ChatRenderer
from cudagym.baselines.llm_ppo.rollout import collect, make_env_factory
from cudagym.baselines.llm_ppo.tiny import TINY_MODEL, tiny_corpus
from cudagym.evaluator import EvalConfig
from cudagym.harness.timing import TimingConfig
from cudagym.tasks import load
from cudagym.tasks.cli import add_sizes_option, parse_sizes
from cudagym.tools import tool_schemas

logger = logging.getLogger("llm_ppo_curve")


def _quiet_progress_bars() -> None:
    """Checkpoints are saved every stage; transformers' shard-writing bars would bury the log."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()


def mean_rewards(
    policy: Any, envs: list[Any], groups: dict[str, list[str]], episodes: int, settings: PPOSettings, turns: int
) -> dict[str, float]:
    """Per group of tasks, the mean return of ``episodes`` sampled episodes per task (no update). The groups' episodes
    share the environments, so a batch of turns serves all of them at once."""
    renderer = ChatRenderer(policy.tokenizer, tool_schemas("openai"))
    queue = [(name, task) for name, ids in groups.items() for task in ids for _ in range(episodes)]
    returns: dict[str, list[float]] = {name: [] for name, ids in groups.items() if ids}
    while queue:
        batch, queue = queue[: len(envs)], queue[len(envs) :]
        played = collect(policy, renderer, envs[: len(batch)], [task for _, task in batch], settings, max_turns=turns)
        for (name, _), trajectory in zip(batch, played, strict=True):
            returns[name].append(trajectory.episode_return)
    return {name: statistics.fmean(values) for name, values in returns.items()}


def _keep(out: Path, name: str, scores: dict[str, float]) -> None:
    """``OUT/policy_<name>.json``: a measurement kept as soon as it is taken (a run its time limit cuts keeps it)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"policy_{name}.json").write_text(json.dumps(scores, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    add("--device", default="auto")
    add("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    add("--model", default=TINY_MODEL)
    add("--hidden", type=int, default=256, help="tiny model hidden size")
    add("--layers", type=int, default=4, help="tiny model layers")
    add("--train-tasks", type=int, default=4, help="how many tasks to train on, the first in id order")
    add("--held-out", type=int, default=2, help="how many tasks to hold out, the next in id order")
    add("--task", action="append", default=[], help="a task to train on, by id (repeat; overrides --train-tasks)")
    add("--held-out-task", action="append", default=[], help="a held-out task, by id (repeat; overrides --held-out)")
    add("--single-turn-steps", type=int, default=2)
    add("--agentic-steps", type=int, default=8)
    add("--envs", type=int, default=8)
    add("--max-turns", type=int, default=6)
    add("--max-new-tokens", type=int, default=1024)
    add("--sft-epochs", type=int, default=20)
    add("--sft-lr", type=float, default=None, help="the actor's learning rate in RFT (default: --actor-lr)")
    add("--value-epochs", type=int, default=4)
    add("--actor-lr", type=float, default=1e-4)
    add("--critic-lr", type=float, default=1e-4)
    add("--temperature", type=float, default=1.0, help="sampling temperature of every episode (RL and measurement)")
    add("--eval-episodes", type=int, default=4, help="sampled episodes per task, before and after")
    add("--fast-timing", action="store_true", help="short timing and no torch.compile baseline")
    add("--seed", type=int, default=0)
    add("--out", type=Path, default=Path("llm_ppo_curve_out"))
    add_sizes_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    _quiet_progress_bars()

    backend = resolve_backend(args.backend).name
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    task_options = {"sizes": sizes} if sizes else {}
    tasks = [task for task in load("builtin", **task_options) if backend in task.solutions]
    train = [t.id for t in tasks[: args.train_tasks]]
    held = [t.id for t in tasks[args.train_tasks : args.train_tasks + args.held_out]]
    if args.task or args.held_out_task:
        known = {t.id for t in tasks}
        unknown = [name for name in args.task + args.held_out_task if name not in known]
        if unknown:
            raise SystemExit(f"not a built-in task with a {backend} solution: {', '.join(unknown)}")
        train = args.task or train
        held = args.held_out_task or [t.id for t in tasks if t.id not in train][: args.held_out]
    if not train:
        raise SystemExit(f"no built-in task has a {backend} solution")
    eval_config = None
    if args.fast_timing:
        timing = TimingConfig(warmup=2, warmup_seconds=0.02, min_reps=5, max_reps=50, budget_seconds=0.2)
        eval_config = EvalConfig(num_checks=3, timing=timing, compile_baseline=False)
    settings = PPOSettings(
        max_new_tokens=args.max_new_tokens,
        max_context_tokens=32768,
        actor_lr=args.actor_lr,
        critic_lr=args.critic_lr,
        sft_epochs=args.sft_epochs,
        sft_lr=args.sft_lr,
        value_epochs=args.value_epochs,
        temperature=args.temperature,
    )
    policy = load_policy(
        args.model,
        corpus=tiny_corpus(tasks, backend) if args.model == TINY_MODEL else None,
        device=args.device,
        dtype=args.dtype,
        tiny_size=(args.hidden, args.layers),
    )
    factory = make_env_factory(task_set="builtin", backend=backend, eval_config=eval_config, **task_options)
    groups = {"train": train, "held-out": held}
    start = time.monotonic()

    def measured() -> dict[str, float]:
        """The groups' mean rewards, in environments that live only as long (their evaluators hold device memory
        the recipe's own environments need)."""
        envs = [factory() for _ in range(args.envs)]
        try:
            return mean_rewards(policy, envs, groups, args.eval_episodes, settings, args.max_turns)
        finally:
            for env in envs:
                env.close()

    before = measured()
    logger.info("untrained policy: %s (%.0f s in)", before, time.monotonic() - start)
    _keep(args.out, "untrained", before)
    spec = RecipeSpec(
        out=args.out,
        model=args.model,
        task_ids=tuple(train),
        task_options=task_options,
        backend=backend,
        eval_config=eval_config,
        envs=args.envs,
        single_turn_steps=args.single_turn_steps,
        agentic_steps=args.agentic_steps,
        max_turns=args.max_turns,
        settings=settings,
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
    )
    report = run_recipe(spec, policy)
    after = measured()
    logger.info("after the recipe: %s (%.0f s in)", after, time.monotonic() - start)
    _keep(args.out, "trained", after)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# llm_ppo_curve: {stamp}, {platform.node()}, backend {backend}, model {args.model}")
    print(f"# train tasks: {', '.join(train)}; held out: {', '.join(held) or 'none'}")
    print("\n| stage | steps | mean training reward | last loss (rft: NLL, others: value) | seconds |")
    print("| --- | --- | --- | --- | --- |")
    for result in report.results:
        last = result.steps[-1] if result.steps else {}
        loss = last.get("sft_loss", last.get("value_loss"))
        reward = "" if result.mean_reward is None else f"{result.mean_reward:.3f}"
        shown = "" if loss is None else f"{loss:.4f}"
        print(f"| {result.stage.value} | {len(result.steps)} | {reward} | {shown} | {result.seconds:.1f} |")
    print(f"\n| policy | {' | '.join(f'{k} tasks' for k in before)} |\n| --- |{' --- |' * len(before)}")
    for name, scores in (("untrained", before), ("after the recipe", after)):
        print(f"| {name} | {' | '.join(f'{scores[k]:.3f}' for k in before)} |")
    print(
        f"\n# {args.eval_episodes} sampled episodes per task per row; total {time.monotonic() - start:.0f} s; "
        f"artefacts in {args.out}"
    )


if __name__ == "__main__":
    main()
