"""Every built-in reference solution on one backend: times, tiers and the cost of a full cycle.

    python benchmarks/cuda_solutions.py --backend cuda --out results.json

For each task with a reference solution it plays the scripted agent (write, compile, verify, profile,
submit) in one environment and prints a Markdown table: eager, torch.compile and candidate medians,
the speedups, the tier, and the seconds of compile + verify + profile (first cycle, cold caches for the
task) and of submit.
"""

from __future__ import annotations

import argparse
import json
import time

from cudagym.baselines import tool_call
from cudagym.baselines.scripted import solution_files
from cudagym.envs import CudaKernelEnv
from cudagym.tasks import load


def run_task(env: CudaKernelEnv, task_id: str) -> dict:
    env.reset(options={"task_id": task_id})
    task = env.unwrapped.task
    for path, content in solution_files(task, env.backend.name).items():
        env.step(tool_call("write_file", path=path, content=content))
    seconds = {}
    infos = {}
    for name in ("compile", "verify", "profile", "submit"):
        start = time.perf_counter()
        _, _, _, _, info = env.step(tool_call(name))
        seconds[name] = time.perf_counter() - start
        infos[name] = info
    profile = infos["profile"]["result"]
    submit = infos["submit"]
    return {
        "task": task_id,
        "eager_ms": profile.get("eager_ms"),
        "compile_ms": profile.get("compile_ms"),
        "candidate_ms": profile.get("candidate_ms"),
        "speedup_eager": profile.get("speedup_eager"),
        "speedup_compile": profile.get("speedup_compile"),
        "spread": profile.get("spread"),
        "tier": submit.get("tier"),
        "expected_tier": task.expected_tier(env.backend.name, env.backend.device_name),
        "cycle_s": seconds["compile"] + seconds["verify"] + seconds["profile"],
        "seconds": seconds,
        "status": {k: v["status"] for k, v in infos.items()},
        "message": submit["result"]["message"],
    }


def fmt(value: float | None, spec: str = ".3g") -> str:
    return "n/a" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--tasks", nargs="*", help="task ids (default: all with a solution for the backend)")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()
    env = CudaKernelEnv(backend=args.backend)
    backend = env.backend.name
    ids = args.tasks or [t.id for t in load("builtin") if backend in t.solutions]
    rows = []
    try:
        for task_id in ids:
            row = run_task(env, task_id)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        env.close()
    print(f"\nDevice: {env.backend.device_name} ({backend})\n")
    print(
        "| task | eager ms | compile ms | candidate ms | vs eager | vs compile | tier (expected) | cycle s | submit s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['task']} | {fmt(r['eager_ms'], '.4g')} | {fmt(r['compile_ms'], '.4g')} | "
            f"{fmt(r['candidate_ms'], '.4g')} | {fmt(r['speedup_eager'])}x | {fmt(r['speedup_compile'])}x | "
            f"{r['tier']} ({r['expected_tier']}) | {r['cycle_s']:.1f} | {r['seconds']['submit']:.1f} |"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": env.backend.device_name, "backend": backend, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
