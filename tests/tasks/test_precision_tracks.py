"""Precision tracks (``precision=`` of every task-set loader), the tasks' precision hints (``[integrity_policy]
allow_tf32``) and their "large" input kind."""

from __future__ import annotations

import secrets
from pathlib import Path

import gymnasium as gym
import pytest

import cudagym  # noqa: F401  (registers CudaKernel-v0)
from cudagym.backends import resolve_backend
from cudagym.eval_config import EvalConfig
from cudagym.harness.protocol import Drop, Load, Prepare
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.reference_process import ReferenceProcess
from cudagym.tasks import load
from cudagym.tasks.builtin import load_builtin
from cudagym.tasks.kernelbench import load_kernelbench
from cudagym.tasks.task import Task, TaskMetadata, for_precision

RELU_FILE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", "bfloat16"), ("fp16", "float16")])
def test_a_builtin_track_has_its_own_ids_dtype_fingerprints_and_no_fp32_solutions(precision: str, dtype: str) -> None:
    plain, track = load("builtin"), load("builtin", precision=precision)
    assert len(track) == len(plain) == 36
    for fp32, task in zip(plain, track, strict=True):
        assert task.id == f"{fp32.id}@{precision}" and task.name.endswith(f"[{precision}]")
        assert task.metadata.precision == precision and task.metadata.dtype == dtype
        assert task.fingerprint("cpu") != fp32.fingerprint("cpu") and task.fingerprint("cuda") != fp32.fingerprint(
            "cuda"
        )
        assert task.source_for("cpu").startswith(f"# Precision track {precision}: ")
        assert task.source.endswith(fp32.source)  # the reference is the same code, cast by the reference process
        assert not task.solutions and not task.expected_tiers
        assert task.metadata.input_kinds == fp32.metadata.input_kinds and task.metadata.atol == fp32.metadata.atol
    assert [t.id for t in load_builtin(precision=precision)] == list(track.ids)


def test_fp32_is_the_default_track_and_unchanged() -> None:
    plain = load("builtin")
    assert list(load("builtin", precision="fp32").ids) == list(plain.ids)
    assert all(t.metadata.precision == "fp32" and t.metadata.dtype == "float32" for t in plain)
    assert plain.get("builtin/relu").solutions  # the fp32 track keeps its solutions and tiers


def test_a_track_is_filtered_by_its_own_ids() -> None:
    tasks = load("builtin", precision="bf16", ids=["builtin/softmax@bf16"], names=["*softmax*"])
    assert tasks.ids == ("builtin/softmax@bf16",)
    with pytest.raises(KeyError):
        load("builtin", precision="bf16", ids=["builtin/softmax"])


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        load("builtin", precision="fp8")
    with pytest.raises(ValueError, match="unknown precision"):
        TaskMetadata(precision="tf32")


def test_for_precision_is_idempotent_and_a_track_does_not_change_track() -> None:
    task = Task(id="mine/relu", name="relu", source=RELU_FILE)
    bf16 = for_precision(task, "bf16")
    assert for_precision(bf16, "bf16") is bf16 and for_precision(task, "fp32") is task
    with pytest.raises(ValueError, match="on the bf16 track already"):
        for_precision(bf16, "fp16")


def test_the_option_reaches_the_loader_through_gym_make() -> None:
    env = gym.make("CudaKernel-v0", task_set="builtin", backend="cpu", precision="fp16", ids=["builtin/relu@fp16"])
    try:
        assert env.unwrapped.tasks.ids == ("builtin/relu@fp16",)
        assert env.unwrapped.tasks[0].metadata.dtype == "float16"
    finally:
        env.close()


def test_the_kernelbench_loader_takes_the_option(tmp_path: Path) -> None:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "19_ReLU.py").write_text(RELU_FILE)
    direct = load_kernelbench(tmp_path, precision="bf16")
    assert [t.id for t in direct] == ["kernelbench/level1/19_ReLU@bf16"] and direct[0].metadata.dtype == "bfloat16"
    through = load("kernelbench", path=tmp_path, precision="bf16", level=1)
    assert through.ids == ("kernelbench/level1/19_ReLU@bf16",)
    assert load("kernelbench", path=tmp_path).ids == ("kernelbench/level1/19_ReLU",)


# -- the precision policy each task declares ------------------------------------------------------------------


def _cuda_sources(task: Task) -> str:
    root = Path(task.solutions["cuda"])
    return "".join(p.read_text() for p in sorted((root / "kernels").iterdir()) if p.suffix in (".cu", ".cuh"))


def test_the_tasks_whose_cuda_solution_multiplies_on_plain_tf32_allow_tf32_and_no_other_does() -> None:
    tasks = load("builtin")
    hinted = {t.id for t in tasks if dict(t.metadata.extra.get("integrity_policy", {})).get("allow_tf32")}
    assert hinted == {"builtin/gemm_bias_gelu", "builtin/gemm_bias_relu", "builtin/gemm_scale_residual"}
    for task in tasks:
        if "cuda" not in task.solutions:
            continue
        sources = _cuda_sources(task)
        # bmm splits each operand into two TF32 parts (3xTF32): fp32-level products, held to the fp32 bound
        plain_tf32 = "precision::tf32" in sources and "3xTF32" not in sources
        assert plain_tf32 == (task.id in hinted), task.id


def test_a_tasks_hint_sets_the_precision_mode_and_the_policy_reports_it() -> None:
    gemm = load("builtin").get("builtin/gemm_bias_relu")
    hints = gemm.metadata.extra["integrity_policy"]
    assert IntegrityPolicy().with_task_hints(hints).precision_mode("float32") == "tf32"
    assert IntegrityPolicy(honor_task_hints=False).with_task_hints(hints).precision_mode("float32") == "fp32"
    assert IntegrityPolicy().precision_mode("bfloat16") == "off"
    assert IntegrityPolicy().with_task_hints({"check_precision": False}).precision_mode("float32") == "off"
    assert IntegrityPolicy().precision_detail("float32") == "fp32 (fp64 reference)"
    assert IntegrityPolicy(allow_tf32=True).precision_detail("float32", [0.01, None]).startswith("tf32 allowed")
    assert "could not run" in IntegrityPolicy().precision_detail("float32", [None])
    assert IntegrityPolicy().precision_detail("float16") == "fp16: the task's tolerance alone (a float16 reference)"
    with pytest.raises(ValueError, match="may set only"):
        IntegrityPolicy().with_task_hints({"allow_fp8": True})


# -- the "large" input kind --------------------------------------------------------------------------------------

LARGE = (
    "softmax",
    "log_softmax",
    "logsumexp",
    "softmax_scale_bias",
    "layernorm",
    "add_layernorm",
    "rmsnorm",
    "rmsnorm_swiglu",
    "l2_normalize",
    "row_standardize_relu",
    "groupnorm",
    "batchnorm_train",
)


def test_the_exp_and_norm_tasks_draw_large_inputs() -> None:
    declared = {t.id for t in load("builtin") if "large" in t.metadata.input_kinds}
    assert declared == {f"builtin/{name}" for name in LARGE}


def test_every_task_that_draws_large_inputs_has_a_finite_reference_on_them() -> None:
    backend = resolve_backend("cpu")
    ref = ReferenceProcess(backend, EvalConfig())
    try:
        for task in load("builtin"):
            if "large" not in task.metadata.input_kinds:
                continue
            ref.call(Load(source=task.source_for("cpu"), device="cpu", dtype="float32", weight_seed=1, threads=0))
            for _ in range(2):
                reply = ref.call(Prepare(key="large", seed=secrets.randbits(62), kind="large"))
                assert reply.finite, task.id
            ref.call(Drop(key="large"))
    finally:
        ref.close()
