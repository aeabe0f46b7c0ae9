"""``Tuning`` (cudagym/tuning.py): the throughput machinery behind ``EvalConfig.tuning``, each "auto" answered in one
place for a backend."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cudagym import tuning
from cudagym.backends import resolve_backend
from cudagym.eval_config import EvalConfig, resolve_tuning
from cudagym.evaluator import LocalEvaluator
from cudagym.pool.jobs import canonical
from cudagym.tasks import load
from cudagym.tuning import Tuning

CPU = resolve_backend("cpu")
CUDA = dataclasses.replace(CPU, name="cuda", device="cuda:0")


@pytest.fixture(autouse=True)
def seven_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """An H200's answer for the device's memory slots (no nvidia-smi here)."""
    monkeypatch.setattr(tuning, "auto_slots", lambda backend: 7 if backend.is_cuda else 0)


def test_auto_is_answered_per_backend(tmp_path: Path) -> None:
    cuda = tuning.resolve(Tuning(), CUDA, tmp_path)
    cpu = tuning.resolve(Tuning(), CPU, tmp_path)
    assert (cuda.prestart, cuda.prepare_ahead, cuda.preload_compiler, cuda.memory_slots) == (2, True, True, 7)
    # cpu: one spare (a candidate takes a core), nothing prepared ahead or preloaded (the agent's compiles need the
    # cores), no bound on environments inside a stage
    assert (cpu.prestart, cpu.prepare_ahead, cpu.preload_compiler, cpu.memory_slots) == (1, False, False, 0)
    assert cuda.fork_server and cpu.fork_server and cuda.max_leaked_bytes == 4 * 1024**3


def test_explicit_settings_win_except_where_the_backend_cannot_take_them(tmp_path: Path) -> None:
    chosen = Tuning(prestart=3, prepare_ahead=True, memory_slots=2, max_leaked_bytes=1 << 30)
    cuda = tuning.resolve(chosen, CUDA, tmp_path)
    assert (cuda.prestart, cuda.prepare_ahead, cuda.memory_slots, cuda.max_leaked_bytes) == (3, True, 2, 1 << 30)
    assert tuning.resolve(chosen, CPU, tmp_path).prestart == 1  # more than one spare would take the compiles' cores
    assert tuning.resolve(Tuning(prestart=0), CPU, tmp_path).prestart == 0


def test_the_compiler_is_preloaded_when_preparing_ahead_with_the_compile_baseline(tmp_path: Path) -> None:
    def preloads(setting: Tuning, backend: object, compile_baseline: bool = True) -> bool:
        return tuning.resolve(setting, backend, tmp_path, compile_baseline=compile_baseline).preload_compiler  # type: ignore[arg-type]

    assert preloads(Tuning(prepare_ahead=True), CPU)
    assert preloads(Tuning(preload_compiler=True), CPU)
    assert not preloads(Tuning(preload_compiler=False), CUDA)
    assert not preloads(Tuning(preload_compiler=True), CUDA, compile_baseline=False)  # nothing to build


def test_the_fork_server_switch_of_the_environment_turns_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDAGYM_FORK_SERVER", "0")
    assert not tuning.resolve(Tuning(), CUDA, tmp_path).fork_server


def test_bytecode_off_means_the_installations_own(tmp_path: Path) -> None:
    assert tuning.resolve(Tuning(bytecode_cache=False), CPU, tmp_path).bytecode_dir is None
    assert tuning.resolve(Tuning(bytecode_cache=True), CPU, tmp_path).bytecode_dir == tmp_path / "pycache"


@pytest.mark.parametrize(
    "bad",
    [
        {"prestart": -1},
        {"prestart": True},
        {"memory_slots": "many"},
        {"prepare_ahead": "yes"},
        {"bytecode_cache": 1.5},
        {"max_leaked_bytes": 0},
    ],
)
def test_bad_settings_are_refused_with_their_name(bad: dict[str, object]) -> None:
    (name,) = bad
    with pytest.raises(ValueError, match=f"Tuning.{name}"):
        Tuning(**bad)  # type: ignore[arg-type]


def test_a_tuned_config_travels_over_the_wire_unchanged() -> None:
    config = EvalConfig(num_checks=3, tuning=Tuning(prestart=1, memory_slots=3, fork_server=False))
    assert canonical(config) == repr(config)


def test_an_evaluator_runs_with_the_resolved_tuning(tmp_path: Path) -> None:
    config = EvalConfig(tuning=Tuning(prestart=0, bytecode_cache=False))
    evaluator = LocalEvaluator(load("builtin").get("builtin/relu"), CPU, config, cache_dir=tmp_path)
    try:
        assert evaluator.tuning == resolve_tuning(config, CPU, tmp_path)
        assert evaluator.pool.prestart == 0 and evaluator.bytecode_dir is None and not evaluator.prepares_ahead
    finally:
        evaluator.close()
