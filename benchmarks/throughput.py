"""Throughput: full compile-verify-profile cycles per hour with 1 to 64 environments on one machine.

    python benchmarks/throughput.py --backend cuda --levels 1,4,16,64 --seconds 30 --pool --json throughput.json

At each level, N environments run in separate processes (``gym.make("cudagym:CudaKernel-v0")``), each
playing a scripted agent: after a reset and the task's reference solution, it repeats cycles of (edit one
kernel source: a comment naming the env and cycle, so the build really recompiles it) -> ``compile`` ->
``verify`` -> ``profile`` until ``--seconds`` have passed (the last cycle finishes). Setup (env creation,
the first build, the reference process) happens before the level's clock starts. Environment 0 always
works on ``--fixed-task``; its profiled speedup at each level is compared with its 1-env value, which shows
whether timing stays isolated under load (the device's timing slot, :mod:`cudagym.gpu_lock`). With
``--service``, all environments evaluate through one ``cudagym serve`` process (an evaluator per environment); with
``--pool``, through one ``cudagym pool`` (the machine pool: evaluators shared by task, :mod:`cudagym.pool`); with
``--ray``, through one cluster pool of a Ray instance the benchmark starts on this machine (``--ray-address``: of a
cluster already running), every env process sending its jobs to the same named pool and its workers
(:mod:`cudagym.ray_pool.cluster_pool`; cuda: one worker per GPU taking ``--ray-concurrency`` jobs at a time, whose
hosted machine pool keeps one evaluator per memory slot of the device and queues the rest). Each
environment process reports its resident memory after setup and at the end (``env_rss_mb``: the env alone; a
service's or pool's processes are counted apart, in ``server_rss_mb``).

A warm-up round (one environment per task, one cycle each) fills the build and baseline caches first,
so the levels measure steady-state cycles, not first builds. Slot waits come from the timing journal.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import multiprocessing as mp
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from cudagym.backends import Backend
from cudagym.harness.timing import TimingConfig

DEFAULT_TASKS = "builtin/scale_bias_tanh,builtin/silu_clamp,builtin/affine_gelu_clamp"  # 1 GB tensors on cuda
STAGES = ("compile", "verify", "profile")


def keep_cycling(
    index: int, cycles: int, elapsed: float, options: dict[str, Any], fixed_done: Any, capped: Any
) -> bool:
    """Whether env ``index``, with ``cycles`` done ``elapsed`` seconds into its level, starts another cycle: always a
    first one; then until ``max_cycles``, or the level's cap (``capped``, set by the parent after ``--level-cap``
    seconds), or ``seconds`` have passed and, with ``fixed_cycles``, env 0 has timed the fixed kernel that often (env 0
    sets ``fixed_done``). A count, not a time: a loaded host makes cycles slower, never fewer (each stage has its
    own deadline)."""
    if not cycles:
        return True
    if cycles >= options["max_cycles"] or capped.is_set():
        return False
    if elapsed < options["seconds"]:
        return True
    if not options["fixed_cycles"]:
        return False
    if index == 0 and cycles >= options["fixed_cycles"]:
        fixed_done.set()
    return not fixed_done.is_set()


def _worker(
    index: int, task_id: str, options: dict[str, Any], barrier: Any, queue: Any, fixed_done: Any, capped: Any
) -> None:
    """One environment's process: setup, wait for the start, cycles while ``keep_cycling`` says so, report."""
    try:
        import gymnasium as gym

        from cudagym.baselines import tool_call
        from cudagym.baselines.scripted import code_edit, solution_files
        from cudagym.tasks import load

        factory: Any = None
        if options["socket"]:
            from cudagym.service import ServiceEvaluatorFactory

            factory = ServiceEvaluatorFactory(options["socket"])
        elif options.get("ray_address"):
            from cudagym.ray_pool import RayEvaluatorFactory

            factory = RayEvaluatorFactory(
                address=options["ray_address"], workers=(options["ray_worker"],), cluster_pool=options["ray_pool"]
            )
        from cudagym.evaluator import EvalConfig
        from cudagym.harness.timing import TimingConfig
        from cudagym.tuning import Tuning

        env = gym.make(
            "cudagym:CudaKernel-v0",
            backend=options["backend"],
            max_turns=1_000_000,
            cache_dir=options["cache_dir"],
            evaluator_factory=factory,
            eval_config=EvalConfig(
                timing=TimingConfig(median_within=options["median_within"]),
                tuning=Tuning(
                    prestart=options.get("prestart", "auto"),
                    fork_server=options.get("fork_server", "auto") != "off",
                ),
            ),
        )
        task = load("builtin").get(task_id)
        files = solution_files(task, env.unwrapped.backend.name)
        kernel = next(p for p in files if p.endswith((".cu", ".cpp")) and not p.endswith("_binding.cpp"))

        observations: list[str] = []

        def step(name: str, **arguments: Any) -> dict[str, Any]:
            obs, _, _, _, info = env.step(tool_call(name, **arguments))
            observations[:] = [obs]
            return info

        env.reset(options={"task_id": task_id})
        for path, content in files.items():
            step("write_file", path=path, content=content)
        for stage in ("compile", "verify"):  # starts the reference process, warms caches
            if step(stage)["result"]["status"] != "ok":  # the whole observation: it has the candidate's output
                raise RuntimeError(f"setup of {task_id} failed at {stage}:\n{observations[-1][-3000:]}")
    except Exception:
        barrier.abort()
        queue.put({"index": index, "task": task_id, "error": traceback.format_exc()})
        return
    cycles: list[dict[str, Any]] = []
    setup_rss = resident_mb(os.getpid())
    try:
        barrier.wait()
        start = time.time()

        while keep_cycling(index, len(cycles), time.time() - start, options, fixed_done, capped):
            edit = code_edit(f"{options['run']}_{index}_{len(cycles) + 1}")  # new source: really compiled
            step("write_file", path=kernel, content=files[kernel] + edit)
            began = time.time()
            row: dict[str, Any] = {"start": began}
            said = ""  # what the first stage that failed said
            results: dict[str, dict[str, Any]] = {}
            for stage in STAGES:
                t = time.perf_counter()
                result = results[stage] = step(stage)["result"]
                row[f"{stage}_s"] = time.perf_counter() - t
                row[stage] = result["status"]
                if result["status"] != "ok" and not said:
                    said = f"{stage} {result['status']}: {result.get('message', '')[:300]}"
            row.update(
                end=time.time(),
                ok=all(row[s] == "ok" for s in STAGES),
                candidate_ms=result.get("candidate_ms"),
                speedup_eager=result.get("speedup_eager"),
                message=said,
                profile_parts=profile_parts(result),
                verify_parts=stage_phases(results.get("verify", {})),
            )
            cycles.append(row)
        queue.put({"index": index, "task": task_id, "cycles": cycles, "rss_mb": [setup_rss, resident_mb(os.getpid())]})
    except Exception:
        queue.put({"index": index, "task": task_id, "cycles": cycles, "error": traceback.format_exc()})
    finally:
        if index == 0:
            fixed_done.set()  # whatever happened, the others stop waiting for env 0
        env.close()


# of the trusted clock's figures of a profile (``ProfileResult.clock``), the seconds of its timing phase by part
CLOCK_PARTS = ("warmup_s", "checks_s", "eager_s")


def stage_phases(result: dict[str, Any]) -> dict[str, float]:
    """A stage's seconds by phase (``phases`` of its result: for a verify the input verdict, the reference, the
    candidate's start with the clock's calibration, its load, the checks, its exit)."""
    return {name: float(seconds) for name, seconds in result.get("phases") or ()}


def profile_parts(result: dict[str, Any]) -> dict[str, float]:
    """Where a profile's seconds went: its phases (``ProfileResult.phases``: calibration, the candidate's load, the
    timing, the baselines, ...) and, inside the timing, the warm-up, the output comparisons and eager's samples, with
    the clock's handshakes and timed repetitions (empty for a result that is not a profile's)."""
    if result.get("stage") != "profile":
        return {}
    parts = stage_phases(result)
    clock = result.get("clock") or {}
    parts.update({f"timing.{name}": float(clock[name]) for name in CLOCK_PARTS if clock.get(name) is not None})
    parts["handshakes"] = float(clock.get("handshakes") or 0)
    parts["reps"] = float(result.get("repetitions") or 0)
    return parts


def parts_median(rows: list[dict[str, Any]], key: str = "profile_parts") -> dict[str, float]:
    """The median of each part of the cycles' ``key`` (``profile_parts`` or ``verify_parts``) over the cycles that
    have it."""
    names = dict.fromkeys(name for row in rows for name in row.get(key) or {})
    return {
        name: round(statistics.median(row[key][name] for row in rows if name in (row.get(key) or {})), 4)
        for name in names
    }


def resident_mb(pid: int) -> float:
    """The resident set of process ``pid`` in MB (0 where it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def tree_mb(pid: int) -> float:
    """The proportional set size of ``pid`` and its descendants in MB (a server and the processes it started)."""
    from cudagym.pool.evaluators import proportional_bytes

    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += proportional_bytes(current)
        todo += children.get(current, [])
    return total / 1e6


class PeakMemory:
    """The peak of :func:`tree_mb` of ``pid`` (a service or pool), sampled every ``every`` seconds until ``stop``."""

    def __init__(self, pid: int | None, every: float = 2.0) -> None:
        import threading

        self.pid, self.every, self.peak = pid, every, 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True) if pid else None
        if self._thread is not None:
            self._thread.start()

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, tree_mb(self.pid or 0))
            if self._done.wait(self.every):
                return

    def stop(self) -> float | None:
        """The peak in MB (None without a server)."""
        if self._thread is None:
            return None
        self._done.set()
        self._thread.join()
        return self.peak


def _collect(procs: list[Any], queue: Any, assigned: list[str]) -> list[dict[str, Any]]:
    """Every worker's report; a worker that died without one (killed, crashed) gets an error entry."""
    import queue as queues

    reports: dict[int, dict[str, Any]] = {}
    while len(reports) < len(procs):
        try:
            report = queue.get(timeout=5)
            reports[report["index"]] = report
        except queues.Empty:
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
    for p in procs:
        p.join(timeout=60)
    for i, p in enumerate(procs):
        if i not in reports:
            reports[i] = {"index": i, "task": assigned[i], "error": f"the env process ended ({p.exitcode}) silently"}
    return [reports[i] for i in range(len(procs))]


def run_level(n: int, tasks: list[str], options: dict[str, Any], fixed: str | None) -> dict[str, Any]:
    """Runs n environments in parallel (env 0 on ``fixed`` when given); returns the level's figures."""
    ctx = mp.get_context("spawn")
    barrier, queue, fixed_done = ctx.Barrier(n + 1, timeout=options["setup_timeout"]), ctx.Queue(), ctx.Event()
    capped = ctx.Event()
    assigned = [fixed] + [tasks[i % len(tasks)] for i in range(n - 1)] if fixed else tasks[:n]
    procs = [
        ctx.Process(target=_worker, args=(i, assigned[i], options, barrier, queue, fixed_done, capped))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    try:
        barrier.wait()
        start = time.time()
    except Exception:  # a worker failed its setup (it says why below)
        start = time.time()
    cap = threading.Timer(options["level_cap"], capped.set) if options.get("level_cap") else None
    if cap is not None:
        cap.start()
    sampler = PeakMemory(options.get("server_pid"))
    try:
        reports = _collect(procs, queue, assigned)
    finally:
        if cap is not None:
            cap.cancel()
    server_mb = sampler.stop()
    errors = [f"env {r['index']} ({r['task']}): {r['error']}" for r in reports if r.get("error")]
    rows = [dict(c, env=r["index"], task=r["task"]) for r in reports for c in r.get("cycles", [])]
    end = max((c["end"] for c in rows), default=time.time())
    wall = end - start
    ok = [c for c in rows if c["ok"]]
    fixed_rows = [c for c in ok if c["env"] == 0 and c["task"] == fixed and c.get("speedup_eager")]
    level: dict[str, Any] = {
        "envs": n,
        "start": start,
        "end": end,
        "wall_s": wall,
        "cycles": len(ok),
        "failed_cycles": len(rows) - len(ok),
        "cycles_per_hour": len(ok) / wall * 3600 if wall > 0 else 0.0,
        "cycle_s_median": statistics.median(sum(c[f"{s}_s"] for s in STAGES) for c in ok) if ok else None,
        "stage_s_median": {s: statistics.median(c[f"{s}_s"] for c in ok) for s in STAGES} if ok else {},
        # where a profile's seconds went (the median of each part over the level's cycles; ``profile_parts``)
        "profile_parts_median": parts_median(ok),
        # the same of a verify (its phases: verify holds shared slots, which keep the timing slot waiting)
        "verify_parts_median": parts_median(ok, "verify_parts"),
        "fixed_speedup": statistics.median(c["speedup_eager"] for c in fixed_rows) if fixed_rows else None,
        "fixed_candidate_ms": statistics.median(c["candidate_ms"] for c in fixed_rows) if fixed_rows else None,
        # every cycle's own speedup: the spread at one env is the noise a load effect has to stand out from
        "fixed_speedups": [c["speedup_eager"] for c in fixed_rows],
        # the level reached --level-cap: its envs started no cycle after it (env 0 may have timed fewer fixed kernels)
        "capped": capped.is_set(),
        # the peak of the server's process tree while the level ran (its evaluators and their children)
        "server_rss_mb": server_mb,
        # each env process's resident memory after setup and at the end (the env alone, not a server's processes)
        "env_rss_mb": [r["rss_mb"] for r in reports if r.get("rss_mb")],
        "env_rss_mb_median": statistics.median(r["rss_mb"][1] for r in reports if r.get("rss_mb"))
        if any(r.get("rss_mb") for r in reports)
        else None,
        "failures": [c["message"] for c in rows if not c["ok"]][:5],
        "errors": errors,
        "rows": rows,
    }
    return level


def slot_stats(entries: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
    """Exclusive (timing) slots taken in [start, end]: count, waits and the share of time the device was timed."""
    from cudagym.gpu_lock import exclusive_overlap_s

    chosen = [e for e in entries if e["mode"] == "exclusive" and start <= e["acquired_at"] <= end]
    if not chosen:
        return {"slots": 0}
    waits = [e["waited_s"] for e in chosen]
    held = sum(e["released_at"] - e["acquired_at"] for e in chosen)
    shared = [e for e in entries if e["mode"] == "shared" and start <= e["acquired_at"] <= end]
    return {
        "slots": len(chosen),
        "wait_median_s": statistics.median(waits),
        "wait_max_s": max(waits),
        "busy_share": held / (end - start) if end > start else 0.0,
        "overlap_s": exclusive_overlap_s(chosen),
        "exclusive_s_by_label": seconds_by_label(chosen),
        "shared_busy_share": union_s(shared) / (end - start) if end > start else 0.0,
        # each holder's own seconds: shared holders overlap, so these may add up past the union
        "shared_s_by_label": seconds_by_label(shared),
    }


def seconds_by_label(entries: list[dict[str, Any]]) -> dict[str, float]:
    """The seconds ``entries`` (slots) were held, summed by what held them, the largest first."""
    by_label: dict[str, float] = {}
    for e in entries:
        label = e.get("label") or "?"
        by_label[label] = by_label.get(label, 0.0) + e["released_at"] - e["acquired_at"]
    return dict(sorted(by_label.items(), key=lambda kv: -kv[1]))


def union_s(entries: list[dict[str, Any]]) -> float:
    """Seconds during which at least one of ``entries`` (slots) was held."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted((e["acquired_at"], e["released_at"]) for e in entries):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def run(args: argparse.Namespace) -> dict[str, Any]:
    from cudagym.backends import resolve_backend
    from cudagym.build import default_cache_dir
    from cudagym.gpu_lock import JOURNAL_ENV, LOCK_ENV, read_journal

    backend = resolve_backend(args.backend)
    scratch = Path(tempfile.mkdtemp(prefix="cg-tp-", dir="/tmp"))  # short: it holds the service's socket
    journal = scratch / "timing.jsonl"
    os.environ[JOURNAL_ENV] = str(journal)  # inherited by the workers and the server
    if args.lock != "auto":
        os.environ[LOCK_ENV] = args.lock
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    options = {
        "backend": backend.name,
        "cache_dir": str(args.cache_dir or default_cache_dir()),
        "seconds": args.seconds,
        "max_cycles": args.max_cycles or sys.maxsize,
        "fixed_cycles": args.fixed_cycles,
        "level_cap": args.level_cap,
        "median_within": args.median_within,
        "setup_timeout": args.setup_timeout,
        "socket": None,
        "prestart": args.prestart,
        "fork_server": args.fork_server,
        "run": secrets.token_hex(4),  # in every edit, so that no run reuses another's objects
    }
    server = None
    levels: list[dict[str, Any]] = []
    try:
        if args.ray or args.ray_address:
            options.update(start_ray(args, backend, options["cache_dir"], options["run"]))
        if args.service or args.pool:
            from cudagym.service import spawn_server

            options["socket"] = str(scratch / "eval.sock")
            pool_options = ["--max-evaluators", str(args.pool_evaluators)] if args.pool and args.pool_evaluators else []
            pool_options += ["--log-level", args.server_log_level]
            server = spawn_server(
                options["socket"],
                backend.name,
                cache_dir=options["cache_dir"],
                command_name="pool" if args.pool else "serve",
                options=pool_options,
            )
            options["server_pid"] = server.pid
        if args.warmup:
            every = sorted({*tasks, args.fixed_task})
            warm = run_level(len(every), every, {**options, "seconds": 0, "max_cycles": 1, "level_cap": 0}, None)
            errors = warm["errors"] or "none"
            print(f"warm-up: {len(every)} tasks, {warm['wall_s']:.1f} s, errors: {errors}", flush=True)
        for n in args.levels:
            level = run_level(n, tasks, options, args.fixed_task)
            level["slots"] = slot_stats(read_journal(journal), level["start"], level["end"])
            levels.append(level)
            fixed = ", ".join(f"{x:.3f}" for x in level["fixed_speedups"]) or "none"
            print(
                f"[{n} envs] {level['cycles']} cycles in {level['wall_s']:.1f} s = "
                f"{level['cycles_per_hour']:.0f}/h; failed {level['failed_cycles']}; errors {len(level['errors'])}; "
                f"fixed-kernel speedups {fixed}{'; capped' if level['capped'] else ''}",  # a run cut short still
                # shows the levels it finished
                flush=True,
            )
            print(f"  device slots: {json.dumps(level['slots'])}", flush=True)
            print(f"  profile parts (median s): {json.dumps(level['profile_parts_median'])}", flush=True)
            print(f"  verify parts (median s): {json.dumps(level['verify_parts_median'])}", flush=True)
            for error in level["errors"]:
                print(error, file=sys.stderr)
            for failure in level["failures"]:  # what a failed cycle's stage said (the first few)
                print(f"  failed cycle: {failure}", flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        if options.get("ray_pool"):
            stop_ray(options["ray_pool"], backend.name)
        shutil.rmtree(scratch, ignore_errors=True)
    base = levels[0]["fixed_speedup"] if levels and levels[0]["envs"] == 1 else None
    for level in levels:
        speedup = level["fixed_speedup"]
        level["fixed_vs_1env"] = speedup / base - 1 if base and speedup else None
    return {
        "benchmark": "throughput",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "backend": backend.name,
        "device": backend.device_name,
        "cpus": os.cpu_count(),
        "service": args.service,
        "pool": args.pool,
        "ray": bool(options.get("ray_pool")),
        "ray_worker": dataclasses.asdict(options["ray_worker"]) if options.get("ray_worker") else None,
        "tasks": tasks,
        "fixed_task": args.fixed_task,
        "seconds": args.seconds,
        "levels": levels,
    }


def start_ray(args: argparse.Namespace, backend: Backend, cache_dir: str, run_id: str) -> dict[str, Any]:
    """Joins ``--ray-address``'s cluster, or starts a Ray instance on this machine (every CPU and GPU), and says how
    the envs reach its cluster pool: the address, the pool's name and its worker spec (cuda: one worker per GPU
    taking ``--ray-concurrency`` jobs at a time, ``WorkerSpec``'s default by default; cpu: one worker per CPU)."""
    import ray

    from cudagym.ray_pool import WorkerSpec

    # "local": a fresh instance even where another runs on this machine (its envs inherit this process's journal)
    ray.init(address=args.ray_address or "local", include_dashboard=False, log_to_driver=False, configure_logging=False)
    resources = ray.cluster_resources()
    if backend.is_cuda:
        # a worker's hosted pool keeps one evaluator per memory slot of its GPU and queues the rest for memory
        gpus = max(1, int(resources.get("GPU", 1)))
        spec = WorkerSpec("cuda", count=gpus, concurrency=args.ray_concurrency, cache_dir=cache_dir)
    else:
        spec = WorkerSpec("cpu", count=max(1, int(resources.get("CPU", 1))), concurrency=1, cache_dir=cache_dir)
    address = ray.get_runtime_context().gcs_address
    print(f"Ray at {address}: {resources.get('CPU', 0):.0f} CPUs, {resources.get('GPU', 0):.0f} GPUs", flush=True)
    return {"ray_address": address, "ray_pool": f"throughput-{run_id}", "ray_worker": spec}


def stop_ray(pool: str, backend: str) -> None:
    """Stops the run's cluster pool and leaves the Ray instance."""
    import ray

    from cudagym.ray_pool import stop_cluster_pool

    stop_cluster_pool(pool, backend)
    ray.shutdown()


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _range(level: dict[str, Any]) -> str:
    speedups = level.get("fixed_speedups") or []
    return f"({len(speedups)}: {min(speedups):.3f}-{max(speedups):.3f})" if speedups else "(0)"


def print_table(report: dict[str, Any]) -> None:
    how = "one LocalEvaluator per env"
    if report.get("service"):
        how = "one evaluation service (an evaluator per env)"
    if report.get("pool"):
        how = "one machine pool (evaluators shared by task)"
    if report.get("ray"):
        worker = report["ray_worker"]
        how = f"one Ray cluster pool ({worker['count']} {worker['backend']} workers x {worker['concurrency']} jobs)"
    print(f"\nThroughput on {report['backend']} ({report['device']}, {report['cpus']} CPUs), {how}, {report['date']}")
    print(f"Tasks: {', '.join(report['tasks'])}; env 0 on {report['fixed_task']}; ~{report['seconds']} s per level\n")
    print(
        "| envs | full cycles | wall s | cycles/hour | median cycle s | failed | timing slots | slot wait "
        "median/max s | device timed | fixed-kernel speedup (cycles: min-max) | vs 1 env | env MB | server peak MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for lv in report["levels"]:
        slots = lv["slots"]
        print(
            f"| {lv['envs']}{' (capped)' if lv.get('capped') else ''} | {lv['cycles']} | {lv['wall_s']:.1f} | "
            f"{lv['cycles_per_hour']:.0f} | "
            f"{_fmt(lv['cycle_s_median'], '.2f')} | {lv['failed_cycles']} | {slots.get('slots', 0)} | "
            f"{_fmt(slots.get('wait_median_s'), '.2f')}/{_fmt(slots.get('wait_max_s'), '.2f')} | "
            f"{_fmt(slots.get('busy_share'), '.0%')} | {_fmt(lv['fixed_speedup'], '.3f')}x {_range(lv)} | "
            f"{_fmt(lv['fixed_vs_1env'], '+.1%')} | {_fmt(lv.get('env_rss_mb_median'), '.0f')} | "
            f"{_fmt(lv.get('server_rss_mb'), '.0f')} |"
        )
    for lv in report["levels"]:
        slots = lv["slots"]
        if slots.get("exclusive_s_by_label"):
            held = ", ".join(f"{k} {v:.1f} s" for k, v in slots["exclusive_s_by_label"].items())
            shared = ", ".join(f"{k} {v:.1f} s" for k, v in (slots.get("shared_s_by_label") or {}).items())
            print(
                f"\n{lv['envs']} envs: the timing slot held for {held}; a shared slot (checks, loads) held "
                f"{_fmt(slots.get('shared_busy_share'), '.0%')} of the wall time ({shared or 'none'}, each holder's "
                "seconds)"
            )
        if lv.get("profile_parts_median"):
            parts = ", ".join(f"{k} {v:g}" for k, v in lv["profile_parts_median"].items())
            print(f"{lv['envs']} envs: a profile's parts (median s; handshakes and reps as counts): {parts}")
        if lv.get("verify_parts_median"):
            parts = ", ".join(f"{k} {v:g}" for k, v in lv["verify_parts_median"].items())
            print(f"{lv['envs']} envs: a verify's parts (median s): {parts}")
    print("\nIssue 6 targets (cuda, one H200): >= 1,500 cycles/hour at 16 envs; fixed-kernel speedup within 2%.")
    print(
        "Issue 20 targets (cuda, one H200, 16 and 64 envs): >= 6,000 cycles/hour, never fewer at more envs, the timing "
        "slot busy >= 70%, fixed-kernel speedup within 2%, < 300 MB per env."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--levels", default="1,4,16", help="comma list of parallel env counts (default 1,4,16)")
    parser.add_argument("--seconds", type=float, default=30.0, help="cycling time per level (default 30)")
    parser.add_argument("--max-cycles", type=int, default=0, help="cap on cycles per env and level (0: none)")
    parser.add_argument(
        "--fixed-cycles",
        type=int,
        default=0,
        help="each level goes on past --seconds until env 0 timed the fixed kernel this often, so its median "
        "speedup rests on enough cycles at 16 envs too",
    )
    parser.add_argument(
        "--level-cap",
        type=float,
        default=0.0,
        help="seconds after which a level's envs start no new cycle (each ends the one in hand), so a call with a "
        "time limit still reports the levels it reaches, the cap marked; 0: none",
    )
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help=f"built-in tasks of envs 1.. (default {DEFAULT_TASKS})")
    parser.add_argument("--fixed-task", default="builtin/scale_bias_tanh", help="env 0's task (speedup tracked)")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--service", action="store_true", help="evaluate every env through one cudagym serve")
    modes.add_argument("--pool", action="store_true", help="evaluate every env through one cudagym pool")
    modes.add_argument("--ray", action="store_true", help="evaluate every env through one cluster pool on Ray")
    parser.add_argument("--ray-address", help="the Ray cluster of --ray (default: one started on this machine)")
    parser.add_argument(
        "--ray-concurrency",
        type=int,
        default=None,
        help="jobs a cuda worker of --ray takes at once (default: WorkerSpec's, its hosted pool queues them)",
    )
    parser.add_argument(
        "--pool-evaluators", type=int, default=0, help="the pool's --max-evaluators (0: its default, by the cores)"
    )
    parser.add_argument("--lock", default="auto", choices=("auto", "on", "off"), help="$CUDAGYM_TIMING_LOCK")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the cache warm-up round")
    parser.add_argument("--cache-dir", help="build and baseline cache (default: the usual cache directory)")
    parser.add_argument("--setup-timeout", type=float, default=600.0, help="seconds for the envs' setup")
    parser.add_argument(
        "--prestart",
        type=int,
        default=2,
        help="candidate processes each env keeps started ahead (Tuning.prestart; 1 saves memory at 16 envs)",
    )
    parser.add_argument(
        "--fork-server", default="auto", choices=("auto", "on", "off"), help="Tuning.fork_server (auto: on)"
    )
    parser.add_argument(
        "--server-log-level",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="what the service or pool logs to stderr (info: the pool's admissions, by device memory)",
    )
    parser.add_argument(
        "--median-within",
        type=float,
        default=TimingConfig().median_within,
        help="TimingConfig.median_within: a timing stops once its median is known this closely (0: whole budget)",
    )
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    args.levels = [int(v) for v in args.levels.split(",") if v.strip()]
    if not args.levels or min(args.levels) < 1:
        parser.error("--levels takes positive integers, e.g. 1,4,16,64")
    if args.ray_address and (args.service or args.pool):
        parser.error("--ray-address goes with --ray, not with --service or --pool")
    report = run(args)
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    clean = all(not lv["errors"] and not lv["failed_cycles"] and lv["cycles"] for lv in report["levels"])
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
