"""Repeatability of `profile`: five calls on the same solution, side by side, and their spread.

    python benchmarks/repeatability.py --backend cuda --task builtin/relu --repeats 5

Prints each call's candidate time and speedups and the spread of the speedups, (max - min) / median.
The target (issue 3) is a spread within 2% for kernels of 10 us and more. ``--pause`` waits between the calls
(an agent thinking; 0: back to back). Each row of ``--out`` also keeps every call's per-handshake times (the trusted
clock's, ``ProfileResult.clock``), and the
table says how they moved inside a call: ``drift`` is the median of a call's last quarter of repetitions over
its first quarter's (below 1: the call started slow), ``slow`` the share of repetitions more than 2% above the
call's fastest tenth.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from cudagym.baselines import tool_call
from cudagym.baselines.scripted import solution_files
from cudagym.build import default_cache_dir
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.tasks import load
from cudagym.tuning import Tuning


def inside_call(times: list[float]) -> tuple[float | None, float | None]:
    """(drift, slow) of one call's repetitions (see the module docstring); None when too few."""
    if len(times) < 8:
        return None, None
    quarter = len(times) // 4
    drift = statistics.median(times[-quarter:]) / statistics.median(times[:quarter])
    fast = sorted(times)[len(times) // 10]
    return drift, sum(t > 1.02 * fast for t in times) / len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--task", action="append", help="task id (repeatable; default: every task with a solution)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out")
    parser.add_argument(
        "--fresh-baselines",
        action="store_true",
        help="re-time eager and torch.compile at every call (shows whether the device itself drifts)",
    )
    parser.add_argument(
        "--prestart",
        type=int,
        help="Tuning.prestart: candidates kept started ahead (0: none warms up while another is timed; default: auto)",
    )
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between profile calls (default 0)")
    args = parser.parse_args()
    config = EvalConfig(tuning=Tuning(prestart="auto" if args.prestart is None else args.prestart))
    env = CudaKernelEnv(backend=args.backend, eval_config=config)
    ids = args.task or [t.id for t in load("builtin") if env.backend.name in t.solutions]
    table = []
    try:
        for task_id in ids:
            env.reset(options={"task_id": task_id})
            for path, content in solution_files(env.task, env.backend.name).items():
                env.step(tool_call("write_file", path=path, content=content))
            runs = []
            for i in range(args.repeats):
                if i and args.pause:
                    time.sleep(args.pause)
                if args.fresh_baselines:
                    for cached in (default_cache_dir() / "baselines").glob("*.json"):
                        cached.unlink()
                result = env.step(tool_call("profile"))[4]["result"]
                runs.append(result)
            cand = [r["candidate_ms"] for r in runs]
            se = [r["speedup_eager"] for r in runs]
            sc = [r["speedup_compile"] for r in runs]
            spread = lambda xs: (max(xs) - min(xs)) / statistics.median(xs)  # noqa: E731
            row = {
                "task": task_id,
                "candidate_ms": cand,
                "eager_ms": [r["eager_ms"] for r in runs],
                "seconds": [r["seconds"] for r in runs],
                "within_call_spread": [r.get("spread") for r in runs],  # (p75 - p25) / median inside each call
                "phases": runs[-1]["phases"],
                "times_ms": [r["clock"].get("times_ms") or [] for r in runs],
                "inside_call": [inside_call(r["clock"].get("times_ms") or []) for r in runs],
                "speedup_eager": se,
                "speedup_compile": sc,
                "spread_eager": spread(se),
                "spread_compile": spread(sc),
                "spread_time": spread(cand),
            }
            table.append(row)
            print(json.dumps(row), flush=True)
    finally:
        env.close()
    print(
        f"\nDevice: {env.backend.device_name}; {args.repeats} profile calls per task; "
        f"{args.pause:g} s between calls; prestart {args.prestart if args.prestart is not None else 'auto'}\n"
    )
    print(
        "| task | median candidate ms | speedup vs eager (min-max) | spread | speedup vs compile (min-max) | spread |"
    )
    print("|---|---|---|---|---|---|")
    for r in table:
        print(
            f"| {r['task']} | {statistics.median(r['candidate_ms']):.4g} | {min(r['speedup_eager']):.3f}-"
            f"{max(r['speedup_eager']):.3f} | {r['spread_eager']:.2%} | {min(r['speedup_compile']):.3f}-"
            f"{max(r['speedup_compile']):.3f} | {r['spread_compile']:.2%} |"
        )
    print("\n| task | candidate ms per profile call | drift per call | slow per call |")
    print("|---|---|---|---|")
    for r in table:
        calls = r["inside_call"]
        print(
            f"| {r['task']} | {', '.join(f'{t:.4g}' for t in r['candidate_ms'])} | "
            + ", ".join("n/a" if d is None else f"{d:.3f}" for d, _ in calls)
            + " | "
            + ", ".join("n/a" if s is None else f"{s:.0%}" for _, s in calls)
            + " |"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": env.backend.device_name, "rows": table}, f, indent=1)


if __name__ == "__main__":
    main()
