"""The input probe's rule (``cudagym.tasks.degeneracy.decide``), its cache and the loader's marking, with probes given
as data (the reference process's side runs in tests/tasks/test_task_checks.py and tests/adversarial)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cudagym.harness.protocol import ShortcutReport
from cudagym.tasks import Task, TaskMetadata, load
from cudagym.tasks.degeneracy import KindProbe, VerdictStore, annotate, decide, task_verdict_key
from cudagym.tasks.input_verdict import InputVerdict
from cudagym.tasks.task import with_sizes


def probes(**found: KindProbe) -> tuple[dict[str, int], object]:
    """A probe answering from ``found`` (kind -> probe; a kind not given has no shortcut), counting its calls."""
    calls: dict[str, int] = {}

    def probe(kind: str) -> KindProbe:
        calls[kind] = calls.get(kind, 0) + 1
        return found.get(kind, KindProbe(kind))

    return calls, probe


def test_a_task_without_shortcuts_keeps_its_kinds_and_probes_nothing_more() -> None:
    calls, probe = probes()
    verdict = decide(("task", "normal"), probe)
    assert verdict == InputVerdict(kinds=("task", "normal"))
    assert not verdict.degenerate and verdict.max_tier == 3 and calls == {"task": 1, "normal": 1}


def test_an_input_that_passes_adds_the_kind_that_closes_it_first() -> None:
    identity = KindProbe("task", always=frozenset({"input"}), near=frozenset({"input"}))
    calls, probe = probes(task=identity)
    verdict = decide(("task",), probe)
    assert verdict.kinds == ("normal", "task") and verdict.added == ("normal",) and verdict.shortcuts == ("input",)
    assert not verdict.degenerate and "large" not in calls  # closed: nothing more is probed
    assert "signed normal inputs close it" in verdict.describe()


def test_a_kind_that_only_comes_near_does_not_close_and_the_next_is_tried() -> None:
    zeros = frozenset({"zeros"})
    calls, probe = probes(task=KindProbe("task", zeros, zeros), normal=KindProbe("normal", near=zeros))
    verdict = decide(("task",), probe)
    assert verdict.added == ("large",) and calls["normal"] == 1 and calls["large"] == 1


def test_a_kind_with_nan_outputs_is_never_added() -> None:
    zeros = frozenset({"zeros"})
    _, probe = probes(task=KindProbe("task", zeros, zeros), normal=KindProbe("normal", usable=False))
    verdict = decide(("task",), probe)
    assert verdict.added == ("large",) and verdict.unusable == ("normal",)


def test_a_shortcut_no_kind_closes_makes_the_task_degenerate() -> None:
    zeros = frozenset({"zeros"})
    found = {kind: KindProbe(kind, zeros, zeros) for kind in ("task", "normal", "large")}
    _, probe = probes(**found)
    verdict = decide(("task",), probe)
    assert verdict.degenerate and verdict.unclosed == ("zeros",) and verdict.kinds == ("task",)
    assert verdict.max_tier == 1 and verdict.describe().startswith("DEGENERATE: zeros pass on every input kind")


def test_the_report_of_the_reference_process_reads_as_a_probe() -> None:
    report = ShortcutReport(
        kinds=["task", "task"],
        passes={
            "zeros": [False, False],
            "constant": [False, False],
            "input": [True, True],
            "independent": [False, True],
        },
        # independent: the first set has no predecessor, judged from the second on
        near={"zeros": [False, True], "constant": [False, False], "input": [True, True], "independent": [False, True]},
        finite_sets=[True, True],
        finite=True,
        deterministic=True,
    )
    probe = KindProbe.from_report(report)
    assert probe.kind == "task"
    assert probe.always == {"input", "independent"} and probe.near == {"zeros", "input", "independent"}
    assert probe.usable and probe.closes("constant") and not probe.closes("zeros")
    assert not KindProbe.from_report(dataclasses.replace(report, finite_sets=[True, False])).usable


def test_a_report_of_sets_of_several_kinds_is_read_one_kind_at_a_time() -> None:
    report = ShortcutReport(
        kinds=["task", "large", "task"],
        passes={name: [True, False, True] for name in ("zeros", "constant", "input", "independent")},
        near={name: [True, False, True] for name in ("zeros", "constant", "input", "independent")},
        finite_sets=[True, False, True],
        finite=False,
        deterministic=True,
    )
    with pytest.raises(ValueError, match="one input kind"):
        KindProbe.from_report(report)
    large = KindProbe.from_report(report.part("large"))
    assert large.kind == "large" and not large.always and not large.usable
    assert KindProbe.from_report(report.part("task")).always == {"zeros", "constant", "input", "independent"}


SOURCE = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\nN = 8\n"


def test_the_store_keeps_verdicts_by_what_decides_them(tmp_path: Path) -> None:
    task = Task(id="t/identity", name="identity", source=SOURCE, metadata=TaskMetadata(input_kinds=("task",)))
    verdict = InputVerdict(kinds=("normal", "task"), added=("normal",), shortcuts=("input",))
    store = VerdictStore(tmp_path)
    key = task_verdict_key(task, "cpu")
    assert store.read(key) is None and annotate(task, store) is task
    store.write(key, verdict, task.id)
    assert VerdictStore(tmp_path).read(key) == verdict  # from the file, in another store
    marked = annotate(task, VerdictStore(tmp_path))
    assert marked.metadata.input_verdicts == {"cpu": verdict, "cuda": verdict}  # one source: one verdict for both
    assert marked == task and marked.fingerprint("cpu") == task.fingerprint("cpu")  # knowledge, not identity
    # another tolerance, other declared kinds or other sizes decide anew
    assert task_verdict_key(task, "cpu", atol=1e-3) != key
    assert task_verdict_key(task, "cpu", kinds=("task", "normal")) != key
    sized = with_sizes(marked, {"N": 9})
    assert task_verdict_key(sized, "cpu") != key and not sized.metadata.input_verdicts  # not its verdicts


def test_load_marks_tasks_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path))
    relu = load("builtin", ids=["builtin/relu"])[0]
    assert not relu.metadata.input_verdicts
    verdict = InputVerdict(kinds=("task", "normal"))
    VerdictStore(tmp_path).write(task_verdict_key(relu, "cuda"), verdict, relu.id)
    marked = load("builtin", ids=["builtin/relu"])[0]
    assert dict(marked.metadata.input_verdicts) == {"cuda": verdict}  # its cpu size profile was not probed
