"""The pipeline end to end on the cpu backend: the CLI's run, its output, resuming, determinism, playability."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudagym import cli
from cudagym.synth.pipeline import JOURNAL, Pipeline, SynthConfig
from cudagym.tasks import load

SEED = 7


def _synth(out: Path, catalogue: Path, kernelbench: Path, count: int, *extra: str) -> int:
    common = ["--backend", "cpu", "--seed", str(SEED), "--catalogue", str(catalogue), "--kernelbench", str(kernelbench)]
    return cli.main(
        ["synth", "--out", str(out), "--count", str(count), *common, "--no-compile-check", "--no-progress", *extra]
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, catalogue_file: Path, kernelbench_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("synth") / "run"
    assert _synth(out, catalogue_file, kernelbench_dir, 2) == 0
    return out


def test_a_small_cpu_run_writes_a_loadable_set_and_its_report(run_dir: Path) -> None:
    tasks = load("ops6k", path=run_dir / "tasks.parquet")
    assert len(tasks) == 2
    for task in tasks:
        assert task.metadata.extra["num_ops"] == len(task.metadata.ops) >= 1
        assert task.metadata.extra["data_source"].split("#")[0] in ("torch", "transformers")
        assert "def get_init_inputs" in task.source
    import pyarrow.parquet as pq

    row = pq.read_table(run_dir / "tasks.parquet").to_pylist()[0]
    assert row["eager_ms"] >= 0.5 and row["device"] and row["catalogue_version"].startswith("1-torch")
    assert row["nearest_kernelbench"].startswith("kernelbench/level")
    assert json.loads(row["shapes"])[0]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["accepted"] >= 2 and report["entered"]["compose"] == report["candidates"]
    assert sum(report["dropped"].values()) + report["accepted"] == report["candidates"]
    assert all((run_dir / name).stat().st_size > 0 for name in ("ops_per_task.png", "op_frequency.png", "eager_ms.png"))
    datasets = pytest.importorskip("datasets")
    rows = datasets.load_dataset("parquet", data_files=str(run_dir / "tasks.parquet"), split="train")
    assert rows.column_names[:3] == ["code", "ops", "data_source"]


def test_a_run_resumes_from_its_journal(run_dir: Path, catalogue_file: Path, kernelbench_dir: Path) -> None:
    before = (run_dir / JOURNAL).read_text().splitlines()
    assert _synth(run_dir, catalogue_file, kernelbench_dir, 3) == 0
    after = (run_dir / JOURNAL).read_text().splitlines()
    assert after[: len(before)] == before and len(after) > len(before)
    assert len(load("ops6k", path=run_dir / "tasks.parquet")) == 3
    assert _synth(run_dir, catalogue_file, kernelbench_dir, 3, "--ops-per-task", "2-3") == 1  # other settings


def test_the_same_seed_composes_the_same_candidates(tmp_path: Path, catalogue_file: Path) -> None:
    def codes(out: Path, seed: int) -> list[str]:
        pipeline = Pipeline(SynthConfig(out=out, count=1, seed=seed, catalogue=catalogue_file))
        return [getattr(pipeline.compose(i), "code", "") for i in range(12)]

    first = codes(tmp_path / "a", SEED)
    assert first == codes(tmp_path / "b", SEED)
    assert first != codes(tmp_path / "c", SEED + 1)


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="1-5"):
        SynthConfig(out=tmp_path, count=1, ops_range=(0, 3))
    with pytest.raises(ValueError, match="count"):
        SynthConfig(out=tmp_path, count=0)
    assert cli.main(["synth", "--out", str(tmp_path), "--count", "1", "--model", "m"]) == 1


def test_a_generated_set_is_playable(run_dir: Path, tmp_path: Path) -> None:
    """The random agent and ``cudagym eval`` run over the set with no harness error."""
    results = tmp_path / "results.jsonl"
    tasks = ["--task-set", "ops6k", "--path", str(run_dir / "tasks.parquet"), "--limit", "2"]
    run = ["--backend", "cpu", "--quick", "--max-turns", "4", "--max-actions", "4", "--out", str(results)]
    status = cli.main(["eval", "--agent", "random", *tasks, *run, "--no-progress"])
    assert status == 0
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == 2
