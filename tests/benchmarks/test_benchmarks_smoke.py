"""The two speed benchmarks run end to end on the CPU backend in CI size: one cycle per variant, levels of
1 and 2 environments. No figure is asserted; the runs must succeed and print and write their tables."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_benchmark(script: str, *args: str, timeout: float = 900) -> str:
    """Runs benchmarks/<script> in a fresh process (with the session's cache); returns its stdout."""
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, f"{script} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_step_latency_runs_naive_and_cudagym_cycles(tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "latency.json"
    stdout = run_benchmark(
        "step_latency.py",
        *("--backend", "cpu", "--task", "builtin/relu", "--cycles", "1", "--pch-ready", "--think", "0.1"),
        *("--cache-dir", str(cache_dir), "--json", str(out)),
    )
    assert "| variant | cycles | compile s | verify s | profile s |" in stdout
    assert "naive / cudagym warm:" in stdout
    report = json.loads(out.read_text())
    assert report["think_s"] == 0.1 and report["pch_built_beforehand_s"] is not None  # the cache's own header
    assert set(report["summary"]) == {"naive", "cudagym first", "cudagym warm"}
    assert set(report["bytecode"]) == {"cudagym first"}  # the bytecode cache that cycle had, in words
    assert report["bytecode_filled_beforehand_s"] is None
    assert all(s["ok"] and s["cycles"] == 1 for s in report["summary"].values()), report["summary"]
    naive = report["cycles"]["naive"][0]
    assert naive["profile"]["candidate_ms"] > 0 and naive["profile"]["compile_ms"] > 0  # all three were timed
    warm = report["cycles"]["cudagym warm"][0]
    assert warm["status"] == ["ok", "ok", "ok"] and warm["profile"]["candidate_ms"] > 0
    assert {"verify", "profile"} <= set(warm["phases"])  # where each stage's seconds went
    assert "timing" in dict(warm["phases"]["profile"]) and "    profile phases: " in stdout
    # on cpu nothing is prepared ahead by default: the first cycle says so
    assert report["cycles"]["cudagym first"][0]["ahead_marks"] == {}
    assert "    preparation ahead done at (s): nothing prepared" in stdout


def test_throughput_runs_levels_of_one_and_two_envs(tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "throughput.json"
    stdout = run_benchmark(
        "throughput.py",
        *("--backend", "cpu", "--levels", "1,2", "--seconds", "3", "--fixed-cycles", "2", "--tasks", "builtin/relu"),
        *("--fixed-task", "builtin/relu", "--lock", "on", "--no-warmup", "--cache-dir", str(cache_dir)),
        *("--json", str(out)),
    )
    assert "| envs | full cycles | wall s | cycles/hour |" in stdout
    assert "fixed-kernel speedups " in stdout.split("[1 envs]", 1)[1].splitlines()[0]  # each level's line has them
    report = json.loads(out.read_text())
    assert [lv["envs"] for lv in report["levels"]] == [1, 2]
    for level in report["levels"]:
        assert level["cycles"] >= level["envs"] and not level["failed_cycles"] and not level["errors"], level
        assert level["fixed_speedup"] is not None
        assert level["fixed_speedup"] == pytest.approx(statistics.median(level["fixed_speedups"]))
        assert len(level["fixed_speedups"]) >= 2  # the level went on until env 0 had timed the kernel twice
        assert level["slots"]["slots"] >= level["cycles"]  # every profile took the timing slot
        assert level["slots"]["overlap_s"] == 0.0
        assert {"calibration", "candidate"} <= set(level["slots"]["exclusive_s_by_label"])  # what held it, in s
        parts = level["profile_parts_median"]  # where a profile's seconds went, the timing's by part
        assert {"calibration", "timing", "timing.warmup_s", "timing.checks_s", "timing.eager_s"} <= set(parts), parts
        assert 0 < parts["timing.warmup_s"] < parts["timing"] and 0 < parts["timing.checks_s"] < parts["timing"]
        assert parts["reps"] >= 1 and parts["handshakes"] > parts["reps"]  # the warm-up's handshakes and the timed ones
        verify = level["verify_parts_median"]  # a verify's phases: the calibration is in the candidate's start
        assert {"reference", "candidate_start", "checks", "candidate_exit"} <= set(verify) and verify["checks"] > 0
    assert "envs: the timing slot held for " in stdout and "envs: a profile's parts (median s" in stdout
    assert "envs: a verify's parts (median s): " in stdout


def test_throughput_runs_envs_through_the_machine_pool(tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "throughput.json"
    stdout = run_benchmark(
        "throughput.py",
        *("--backend", "cpu", "--levels", "2", "--seconds", "600", "--tasks", "builtin/relu", "--pool"),
        *("--fixed-task", "builtin/relu", "--lock", "on", "--no-warmup", "--cache-dir", str(cache_dir)),
        *("--pool-evaluators", "2", "--level-cap", "3", "--json", str(out)),
    )
    assert "one machine pool (evaluators shared by task)" in stdout
    report = json.loads(out.read_text())
    assert report["pool"] and not report["service"]
    (level,) = report["levels"]
    assert level["capped"] and level["wall_s"] < 120 and "| 2 (capped) |" in stdout  # the cap ended it, not --seconds
    assert level["cycles"] >= 2 and not level["failed_cycles"] and not level["errors"], level
    assert level["slots"]["slots"] >= level["cycles"] and level["slots"]["overlap_s"] == 0.0
    assert len(level["env_rss_mb"]) == 2 and level["env_rss_mb_median"] > 0 and level["server_rss_mb"] > 0


def test_throughput_runs_envs_of_two_processes_through_one_ray_cluster_pool(tmp_path: Path, cache_dir: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "throughput.json"
    stdout = run_benchmark(
        "throughput.py",
        *("--backend", "cpu", "--levels", "2", "--seconds", "0", "--max-cycles", "1", "--tasks", "builtin/relu"),
        *("--ray", "--fixed-task", "builtin/relu", "--lock", "on", "--no-warmup", "--cache-dir", str(cache_dir)),
        *("--json", str(out)),
    )
    assert "one Ray cluster pool (" in stdout
    report = json.loads(out.read_text())
    assert report["ray"] and report["ray_worker"]["backend"] == "cpu" and not report["pool"]
    (level,) = report["levels"]
    assert level["cycles"] == 2 and not level["failed_cycles"] and not level["errors"], level
    assert level["slots"]["slots"] >= 2 and level["slots"]["overlap_s"] == 0.0  # the workers' profiles took the slot


def test_repeatability_profiles_one_solution_repeatedly(tmp_path: Path) -> None:
    out = tmp_path / "repeat.json"
    stdout = run_benchmark(
        "repeatability.py",
        *("--backend", "cpu", "--task", "builtin/relu", "--repeats", "2", "--out", str(out), "--pause", "0.1"),
    )
    assert "| task | median candidate ms | speedup vs eager (min-max) | spread |" in stdout
    assert "0.1 s between calls" in stdout
    assert "| task | candidate ms per profile call | drift per call | slow per call |" in stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["task"] for r in rows] == ["builtin/relu"] and len(rows[0]["candidate_ms"]) == 2
    times = rows[0]["times_ms"]  # every timed handshake of both calls, whose median is the call's time
    assert [statistics.median(t) for t in times] == pytest.approx(rows[0]["candidate_ms"])
    assert all(drift is None or (drift > 0 and 0 <= slow <= 1) for drift, slow in rows[0]["inside_call"])


def test_host_load_times_under_each_load_and_stops_the_load(tmp_path: Path) -> None:
    out = tmp_path / "host_load.json"
    stdout = run_benchmark(
        "host_load.py",
        *("--loads", "quiet,memory+pin", "--calls", "2", "--sizes", "10000", "--json", str(out)),
        timeout=300,
    )
    assert "| load | floats | host path us | sync ms (spread) |" in stdout
    report = json.loads(out.read_text())
    assert report["ways"] == ["sync"]  # no GPU here: the CPU times one way
    assert set(report["loads"]) == {"quiet", "memory+pin"}
    medians = report["loads"]["memory+pin"]["10000"]["medians"]["sync"]
    assert len(medians) == 2 and all(m > 0 for m in medians)
    stray = subprocess.run(["pgrep", "-f", "np.copyto"], capture_output=True, text=True)
    assert stray.stdout.strip() == "", "the load processes outlived the benchmark"


def test_a_cold_runs_children_get_a_home_of_their_own_and_the_parents_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``step_latency.py --fresh-torch-caches``: the processes a cold run starts see a new HOME and TMPDIR (where
    the reference's inductor and Triton caches live), and this process's own values return afterwards."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("step_latency", BENCHMARKS / "step_latency.py")
    assert spec is not None and spec.loader is not None
    step_latency = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_latency)
    monkeypatch.setenv("HOME", "/home/before")
    monkeypatch.delenv("TMPDIR", raising=False)
    home = tmp_path / "home-0"
    with step_latency._children_home(home):
        seen = subprocess.run(
            [sys.executable, "-c", "import os, tempfile; print(os.path.expanduser('~'), tempfile.gettempdir())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert seen == [str(home), str(home)] and home.is_dir()
    assert os.environ["HOME"] == "/home/before" and "TMPDIR" not in os.environ
    with step_latency._children_home(None):  # without the option: nothing changes
        assert os.environ["HOME"] == "/home/before"


def test_step_latency_refuses_an_unknown_bytecode_setting() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "step_latency.py"), "--bytecode-cache", "on,sometimes"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--bytecode-cache takes auto, on, off" in proc.stderr


def test_compare_cost_times_the_library_and_the_plain_rules(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    stdout = run_benchmark("compare_cost.py", "--sizes", "4096,200000", "--runs", "2", "--json", str(out), timeout=300)
    assert "| elements | tolerance | kernels | full | plain | float64 bound | kernels | full | plain |" in stdout
    report = json.loads(out.read_text())
    assert [r["numel"] for r in report["rows"]] == [4096, 200000] and report["device"] == "cpu"
    kernels = {"kernel_tolerance_ms", "kernel_precision_ms"}  # the comparison kernels are cuda's alone
    assert all(r[k] is None for r in report["rows"] for k in kernels)
    assert all(v > 0 for r in report["rows"] for k, v in r.items() if k not in kernels)
    assert {"full_tolerance_ms", "full_precision_ms"} <= set(report["rows"][1])  # the whole output at once, beside


def test_throughput_accounts_the_device_slots_by_what_held_them() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import throughput
    finally:
        sys.path.remove(str(BENCHMARKS))

    def slot(mode: str, label: str, acquired: float, released: float) -> dict[str, object]:
        times = {"acquired_at": acquired, "released_at": released, "waited_s": 0.5}
        return {"mode": mode, "label": label, "key": "gpu", **times}

    entries = [
        slot("exclusive", "candidate", 1.0, 3.0),
        slot("exclusive", "calibration", 4.0, 4.5),
        slot("exclusive", "candidate", 5.0, 6.0),
        slot("exclusive", "candidate", 12.0, 13.0),  # after the level: not counted
        slot("shared", "check", 6.0, 8.0),
        slot("shared", "inputs", 7.0, 9.0),  # overlaps the check: the union counts once
    ]
    stats = throughput.slot_stats(entries, 0.0, 10.0)
    assert stats["slots"] == 3 and stats["busy_share"] == pytest.approx(0.35)
    assert stats["exclusive_s_by_label"] == pytest.approx({"candidate": 3.0, "calibration": 0.5})
    assert list(stats["exclusive_s_by_label"]) == ["candidate", "calibration"]  # the largest first
    assert stats["shared_busy_share"] == pytest.approx(0.3)
    assert stats["shared_s_by_label"] == pytest.approx({"check": 2.0, "inputs": 2.0})  # each holder's own seconds


def test_a_level_cap_stops_new_cycles_once_every_env_has_one() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import throughput
    finally:
        sys.path.remove(str(BENCHMARKS))
    import threading

    options = {"max_cycles": 10, "seconds": 30.0, "fixed_cycles": 3}
    fixed_done, capped = threading.Event(), threading.Event()
    assert throughput.keep_cycling(1, 2, 5.0, options, fixed_done, capped)  # within --seconds
    assert throughput.keep_cycling(1, 2, 40.0, options, fixed_done, capped)  # past it, env 0 not done
    assert not throughput.keep_cycling(1, 10, 5.0, options, fixed_done, capped)  # --max-cycles
    capped.set()
    assert throughput.keep_cycling(1, 0, 99.0, options, fixed_done, capped)  # a first cycle whatever the cap
    assert not throughput.keep_cycling(1, 1, 5.0, options, fixed_done, capped)
    capped.clear()
    assert not throughput.keep_cycling(0, 3, 40.0, options, fixed_done, capped) and fixed_done.is_set()
    assert not throughput.keep_cycling(1, 1, 40.0, options, fixed_done, capped)
