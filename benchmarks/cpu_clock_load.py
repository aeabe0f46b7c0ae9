"""The trusted clock on the cpu backend, on a quiet host and a busy one: do the figures that decide a reward move?

For each host load (``host_load.py``'s: ``quiet``, ``cpu``: one busy Python loop per core, ``compile``: g++
processes compiling torch's extension header over and over), one environment profiles the built-in ReLU task's
reference CPU solution ``--profiles`` times. The candidate is timed by the reference process (run time the kernel
accounted to the candidate's threads, ``cudagym/harness/cputime.py``), eager PyTorch by the baselines' method (the
calling thread's run time), cached on the quiet host and re-validated beside the candidate. The table gives, per
load, the medians over the profiles of the candidate's time, of the eager time the speedup uses and of the speedup
that decides the tier, the spread of the speedup across profiles ((max - min) / min), and how many profiles judged
their conditions fair.

    python3 benchmarks/cpu_clock_load.py --loads quiet,cpu,compile --profiles 5 --sizes 16,20

No GPU needed. Prints a Markdown table; ``--json`` writes the rows too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def profile_under(load: str, exponent: int, profiles: int, compilers: int) -> dict:
    """``profiles`` profiles of the ReLU CPU solution on 2^``exponent`` floats while ``load`` runs."""
    from cudagym_testing import RELU, relu_solution, write_all
    from host_load import host_load

    from cudagym.baselines import tool_call
    from cudagym.envs import CudaKernelEnv
    from cudagym.tasks import load as load_tasks

    relu = load_tasks("builtin").get(RELU)
    task = dataclasses.replace(relu, metadata=dataclasses.replace(relu.metadata, sizes={"cpu": {"N": 1 << exponent}}))
    env = CudaKernelEnv([task], backend="cpu")
    candidate, eager, speedup, seconds, fair = [], [], [], [], []
    try:
        env.reset(options={"task_id": RELU})
        write_all(env, relu_solution("cpu"))
        _, _, _, _, info = env.step(tool_call("profile"))  # builds, caches the baselines: outside the load
        if info["status"] != "ok":
            raise SystemExit(f"the quiet profile failed: {info['result'].get('message')}")
        with tempfile.TemporaryDirectory() as workdir, host_load(load, compilers, Path(workdir), pin=False):
            for _ in range(profiles):
                start = time.monotonic()
                obs, _, _, _, info = env.step(tool_call("profile"))
                seconds.append(time.monotonic() - start)
                result = info["result"]
                if info["status"] != "ok":
                    raise SystemExit(f"profile failed under {load}: {obs}")
                candidate.append(result["candidate_ms"])
                eager.append(result["eager_ms"])
                speedup.append(result["speedup_eager"])
                fair.append(bool(result["timing_fair"]))
    finally:
        env.close()
    return {
        "load": load,
        "n": 1 << exponent,
        "candidate_ms": statistics.median(candidate),
        "eager_ms": statistics.median(eager),
        "fair": sum(fair),
        "speedup": statistics.median(speedup),
        "speedup_spread": (max(speedup) - min(speedup)) / min(speedup) if min(speedup) > 0 else float("inf"),
        "candidate_runs_ms": candidate,
        "speedups": speedup,
        "profile_seconds": statistics.median(seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", default="quiet,cpu,compile")
    parser.add_argument("--profiles", type=int, default=5)
    parser.add_argument("--sizes", default="16,20", help="log2 of the ReLU task's N, comma-separated")
    parser.add_argument("--compilers", type=int, default=2)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    rows = []
    for exponent in (int(e) for e in args.sizes.split(",")):
        for load in args.loads.split(","):
            row = profile_under(load, exponent, args.profiles, args.compilers)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{args.profiles} profiles per load and size; medians.\n")
    print("| N | load | candidate ms | eager ms | speedup | speedup spread | fair | profile s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| 2^{r['n'].bit_length() - 1} | {r['load']} | {r['candidate_ms']:.4g} | {r['eager_ms']:.4g} | "
            f"{r['speedup']:.3g}x | {r['speedup_spread']:.0%} | {r['fair']}/{len(r['speedups'])} | "
            f"{r['profile_seconds']:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
