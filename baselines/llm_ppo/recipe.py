"""The staged recipe end to end: the models, the environments, the RFT data, the stages in order, the summary.

``run_recipe(RecipeSpec(...))`` runs the stages named in ``spec.stages`` (any subset, always in the recipe's
order), each starting from the models the one before left; ``spec.init`` starts from a checkpoint an earlier run
wrote instead (``<out>/<stage>/``). RFT data is ``spec.rft_data`` (``cudagym rft-export --format hf`` files), or,
when none is given, the scripted agent's episodes on ``spec.rft_tasks`` exported with CUDA Agent's filter. Value
pretraining reads ``spec.value_data``, else the RFT data together with the single-turn stage's rollouts (returns
both high and low) where that stage ran.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cudagym.baselines.llm_ppo.artefacts import RunLog
from cudagym.baselines.llm_ppo.config import PPOSettings, Stage, StageResult
from cudagym.baselines.llm_ppo.policy import Policy, load_policy
from cudagym.baselines.llm_ppo.render import ChatRenderer
from cudagym.baselines.llm_ppo.rollout import make_env_factory
from cudagym.baselines.llm_ppo.stages import rejection_finetune, rl_stage, value_pretrain
from cudagym.baselines.llm_ppo.tiny import TINY_MODEL, tiny_corpus
from cudagym.tasks import load as load_tasks
from cudagym.tools import tool_schemas

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RecipeSpec:
    """One run of the recipe.

    Attributes:
        out: the run's folder.
        model: a Hugging Face model name or folder, or "tiny" (built from a config here).
        stages: which stages run (in the recipe's order whatever the order given).
        task_set: the task set the RL stages play.
        task_ids: the tasks the RL stages play in turn (None: all of the set).
        rft_tasks: the tasks the scripted agent plays for RFT data when ``rft_data`` is empty (None: ``task_ids``).
        rft_data: RFT chat JSONL files.
        value_data: chat JSONL files with recorded returns for value pretraining.
        init: a checkpoint folder (``actor/``, ``critic/``) to start from.
        backend: "auto", "cpu" or "cuda".
        reward: the environment's reward shaper.
        eval_config: the environment's evaluation settings (None: defaults).
        env_options: more keyword arguments of the environments (``service_socket=`` to evaluate through the
            machine's evaluation service, ``max_obs_chars=``, ...).
        task_options: the task loader's options, for the environments and the scripted agent's play alike
            (``sizes={"N": ...}`` to shrink the tasks' tensors, ``precision=``; see ``cudagym.tasks.load``).
        envs: environments playing at once (episodes per PPO step).
        single_turn_steps: PPO steps of stage 1.
        agentic_steps: PPO steps of stage 4.
        max_turns: assistant messages per episode in stage 4 (stage 1 has one).
        settings: the hyperparameters.
        device: "auto", "cpu" or "cuda[:N]".
        dtype: the models' dtype.
        lora_rank: LoRA adapters on the actor (needs peft); None: full fine-tuning.
        seed: seeds torch, Python's random and the task order.
    """

    out: Path
    model: str = TINY_MODEL
    stages: tuple[Stage, ...] = tuple(Stage)
    task_set: str = "builtin"
    task_ids: tuple[str, ...] | None = None
    rft_tasks: tuple[str, ...] | None = None
    rft_data: tuple[Path, ...] = ()
    value_data: tuple[Path, ...] = ()
    init: Path | None = None
    backend: str = "auto"
    reward: str = "milestone"
    eval_config: Any = None
    env_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    task_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    envs: int = 2
    single_turn_steps: int = 2
    agentic_steps: int = 2
    max_turns: int = 4
    settings: PPOSettings = dataclasses.field(default_factory=PPOSettings)
    device: str = "auto"
    dtype: str = "float32"
    lora_rank: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("no stage to run")
        for name in ("envs", "single_turn_steps", "agentic_steps", "max_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class RecipeReport:
    """What a run did: each stage's result, the artefacts and the wall time."""

    results: tuple[StageResult, ...]
    files: dict[str, Path]
    seconds: float

    def result(self, stage: Stage) -> StageResult:
        for result in self.results:
            if result.stage == stage:
                return result
        raise KeyError(f"the stage {stage.value} did not run")


def scripted_rft_data(
    task_ids: Sequence[str],
    *,
    task_set: str,
    backend: str,
    eval_config: Any,
    out: Path,
    task_options: Mapping[str, Any] | None = None,
) -> tuple[Path, Any]:
    """Plays the scripted agent on ``task_ids`` (read, write, submit: the submit compiles, verifies and profiles) and
    exports its good episodes as RFT data (``out/scripted_rft.jsonl``, Hugging Face form); returns the file and the
    export's counts. ``task_options``: the task loader's options (``sizes=``, ``precision=``: the tasks as the RL
    stages load them)."""
    from cudagym.baselines.agents import make_agent
    from cudagym.baselines.rft import export_rft
    from cudagym.evaluation import evaluate

    tasks = [task for task in load_tasks(task_set, **dict(task_options or {})) if task.id in set(task_ids)]
    if not tasks:
        raise ValueError(f"none of the tasks {list(task_ids)} is in the task set {task_set}")
    trajectories = out / "scripted_trajectories.jsonl"
    evaluate(
        tasks,
        lambda: make_agent("scripted", checks=False),
        backend=backend,
        out=out / "scripted_results.jsonl",
        trajectories=trajectories,
        eval_config=eval_config,
        progress=False,
    )
    export = export_rft(trajectories, out / "scripted_rft.jsonl", chat_format="hf")
    if export.kept == 0:
        raise RuntimeError(f"the scripted agent left no trajectory with a positive reward on {list(task_ids)}")
    return export.out, export


def _ordered(stages: Sequence[Stage]) -> list[Stage]:
    return [stage for stage in Stage if stage in set(stages)]


def run_recipe(spec: RecipeSpec, policy: Policy | None = None) -> RecipeReport:
    """Runs the stages of ``spec`` (see the module doc); ``policy`` replaces the models ``spec`` names."""
    import random

    import torch

    start = time.monotonic()
    random.seed(spec.seed)
    torch.manual_seed(spec.seed)
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = {"ids": list(spec.task_ids)} if spec.task_ids else {}
    tasks = load_tasks(spec.task_set, **chosen, **spec.task_options)
    if policy is None:
        corpus = tiny_corpus(tasks, spec.backend) if spec.model == TINY_MODEL and spec.init is None else None
        policy = load_policy(
            spec.model, init=spec.init, corpus=corpus, device=spec.device, dtype=spec.dtype, lora_rank=spec.lora_rank
        )
    renderer = ChatRenderer(policy.tokenizer, tool_schemas("openai"))
    log = RunLog(out)
    cycle = itertools.cycle(tasks.ids)
    results: list[StageResult] = []
    stages = _ordered(spec.stages)
    rl_envs: list[Any] = []
    try:
        rft_data = list(spec.rft_data)
        if not rft_data and (Stage.RFT in stages or (Stage.VALUE in stages and not spec.value_data)):
            # before the RL environments exist: the scripted play's evaluators need the device memory they will hold
            path, export = scripted_rft_data(
                spec.rft_tasks or tasks.ids,
                task_set=spec.task_set,
                backend=spec.backend,
                eval_config=spec.eval_config,
                out=out,
                task_options=spec.task_options,
            )
            logger.info("RFT data from the scripted agent: %s", export)
            rft_data = [path]
        if Stage.SINGLE_TURN in stages or Stage.AGENTIC in stages:
            factory = make_env_factory(
                task_set=spec.task_set,
                backend=spec.backend,
                reward=spec.reward,
                eval_config=spec.eval_config,
                **spec.task_options,
                **spec.env_options,
            )
            rl_envs = [factory() for _ in range(spec.envs)]

        def next_tasks(count: int) -> list[str]:
            return [next(cycle) for _ in range(count)]

        for stage in stages:
            if stage is Stage.SINGLE_TURN:
                result = rl_stage(
                    stage, policy, renderer, rl_envs, next_tasks, spec.settings,
                    steps=spec.single_turn_steps, max_turns=1, out=out, log=log,
                )  # fmt: skip
            elif stage is Stage.RFT:
                result = rejection_finetune(policy, renderer, rft_data, spec.settings, out=out, log=log)
            elif stage is Stage.VALUE:
                data = list(spec.value_data) or rft_data + [
                    r.files["rollouts"] for r in results if "rollouts" in r.files
                ]
                result = value_pretrain(policy, renderer, data, spec.settings, out=out, log=log)
            else:
                result = rl_stage(
                    stage, policy, renderer, rl_envs, next_tasks, spec.settings,
                    steps=spec.agentic_steps, max_turns=spec.max_turns, out=out, log=log,
                )  # fmt: skip
            results.append(result)
            logger.info("stage %s done in %.1f s", stage.value, result.seconds)
    finally:
        for env in rl_envs:
            env.close()
        files = log.write()
        log.close()
    summary = out / "summary.json"
    seconds = time.monotonic() - start
    summary.write_text(
        json.dumps(
            {"model": spec.model, "seconds": seconds, "stages": [r.to_json() for r in results]}, indent=1, default=str
        )
        + "\n"
    )
    files["summary"] = summary
    return RecipeReport(tuple(results), files, seconds)
