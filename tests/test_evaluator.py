"""The local evaluator's preparation ahead: the reference process loaded and the reference's torch.compile
built in the background, following the env's task when it changes mid-way, and stopped by close(); the timing
settings it sends its children (the GPU hold's library)."""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cudagym_testing import write_all

from cudagym import python_source
from cudagym.backends import Backend
from cudagym.baselines import tool_call
from cudagym.baselines.scripted import solution_files
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig, LocalEvaluator
from cudagym.harness.protocol import Held
from cudagym.integrity import runtime
from cudagym.sandbox import sandbox_processes
from cudagym.tuning import Tuning


def test_preparation_ahead_follows_a_task_switch_and_the_stages_use_its_work(fast_config: EvalConfig) -> None:
    config = dataclasses.replace(fast_config, tuning=Tuning(prepare_ahead=True))
    env = CudaKernelEnv(backend="cpu", eval_config=config)
    try:
        env.reset(options={"task_id": "builtin/relu"})
        evaluator = env.evaluator
        assert isinstance(evaluator, LocalEvaluator)  # created at reset, so that it can prepare
        env.reset(options={"task_id": "builtin/sigmoid"})  # while relu is still being prepared
        assert evaluator._ahead is not None
        evaluator._ahead.join(timeout=180)
        assert not evaluator.ahead_error, evaluator.ahead_error
        assert evaluator._loaded_task == "builtin/sigmoid"  # not the task that was loading when it switched
        write_all(env, solution_files(env.task, "cpu"))
        obs, _, _, _, info = env.step(tool_call("verify"))
        assert info["status"] == "ok", obs  # against sigmoid's reference: a relu reference would mismatch
        assert dict(info["result"]["phases"])["reference"] < 1.0  # loaded ahead, nothing to wait for
    finally:
        env.close()


def test_close_stops_a_preparation_in_flight_and_leaves_no_process(
    fast_config: EvalConfig, caplog: pytest.LogCaptureFixture
) -> None:
    config = dataclasses.replace(fast_config, tuning=Tuning(prepare_ahead=True))
    env = CudaKernelEnv(backend="cpu", eval_config=config)
    env.reset(options={"task_id": "builtin/softmax"})
    evaluator = env.evaluator
    assert isinstance(evaluator, LocalEvaluator)
    deadline = time.monotonic() + 60
    while evaluator._reference is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the reference process is starting; close while it loads
    assert evaluator._reference is not None
    ids = [evaluator._reference.child.sandbox_id, *(c.sandbox_id for c in evaluator.pool._spares)]
    ahead = evaluator._ahead
    with caplog.at_level("WARNING", logger="cudagym"):
        env.close()
    assert ahead is not None and not ahead.is_alive()
    # the close ended the reference's load: that is no failure of the preparation to warn of
    assert not [r.getMessage() for r in caplog.records if "ahead failed" in r.getMessage()]
    deadline = time.monotonic() + 10
    while any(sandbox_processes(i) for i in ids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for i in ids for pid in sandbox_processes(i)]


def test_preparation_ahead_builds_the_precompiled_header_before_the_first_compile(
    fast_config: EvalConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudagym.build import Builder

    callers: list[str] = []
    real = Builder.precompiled_header

    def recording(self: Builder, *args: Any, **kwargs: Any) -> Path | None:
        callers.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Builder, "precompiled_header", recording)
    config = dataclasses.replace(fast_config, tuning=Tuning(prepare_ahead=True))
    env = CudaKernelEnv(backend="cpu", eval_config=config)
    try:
        env.reset(options={"task_id": "builtin/relu"})
        deadline = time.monotonic() + 60
        while not callers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert callers[:1] == ["cudagym-pch"]  # from the background, before the agent compiled anything
        write_all(env, solution_files(env.task, "cpu"))
        obs, _, _, _, info = env.step(tool_call("compile"))
        assert info["status"] == "ok", obs
    finally:
        env.close()


def test_baselines_are_timed_ahead_and_the_first_profile_finds_them_cached(
    fast_config: EvalConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudagym.gpu_lock import JOURNAL_ENV, LOCK_ENV, exclusive_overlap_s, read_journal

    journal = tmp_path / "journal.jsonl"
    monkeypatch.setenv(LOCK_ENV, "on")  # slots lock (and are journalled) on the cpu backend too
    monkeypatch.setenv(JOURNAL_ENV, str(journal))
    # timing settings of this test alone: no earlier test's baselines are cached under them
    timing = dataclasses.replace(fast_config.timing, budget_seconds=0.2 + secrets.randbelow(10**6) * 1e-9)
    config = dataclasses.replace(fast_config, tuning=Tuning(prepare_ahead=True), timing=timing)
    env = CudaKernelEnv(backend="cpu", eval_config=config)
    try:
        env.reset(options={"task_id": "builtin/relu"})
        evaluator = env.evaluator
        assert isinstance(evaluator, LocalEvaluator)
        assert evaluator._cached_baselines() is None
        evaluator._ahead.join(timeout=180)
        assert evaluator._baselining is not None
        evaluator._baselining.join(timeout=300)  # torch.compile of the reference on 2 cores: tens of seconds
        assert not evaluator.ahead_error, evaluator.ahead_error
        cached = evaluator._cached_baselines()
        assert cached is not None and cached["eager_ms"] > 0 and cached["compile_ms"] > 0
        marks = evaluator.ahead_marks  # the preparation's timeline, in the order its steps happen
        steps = [
            "reference_loaded",
            "compile_started",
            "input_verdict",
            "compiler_imported",
            "compile_done",
            "baselines_timed",
        ]
        assert list(marks) == steps
        # the compile began with the imports the preload started (preload_compiler "auto" while preparing ahead),
        # at once when they were done by then (the mark is taken after the round trip that started it)
        assert marks["compile_started"] - 0.5 <= marks["compiler_imported"] <= marks["compile_done"]
        in_order = ["reference_loaded", "compile_started", "compile_done", "baselines_timed"]
        assert sorted(marks[s] for s in in_order) == [marks[s] for s in in_order]
        write_all(env, solution_files(env.task, "cpu"))
        obs, _, _, _, info = env.step(tool_call("profile"))
        assert info["status"] == "ok", obs
        result = info["result"]
        assert result["baseline_cached"]  # timed ahead: this profile timed only the candidate
        if result["timing_fair"]:  # eager beside the candidate agreed with the cache
            assert (result["eager_ms"], result["compile_ms"]) == (cached["eager_ms"], cached["compile_ms"])
        entries = read_journal(journal)
        labels = [entry["label"] for entry in entries if entry["mode"] == "exclusive"]
        # the reference's own work on the device (drawing input sets and running the model on them, the compiled
        # reference's first call) holds the shared slot: never beside another environment's calibration or timing
        shared = {entry["label"] for entry in entries if entry["mode"] == "shared"}
        # and so does the reference process's own start on the device (its CUDA context, the model's weights)
        assert {"reference load", "inputs", "reference compile", "attach"} <= shared, shared
        assert exclusive_overlap_s(entries) == 0
        # eager and torch.compile ahead, then the profile: the handshake's calibration, then its candidate
        assert labels in (
            ["baselines", "calibration", "candidate"],
            ["baselines", "calibration", "candidate", "baselines"],
        )
        # the reference's input set of the timing ahead is gone once the baselines are
        assert not any(key.startswith("ahead-") for key in evaluator.reference().call(Held()).keys)
    finally:
        env.close()
    # the reference process's end (its CUDA context's teardown, its memory given back) too, and every used
    # candidate's, killed by its reaper
    entries = read_journal(journal)
    assert [entry["mode"] for entry in entries if entry["label"] == "reference exit"] == ["shared"]
    reaped = [entry["mode"] for entry in entries if entry["label"] == "candidate exit"]
    assert reaped and set(reaped) == {"shared"}, reaped
    assert exclusive_overlap_s(entries) == 0


def test_the_evaluator_resolves_its_timing_once(tmp_path: Path) -> None:
    """``LocalEvaluator.timing`` read on a stand-in that has just what the property uses (a real evaluator on a
    cuda backend needs a GPU): one build of the GPU library, whatever the number of readers; without nvcc the
    trusted clock cannot run, and saying so is a harness error, not a silent fallback."""
    import shutil

    stand_in = type("StandIn", (), {})()
    stand_in.backend = Backend("cuda", "cuda", "a GPU", "sm_90", 0)
    stand_in.config, stand_in.cache_dir = EvalConfig(), tmp_path
    stand_in._timing, stand_in._timing_lock = None, threading.Lock()
    stand_in.builder = type("Bu", (), {"toolchain": type("T", (), {"nvcc": str(tmp_path / "no-nvcc")})()})()
    with pytest.raises(RuntimeError, match="GPU library"):
        LocalEvaluator.timing.fget(stand_in)  # type: ignore[attr-defined]
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc")
    stand_in.builder = type("Bu", (), {"toolchain": type("T", (), {"nvcc": nvcc})()})()
    first = LocalEvaluator.timing.fget(stand_in)  # type: ignore[attr-defined]
    assert LocalEvaluator.timing.fget(stand_in) is first  # type: ignore[attr-defined]
    assert Path(first.gpu_library).is_file()


def test_a_cpu_profile_that_would_fail_the_bandwidth_bound_taken_at_load_is_judged_on_a_fresh_one(
    fast_config: EvalConfig,
) -> None:
    env = CudaKernelEnv(backend="cpu", eval_config=fast_config)
    try:
        env.reset(options={"task_id": "builtin/relu"})
        evaluator = env._get_evaluator()
        assert isinstance(evaluator, LocalEvaluator)
        ref = evaluator.reference()
        moved = 8 * 1024 * 1024
        # as if the host had been busy when the reference loaded: its bound would fail any real time
        evaluator._peak_bandwidth = 1e6
        one_gb_per_s = moved / 1e9 * 1e3  # a speed any host's memory reaches
        assert not runtime.within_roofline(one_gb_per_s, moved, evaluator._peak_bandwidth).passed
        assert evaluator._roofline(ref, one_gb_per_s, moved).passed
        # a time no host reaches still fails, with the bandwidth measured now in the message
        finding = evaluator._roofline(ref, moved / 1e15 * 1e3, moved)
        assert not finding.passed and "above the device's peak" in finding.detail
    finally:
        env.close()


def test_a_stage_whose_machinery_raises_is_answered_as_a_harness_error(
    fast_config: EvalConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machinery's own exception (here CPython's AST race, which 16 envs on one pool met in a static check) is a
    harness error the env shows and rewards with 0, never an exception in the trainer's loop; the env goes on."""

    def race(*_: Any, **__: Any) -> Any:
        raise SystemError("AST constructor recursion depth mismatch (before=45, after=40)")

    env = CudaKernelEnv(backend="cpu", eval_config=fast_config)
    try:
        env.reset(options={"task_id": "builtin/relu"})
        write_all(env, solution_files(env.task, "cpu"))
        with monkeypatch.context() as patch:
            patch.setattr(python_source, "parse", race)
            obs, _, _, _, info = env.step(tool_call("compile"))
            assert info["status"] == "harness_error" and "recursion depth mismatch" in obs, obs
            assert "Traceback" not in obs
            obs, reward, terminated, _, info = env.step(tool_call("submit"))
            assert terminated and info["status"] == "harness_error" and reward == 0.0, obs
            assert info["reward_terms"] == {"harness_error": 0.0}
        env.reset(options={"task_id": "builtin/relu"})
        write_all(env, solution_files(env.task, "cpu"))
        obs, _, _, _, info = env.step(tool_call("compile"))
        assert info["status"] == "ok", obs
    finally:
        env.close()
