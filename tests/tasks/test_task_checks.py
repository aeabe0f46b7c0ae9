"""`cudagym tasks check`: degenerate KernelBench tasks are flagged, the input kinds that close their shortcuts are
found and stored (the loader then marks the tasks), the built-in ones are not flagged."""

from __future__ import annotations

import pytest

from cudagym.backends import resolve_backend
from cudagym.evaluator import EvalConfig
from cudagym.harness.timing import TimingConfig
from cudagym.tasks import load
from cudagym.tasks.checks import TaskCheck, check_tasks, format_report

SMALL = {"batch_size": 16, "dim": 4096}
# the checks' verdicts do not depend on how long eager is timed: a few repetitions give its figure
QUICK = EvalConfig(timing=TimingConfig(warmup=1, warmup_seconds=0.0, min_reps=3, max_reps=3, budget_seconds=0.0))


@pytest.fixture(scope="module")
def kernelbench_checks(kernelbench_dir) -> dict[str, TaskCheck]:
    ids = ["kernelbench/level1/19_ReLU", "kernelbench/level1/23_Softmax", "kernelbench/level1/21_Sigmoid",
           "kernelbench/level1/32_HardTanh"]  # fmt: skip
    tasks = load("kernelbench", path=str(kernelbench_dir), ids=ids, sizes=SMALL)
    results = check_tasks(tasks, resolve_backend("cpu"), runs=2, config=QUICK)
    return {r.task_id: r for r in results}


def test_degenerate_kernelbench_tasks_are_flagged(kernelbench_checks: dict[str, TaskCheck]) -> None:
    relu = kernelbench_checks["kernelbench/level1/19_ReLU"]
    assert relu.input_pass and relu.degenerate and "an input passes" in relu.verdict  # rand() inputs: ReLU is x
    hardtanh = kernelbench_checks["kernelbench/level1/32_HardTanh"]
    assert hardtanh.input_pass and hardtanh.degenerate
    softmax = kernelbench_checks["kernelbench/level1/23_Softmax"]
    assert softmax.zeros_pass and softmax.degenerate  # outputs ~1/4096, far below atol=1e-2
    sigmoid = kernelbench_checks["kernelbench/level1/21_Sigmoid"]
    assert not sigmoid.flagged and sigmoid.deterministic and sigmoid.eager_ms > 0


def test_the_input_kinds_that_close_them_are_chosen(kernelbench_checks: dict[str, TaskCheck]) -> None:
    for name in ("19_ReLU", "32_HardTanh"):  # signed values tell ReLU and HardTanh from the identity
        check = kernelbench_checks[f"kernelbench/level1/{name}"]
        assert check.inputs is not None and check.inputs.kinds == ("normal", "task"), check.inputs
        assert not check.inputs.degenerate and "signed normal inputs close it" in check.verdict
    # a softmax over 4096 values stays near the tolerance on signed normal inputs: large magnitudes make it peak
    softmax = kernelbench_checks["kernelbench/level1/23_Softmax"].inputs
    assert softmax is not None and softmax.added == ("large",) and not softmax.degenerate, softmax
    sigmoid = kernelbench_checks["kernelbench/level1/21_Sigmoid"].inputs
    assert sigmoid is not None and sigmoid.kinds == ("task",) and not sigmoid.shortcuts


def test_the_loader_marks_checked_tasks(kernelbench_dir, kernelbench_checks: dict[str, TaskCheck]) -> None:
    [relu] = load("kernelbench", path=str(kernelbench_dir), ids=["kernelbench/level1/19_ReLU"], sizes=SMALL)
    assert relu.metadata.input_verdicts["cpu"] == kernelbench_checks[relu.id].inputs
    assert relu.metadata.input_verdicts["cuda"].kinds == ("normal", "task")  # the same source: the same verdict
    [native] = load("kernelbench", path=str(kernelbench_dir), ids=["kernelbench/level1/19_ReLU"])
    assert not native.metadata.input_verdicts  # its native sizes were not checked: nothing is claimed


def test_report_table(kernelbench_checks: dict[str, TaskCheck]) -> None:
    table = format_report(list(kernelbench_checks.values()))
    assert table.splitlines()[0].startswith("| task | deterministic")
    assert "| kernelbench/level1/19_ReLU | yes | no | no | yes |" in table


def test_no_builtin_task_is_flagged() -> None:
    results = check_tasks(load("builtin"), resolve_backend("cpu"), runs=2, config=QUICK)
    flagged = [f"{r.task_id}: {r.verdict} {r.error}" for r in results if r.flagged]
    assert not flagged, "\n".join(flagged)


def test_a_broken_reference_is_reported_not_raised() -> None:
    from cudagym.tasks import Task

    broken = Task(id="t/broken", name="broken", source="import torch\nclass Model(torch.nn.Module):\n    pass\n")
    [result] = check_tasks([broken], resolve_backend("cpu"), runs=1)
    assert result.error and result.verdict == "error" and result.flagged


def test_with_slots_only_the_eager_timing_takes_the_timing_slot(kernelbench_dir, tmp_path) -> None:
    import contextlib

    from cudagym.harness.protocol import Held
    from cudagym.tasks.checks import DeviceSlots, _reference_process, check_task

    events: list[str] = []

    @contextlib.contextmanager
    def slot(name: str):
        events.append(f"{name} in")
        yield
        events.append(f"{name} out")

    cpu = resolve_backend("cpu")
    [sigmoid] = load("kernelbench", path=str(kernelbench_dir), ids=["kernelbench/level1/21_Sigmoid"], sizes=SMALL)
    reference = _reference_process(cpu, QUICK, tmp_path)
    try:
        slots = DeviceSlots(work=lambda: slot("work"), timing=lambda: slot("timing"))
        apart = check_task(sigmoid, cpu, config=QUICK, runs=2, cache_dir=tmp_path, reference=reference, slots=slots)
        assert events == ["work in", "work out", "timing in", "timing out"]
        assert not apart.flagged and apart.deterministic and apart.eager_ms and apart.eager_ms > 0, apart
        assert "check" not in reference.call(Held()).keys  # the timed set is given back
        together = check_task(sigmoid, cpu, config=QUICK, runs=2, cache_dir=tmp_path, reference=reference)
        assert len(events) == 4 and together.verdict == apart.verdict and together.eager_ms
    finally:
        reference.close()


def test_slots_without_timing_check_the_task_and_leave_eager_to_the_caller(tmp_path) -> None:
    """``DeviceSlots(timing=None)``: the checks run in ``work`` and no eager time is measured (the synthesis filters
    time it later, beside torch.compile, in one exclusive hold); with ``timing``, eager is timed inside it, once."""
    import contextlib

    from cudagym.tasks.checks import DeviceSlots, check_task

    task = load("builtin", ids=["builtin/relu"], sizes={"N": 4096})[0]
    entered: list[str] = []

    def slot(name: str):
        @contextlib.contextmanager
        def held():
            entered.append(name)
            yield

        return held

    untimed = check_task(task, resolve_backend("cpu"), cache_dir=tmp_path, slots=DeviceSlots(work=slot("work")))
    assert entered == ["work"]
    assert not untimed.error and untimed.deterministic and untimed.finite and not untimed.degenerate
    assert untimed.eager_ms is None
    timed = check_task(
        task, resolve_backend("cpu"), cache_dir=tmp_path, slots=DeviceSlots(work=slot("work"), timing=slot("timing"))
    )
    assert entered == ["work", "work", "timing"]
    assert timed.eager_ms is not None and timed.eager_ms > 0
