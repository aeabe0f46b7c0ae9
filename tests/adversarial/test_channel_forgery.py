"""A candidate writing onto its own channel to the evaluator (cudagym/candidate_messages.py): the channel is its word,
so lines that are not messages of the protocol are passed over, a failure it reports is a failure with what could be
read of it, and a malformed kernel table counts as none; the evaluation answers with an observation and goes on.
With every static check off, so that only the reading of the channel stands in the way."""

from __future__ import annotations

from cudagym_testing import RELU, relu_solution, write_all

from cudagym.baselines import tool_call
from cudagym.candidate_messages import Step, parse
from cudagym.envs import CudaKernelEnv

# at import, the agent's code finds the harness's channel and writes ``LINES`` onto it, before the harness's own
# messages of the stage
WRITER = """import gc
_channel = next(o for o in gc.get_objects() if type(o).__name__ == "Channel")
for _line in {lines!r}:
    _channel._file.write(_line + "\\n")
_channel._file.flush()
"""
HONEST = (
    "import cuda_extension\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
    "    def forward(self, x):\n        return cuda_extension.relu_forward(x.contiguous())\n"
)
JUNK = [
    "[1, 2, 3]",
    '"done"',
    "42",
    "null",
    "{not json",
    '{"stage": "ready", "ok": "yes"}',
    '{"stage": 7}',
    '{"stage": "teleport"}',
    "[" * 5000 + "]" * 5000,
]


def forged(lines: list[str]) -> dict[str, str]:
    files = relu_solution()
    files["model_new.py"] = WRITER.format(lines=lines) + HONEST
    return files


def test_lines_outside_the_protocol_are_passed_over(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, forged(JUNK))
    for stage in ("verify", "profile"):
        obs, _, _, _, info = env.step(tool_call(stage))
        assert info["status"] == "ok", obs  # an honest kernel: the junk only cost the reading of it


def test_a_failure_reported_without_a_readable_error_is_still_a_failure(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, forged(['{"stage": "load", "ok": false, "error": 42}']))
    obs, _, _, _, info = env.step(tool_call("verify"))
    assert info["status"] == "load_error", obs
    assert "while loading model_new.py" in obs, obs


def test_a_malformed_kernel_table_counts_as_none(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    table = '{"stage": "kernels", "kernels": [{"name": "relu", "calls": 1, "total_ms": "fast", "share": 2}]}'
    write_all(env, forged([table]))
    obs, _, _, _, info = env.step(tool_call("profile"))
    assert info["status"] == "ok", obs
    assert info["result"]["kernels"] == []


def test_the_harness_own_messages_read_as_they_were_sent() -> None:
    ready = parse({"stage": "ready"})
    assert ready.step is Step.READY and not ready.failed
    failure = parse(
        {"stage": "run", "ok": False, "error": {"type": "RuntimeError", "message": "CUDA error", "cuda": "x"}}
    )
    assert failure.failed and failure.error is not None and failure.error.type == "RuntimeError"
    row = {"name": "relu_kernel", "calls": 3, "total_ms": 0.5, "share": 1.0}
    (kernel,) = parse({"stage": "kernels", "kernels": [row]}).kernels
    assert (kernel.name, kernel.calls, kernel.total_ms, kernel.share) == ("relu_kernel", 3, 0.5, 1.0)
    assert parse({"garbled": "oops"}).step is Step.UNKNOWN and parse([1]).text == "[1]"
    assert parse({"stage": "load", "ok": False, "error": "text"}).error.message == "text"  # type: ignore[union-attr]
