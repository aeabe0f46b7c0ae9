"""Synthesis rate: accepted tasks per minute of ``cudagym synth`` end to end, and why candidates were dropped.

    python benchmarks/synth_rate.py --backend cpu --count 50 --runs 1 --workers 1
    python benchmarks/synth_rate.py --backend cuda --count 1000 --runs 1 --workers 8 --kernelbench PATH

Each run starts in a fresh folder and a fresh cache (no stored verdict or eager time), with the catalogue built once
before the runs (its build time is reported on its own). A run is the whole pipeline: compose, decontaminate against
``--kernelbench`` (when given), the execution filters in the trusted reference processes (torch.compile included
unless ``--no-compile-check``), and the parquet and report. Prints one row per run, then the median over runs: wall
seconds, candidates, accepted, accepted per minute, the share of 2-5-op tasks, and the drops per reason; then where
the execution filters' time went (``Verdict.seconds``: the checks, torch.compile, and the waits for the device's slots
within each), summed over the candidates as worker-seconds and as a share of the workers' time (workers x wall).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import platform
import statistics
import tempfile
import time
from pathlib import Path

from cudagym.backends import resolve_backend
from cudagym.synth.catalogue import build_catalogue
from cudagym.synth.filters import FilterConfig
from cudagym.synth.output import write_outputs
from cudagym.synth.pipeline import Pipeline, SynthConfig
from cudagym.synth.records import FILTER_PHASES


def one_run(args: argparse.Namespace, catalogue: Path, seed: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="synth-rate-") as folder:
        out, cache = Path(folder) / "run", Path(folder) / "cache"
        config = SynthConfig(
            out=out,
            count=args.count,
            backend=args.backend,
            seed=seed,
            workers=args.workers,
            kernelbench=args.kernelbench,
            filters=FilterConfig.for_backend(args.backend, check_compile=not args.no_compile_check),
            catalogue=catalogue,
            cache_dir=cache,
        )
        start = time.perf_counter()
        pipeline = Pipeline(config)
        result = pipeline.run()
        counts = write_outputs(out, result.outcomes, args.count, pipeline.backend.device_name, result.catalogue.version)
        wall = time.perf_counter() - start
    phases: dict[str, list[float]] = {phase: [] for phase in FILTER_PHASES}
    for outcome in result.outcomes:
        for phase, spent in outcome.verdict.seconds.items():
            phases.setdefault(phase, []).append(spent)
    accepted = min(counts["accepted"], args.count)
    multi = sum(n for k, n in counts["ops_per_task"].items() if int(k) >= 2)
    return {
        "seed": seed,
        "wall_s": wall,
        "candidates": counts["candidates"],
        "accepted": accepted,
        "per_min": accepted / wall * 60,
        "multi_op": multi / max(sum(counts["ops_per_task"].values()), 1),
        "dropped": counts["dropped"],
        "phases": phases,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="the first run's seed (run i uses seed + i)")
    parser.add_argument("--kernelbench", type=Path, default=None)
    parser.add_argument("--no-compile-check", action="store_true")
    args = parser.parse_args()
    backend = resolve_backend(args.backend)
    start = time.perf_counter()
    catalogue = build_catalogue()
    build_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="synth-catalogue-") as folder:
        path = catalogue.save(Path(folder) / "catalogue.json")
        runs = [one_run(args, path, args.seed + i) for i in range(args.runs)]
    print(f"# synth rate, {datetime.date.today()}, {backend.name} on {backend.device_name} ({platform.node()})")
    print(f"catalogue {catalogue.version}: {len(catalogue.ops)} ops, built in {build_s:.1f} s")
    print(
        f"count {args.count}, workers {args.workers}, compile check {not args.no_compile_check}, "
        f"kernelbench {'yes' if args.kernelbench else 'no'}\n"
    )
    print("| seed | wall s | candidates | accepted | accepted/min | 2-5-op share |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        print(
            f"| {run['seed']} | {run['wall_s']:.0f} | {run['candidates']} | {run['accepted']} | "
            f"{run['per_min']:.1f} | {run['multi_op']:.0%} |"
        )
    if len(runs) > 1:
        print(
            f"| median | {statistics.median(r['wall_s'] for r in runs):.0f} | | | "
            f"{statistics.median(r['per_min'] for r in runs):.1f} | |"
        )
    print(
        "\n| filter phase | worker-seconds (all runs) | share of the workers' time | per judged candidate, median s |"
        " what |\n|---|---|---|---|---|"
    )
    capacity = sum(r["wall_s"] for r in runs) * args.workers
    for phase, what in FILTER_PHASES.items():
        spent = [x for r in runs for x in r["phases"].get(phase, [])]
        median = statistics.median(spent) if spent else 0.0
        print(f"| {phase} | {sum(spent):.0f} | {sum(spent) / capacity:.0%} | {median:.2f} | {what} |")
    drops: collections.Counter[str] = collections.Counter()
    for run in runs:
        drops.update(run["dropped"])
    print("\n| drop reason | candidates (all runs) |\n|---|---|")
    for reason, n in drops.most_common():
        print(f"| {reason} | {n} |")


if __name__ == "__main__":
    main()
