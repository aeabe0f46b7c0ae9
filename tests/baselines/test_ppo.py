"""The reference PPO agent on the CPU backend.

Kernel templates render honest solutions for every knob choice; the ones played through the real env pass
verification, except the ``approx`` precision, whose 6%-error exp fails the tolerance by design. The knob
env passes gymnasium's checker, and PPO's trained policy beats the untrained one by a clear margin.

Evaluations are few: two exp-based tasks (an affine chain with per-feature parameters and a row-wise
softmax) whose knob space is only the precision (fast or approx); PPO's thousands of steps replay their four
outcomes from the shared cache.

On a GPU (``-m gpu``), every template task plays three knob choices through the cuda backend.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from cudagym.baselines.kernel_templates import (
    KNOB_NAMES,
    TEMPLATE_TASKS,
    Knobs,
    KnobSpace,
    render,
    spec_for,
)
from cudagym.baselines.ppo import KernelTemplateEnv, SolutionRunner, template_tasks, train_ppo
from cudagym.baselines.ppo_cli import parse_knob_space
from cudagym.cli import build_parser
from cudagym.evaluator import EvalConfig
from cudagym.tasks import Task, TaskSet

PPO_TASKS = ("scale_bias_tanh", "softmax")
SMALL_CPU_SIZES = {"scale_bias_tanh": {"B": 256, "D": 1024}, "softmax": {"B": 256, "D": 2048}}  # a 16th of the rows
FAST, APPROX = 1, 2  # precision indices
SPACE = KnobSpace.fixed_except(precision=(FAST, APPROX))


def _small(task: Task) -> Task:
    sizes = {**task.metadata.sizes, "cpu": SMALL_CPU_SIZES[task.id.rsplit("/", 1)[-1]]}
    return dataclasses.replace(task, metadata=dataclasses.replace(task.metadata, sizes=sizes))


@pytest.fixture(scope="module")
def runner(fast_config: EvalConfig) -> Iterator[SolutionRunner]:
    """One env and one result cache for the module, on smaller inputs; torch.compile is not timed (tiers
    stop at 2)."""
    config = dataclasses.replace(fast_config, num_checks=2, compile_baseline=False)
    tasks = TaskSet("ppo-test", [_small(t) for t in template_tasks("builtin", PPO_TASKS)])
    solution_runner = SolutionRunner(tasks, "cpu", eval_config=config)
    yield solution_runner
    solution_runner.close()


def _forward_calls(model_new: str) -> list[str]:
    tree = ast.parse(model_new)
    forward = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "forward")
    return [ast.unparse(c.func) for c in ast.walk(forward) if isinstance(c, ast.Call)]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_knob_combination_renders_an_honest_solution(backend: str) -> None:
    for key, spec in TEMPLATE_TASKS.items():
        digests = set()
        for indices in KnobSpace():
            solution = render(key, Knobs.from_indices(indices, backend), backend)
            digests.add(solution.digest)
        ext = "cpp" if backend == "cpu" else "cu"
        assert set(solution.files) == {f"kernels/{key}.{ext}", f"kernels/{key}_binding.cpp", "model_new.py"}
        kernel = solution.files[f"kernels/{key}.{ext}"]
        assert f"void launch_{key}(" in kernel and "torch" not in kernel and "at::" not in kernel
        assert f"REGISTER_BINDING({key}, bind)" in solution.files[f"kernels/{key}_binding.cpp"]
        calls = _forward_calls(solution.files["model_new.py"])
        assert calls[0] == f"cuda_extension.{key}_forward", calls
        assert all(c.endswith(".contiguous") for c in calls[1:]), calls  # no torch compute in forward
        # knobs that cannot matter render the same source; the others all change it
        expected = 4 * 3 * 2  # block, vector, unroll
        expected *= 3 if spec.uses_exp else 1
        expected *= 2 if spec.family == "rowwise" or len(spec.stages) > 1 else 1
        expected *= 2 if spec.family == "rowwise" and backend == "cuda" else 1
        assert len(digests) == expected, (key, backend)


def test_knob_space_maps_actions_to_knobs() -> None:
    assert SPACE.nvec == (1, 1, 1, 1, 1, 2) and len(SPACE) == 2
    assert SPACE.indices([0, 0, 0, 0, 0, 1])["precision"] == APPROX
    knobs = Knobs.from_indices(SPACE.indices([0, 0, 0, 0, 0, 0]), "cuda")
    assert knobs == Knobs(block=256, vector=4, unroll=4, rows=1, fuse=True, precision="fast")
    assert len(KnobSpace()) == 4 * 3 * 2 * 2 * 2 * 3
    with pytest.raises(ValueError, match="unknown knobs"):
        KnobSpace({"tiles": (0,)})
    with pytest.raises(ValueError, match="precision"):
        KnobSpace({"precision": (3,)})
    with pytest.raises(KeyError, match="no kernel template for task 'conv2d'"):
        spec_for("builtin/conv2d")
    named = parse_knob_space(["precision=fast,approx", "vector=1,4"], "cuda")
    assert named.choices["vector"] == (0, 2) and len(named) == 4  # the unnamed knobs stay at their default
    assert len(parse_knob_space([], "cuda")) == len(KnobSpace())
    with pytest.raises(ValueError, match="not a cpu value"):
        parse_knob_space(["vector=2"], "cpu")


def test_played_templates_verify_except_the_approximate_exp(runner: SolutionRunner) -> None:
    for task in runner.tasks:
        for precision in (FAST, APPROX):
            knobs = Knobs.from_indices({"precision": precision}, "cpu")
            outcome, cached = runner.evaluate(task, render(task, knobs, "cpu"))
            assert not cached and outcome.compiled, (task.id, outcome.message)
            if precision == FAST:
                assert outcome.correct and outcome.tier >= 1 and outcome.reward == outcome.tier, outcome
                assert outcome.speedup_eager is not None and outcome.speedup_eager > 0
            else:
                assert not outcome.correct and outcome.tier == -1 and outcome.reward == -1, outcome
                assert "outside tolerance" in outcome.message
    before = runner.evaluations
    task = runner.tasks.get("builtin/softmax")
    again, cached = runner.evaluate(task, render(task, Knobs.from_indices({"precision": FAST}, "cpu"), "cpu"))
    assert cached and runner.evaluations == before and again.tier >= 1


def evaluate_every_choice(runner: SolutionRunner) -> None:
    """Plays the four (task, precision) solutions once, so that later steps replay them from the cache: an
    evaluated step's info (``cached``, ``seconds``) differs from a replayed one's, whichever test ran first."""
    for task in runner.tasks:
        for precision in (FAST, APPROX):
            runner.evaluate(task, render(task, Knobs.from_indices({"precision": precision}, "cpu"), "cpu"))


def test_the_knob_env_passes_gymnasiums_checker(runner: SolutionRunner) -> None:
    evaluate_every_choice(runner)
    env = KernelTemplateEnv(runner.tasks, ids=PPO_TASKS, backend="cpu", knob_space=SPACE, runner=runner)
    check_env(env, skip_render_check=True)
    multi = KernelTemplateEnv(runner.tasks, ids=PPO_TASKS, knob_space=SPACE, attempts=2, runner=runner)
    first, info = multi.reset(seed=3)
    assert multi.observation_space.contains(first) and info["task_id"] in {f"builtin/{t}" for t in PPO_TASKS}
    obs, reward, terminated, _, info = multi.step(np.array([0, 0, 0, 0, 0, 1]))
    assert not terminated and reward == -1 and info["cached"] and info["knobs"]["precision"] == "approx"
    assert obs[-2] == pytest.approx(-1 / 3) and not np.array_equal(obs, first)  # sees its previous tier
    _, reward, terminated, _, _ = multi.step(np.array([0, 0, 0, 0, 0, 0]))
    assert terminated and reward >= 1
    with pytest.raises(ValueError, match="outside"):
        multi.step(np.array([0, 0, 0, 0, 0, 2]))


def test_ppo_trained_policy_beats_the_untrained_one(runner: SolutionRunner, tmp_path: Path) -> None:
    evaluate_every_choice(runner)  # the four real evaluations (none where an earlier test made them)
    before, misses = runner.evaluations, runner.cache.misses
    report = train_ppo(
        tasks=runner.tasks,
        ids=PPO_TASKS,
        backend="cpu",
        timesteps=4096,
        n_envs=4,
        seed=0,
        out_dir=str(tmp_path),
        knob_space=SPACE,
        eval_config=runner.eval_config,
        cache=runner.cache,
        untrained_episodes_per_task=32,
    )
    # every step replayed one of the four real evaluations
    assert runner.evaluations == before and report.cache["misses"] == misses and report.cache["distinct"] == 4
    assert report.timesteps >= 4096
    # the untrained policy samples approx about half of the time (reward -1); the trained one never does
    assert all(choice["precision"] == "fast" for choice in report.trained.choices.values()), report.trained
    assert report.trained.mean >= 1.0
    assert report.margin >= 0.5, (report.untrained.mean, report.trained.mean)
    for name in ("model", "curve_csv", "curve_json", "curve_png", "summary", "tensorboard"):
        assert Path(report.files[name]).exists(), name
    assert any(Path(report.files["checkpoints"]).glob("ppo_*_steps.zip"))
    rows = Path(report.files["curve_csv"]).read_text().splitlines()
    assert rows[0].startswith("timestep,task_id,reward") and len(rows) > 4096 // 2


def test_cli_registers_baselines_ppo() -> None:
    args = build_parser().parse_args(
        ["baselines", "ppo", "--timesteps", "64", "--task", "softmax", "--knob", "precision=fast,approx"]
    )
    assert args.timesteps == 64 and args.task == ["softmax"] and callable(args.func)
    assert tuple(KNOB_NAMES) == ("block", "vector", "unroll", "rows", "fuse", "precision")


GPU_CHOICES = (
    {},  # the defaults: 256 threads, float4, 4 packs in flight, fused, __expf
    {"block": 0, "vector": 0, "unroll": 0, "rows": 1, "fuse": 1, "precision": 0},  # 32 threads, scalar, unfused
    {"block": 3, "vector": 1, "unroll": 1, "rows": 1},  # 512 threads, float2, 4 rows per block
)


@pytest.fixture(scope="module")
def gpu_runner() -> Iterator[SolutionRunner]:
    from cudagym.harness.timing import TimingConfig

    config = EvalConfig(num_checks=2, compile_baseline=False, timing=TimingConfig(min_reps=5, budget_seconds=0.2))
    solution_runner = SolutionRunner(template_tasks("builtin"), "cuda", eval_config=config)
    yield solution_runner
    solution_runner.close()


@pytest.mark.gpu
@pytest.mark.parametrize("key", list(TEMPLATE_TASKS))
def test_cuda_templates_verify_on_the_gpu(key: str, gpu_runner: SolutionRunner) -> None:
    from cudagym.backends import query_gpu

    if query_gpu() is None:
        pytest.skip("no NVIDIA GPU visible (nvidia-smi)")
    task = gpu_runner.tasks.get(f"builtin/{key}")
    for choice in GPU_CHOICES:
        knobs = Knobs.from_indices(choice, "cuda")
        outcome, _ = gpu_runner.evaluate(task, render(task, knobs, "cuda"))
        assert outcome.correct and outcome.tier >= 1, (key, knobs, outcome.message)
