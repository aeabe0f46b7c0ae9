"""The pool's compile workers: the same gate and build a local evaluator's compile runs, and what they leave to an
evaluator (a single-file model_new.py, whose compile imports it in a candidate)."""

from __future__ import annotations

from pool_testing import CPU, MachinePool, solution_workspace

from cudagym.eval_config import EvalConfig
from cudagym.pool import JobStage, PoolEvaluator, PoolJob
from cudagym.pool.compile_lane import CompileLane
from cudagym.results import CompileResult, Status
from cudagym.tasks import Task

TORCH_RELU = (
    "import torch\nimport torch.nn as nn\nimport cuda_extension\n\n\nclass ModelNew(nn.Module):\n"
    "    def forward(self, x):\n        return torch.relu(x)\n"
)


def test_a_changed_fixed_file_is_restored_and_fails_the_compile(
    machine: MachinePool, small_relu: Task, pool_config: EvalConfig
) -> None:
    workspace = solution_workspace(small_relu)
    binding = workspace.path / "binding.cpp"
    original = binding.read_text()
    binding.write_text(original + "\n// changed\n")
    try:
        result = PoolEvaluator(machine.pool, small_relu, CPU, pool_config).compile(workspace)
        restored = binding.read_text()
    finally:
        workspace.remove()
    assert isinstance(result, CompileResult) and result.status is Status.INTEGRITY, result
    assert "binding.cpp" in result.message and restored == original


def test_the_static_checks_gate_the_build(machine: MachinePool, small_relu: Task, pool_config: EvalConfig) -> None:
    workspace = solution_workspace(small_relu)
    workspace.write("model_new.py", TORCH_RELU)  # torch computes the answer: the torch_compute rule
    try:
        result = PoolEvaluator(machine.pool, small_relu, CPU, pool_config).compile(workspace)
    finally:
        workspace.remove()
    assert result.status is Status.INTEGRITY and "torch_compute" in result.message, result


def test_a_single_file_model_new_is_compiled_by_an_evaluator(small_relu: Task, pool_config: EvalConfig) -> None:
    workspace = solution_workspace(small_relu)
    try:
        kernels = PoolJob(JobStage.COMPILE, small_relu, "cpu", pool_config, workspace)
        assert CompileLane.takes(kernels)
        for source in workspace.kernel_sources():
            source.unlink()
        single = PoolJob(JobStage.COMPILE, small_relu, "cpu", pool_config, workspace)
        assert not CompileLane.takes(single)  # importing it runs the agent's code: a candidate's job
        assert not CompileLane.takes(PoolJob(JobStage.VERIFY, small_relu, "cpu", pool_config, workspace))
    finally:
        workspace.remove()
