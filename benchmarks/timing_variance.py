"""Where a timing's spread comes from: the process, the buffers' placement, or the device over time.

    python benchmarks/timing_variance.py --processes 5 --blocks 3

Each of ``--processes`` fresh processes times one memory-bound operation (ReLU over ``--numel`` floats, eager
PyTorch, with ``cudagym.harness.timing`` and its default settings, as ``profile`` does) in ``--blocks`` blocks
separated by ``--idle`` seconds of an idle GPU. In ``same`` mode every block times the same buffers; in
``fresh`` mode each block allocates new ones (after freeing the old). The table gives each process's block
medians and three spreads, (max - min) / median: within a process (same buffers: the device over time),
within a process with fresh buffers (placement), and across processes (what five ``profile`` calls see).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
import torch
from cudagym.harness.timing import TimingConfig, time_callable

numel, blocks, idle, mode = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
device = "cuda" if torch.cuda.is_available() else "cpu"
medians = []
x = y = None
for block in range(blocks):
    if x is None or mode == "fresh":
        x = y = None
        x = torch.randn(numel, device=device)
        y = torch.empty_like(x)
    stats = time_callable(lambda: torch.clamp_min(x, 0.0, out=y), device, TimingConfig())
    medians.append(stats.median_ms)
    time.sleep(idle)
print(json.dumps({"medians": medians, "x_ptr": x.data_ptr() % (1 << 21), "y_ptr": y.data_ptr() % (1 << 21)}))
"""


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--numel", type=int, default=536870912, help="floats (default: builtin/relu's GPU size)")
    parser.add_argument("--idle", type=float, default=1.0, help="seconds between blocks")
    parser.add_argument("--modes", default="same,fresh")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    report: dict[str, list[dict[str, object]]] = {}
    for mode in args.modes.split(","):
        report[mode] = []
        for _ in range(args.processes):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(args.numel), str(args.blocks), str(args.idle), mode],
                capture_output=True,
                text=True,
                timeout=args.timeout,
                check=True,
            )
            report[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(mode, report[mode][-1], flush=True)
    print(f"\nReLU of {args.numel} floats, {args.blocks} blocks per process, {args.idle:g} s idle between blocks")
    print("| buffers | process block medians ms | within a process (max) | across processes (first blocks) |")
    print("|---|---|---|---|")
    for mode, rows in report.items():
        medians = [list(map(float, r["medians"])) for r in rows]  # type: ignore[call-overload]
        cells = "; ".join(", ".join(f"{m:.4g}" for m in ms) for ms in medians)
        within = max(spread(ms) for ms in medians)
        across = spread([ms[0] for ms in medians])
        print(f"| {mode} | {cells} | {within:.2%} | {across:.2%} |")
    print(time.strftime("%Y-%m-%d"))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
