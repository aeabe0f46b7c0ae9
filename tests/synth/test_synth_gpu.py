"""The pipeline on the GPU: accepted tasks lie in CUDA Agent's 1-100 ms window, compile, and pass the task checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym.backends import resolve_backend
from cudagym.synth.output import write_outputs
from cudagym.synth.pipeline import Pipeline, SynthConfig
from cudagym.tasks import load
from cudagym.tasks.checks import check_tasks


@pytest.mark.gpu
def test_a_cuda_run_accepts_checked_tasks_in_the_window(
    tmp_path: Path, catalogue_file: Path, kernelbench_dir: Path, cache_dir: Path
) -> None:
    config = SynthConfig(
        out=tmp_path,
        count=6,
        backend="cuda",
        seed=1,
        workers=2,
        catalogue=catalogue_file,
        kernelbench=kernelbench_dir,
        cache_dir=cache_dir,
    )
    pipeline = Pipeline(config)
    assert pipeline.budget is not None and pipeline.budget.capacity > 0  # two workers share the device's memory
    result = pipeline.run()
    assert result.complete, [o.verdict for o in result.outcomes]
    assert pipeline.budget.held == 0
    for outcome in result.accepted:
        assert 1.0 <= outcome.verdict.eager_ms <= 100.0
        assert outcome.verdict.compile_ms is not None and outcome.verdict.compile_ms > 0
        assert outcome.verdict.seconds["memory_wait"] >= 0
    write_outputs(tmp_path, result.outcomes, 6, pipeline.backend.device_name, result.catalogue.version)
    tasks = load("ops6k", path=tmp_path / "tasks.parquet")
    checks = check_tasks(tasks, resolve_backend("cuda"), cache_dir=cache_dir)
    assert [c.verdict for c in checks] == ["ok"] * len(tasks)
