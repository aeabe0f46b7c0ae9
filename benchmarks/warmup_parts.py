"""What a candidate process spends before it can take a job, part by part.

    python benchmarks/warmup_parts.py --runs 3

Each run starts a fresh interpreter and times, in order: ``import torch``, CUDA initialisation (``torch.cuda.init``
and a first kernel), and the first profiler session with CUDA tracing (CUPTI). The same is measured in a process
forked from one that had imported torch but not touched CUDA (what cudagym's fork server gives a candidate). Each
measurement is killed after ``--timeout`` seconds. A third variant forks from a process that also imported the
modules a first profiling session imports (``torch._dynamo`` and the inductor), with torch's NVML-based CUDA
check so that the imports do not initialise the driver; a fork that torch marks as unable to use CUDA says so.
Prints a table of medians; ``--out`` writes the raw figures as JSON."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PARTS = ("import_torch", "cuda_init", "profiler_cpu_cuda", "profiler_again")

CHILD = r"""
import json, os, sys, time

def after_import(marks, start):
    import torch
    from torch.profiler import ProfilerActivity, profile
    t = time.perf_counter()
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    marks["cuda_init"] = time.perf_counter() - t
    for name in ("profiler_cpu_cuda", "profiler_again"):
        t = time.perf_counter()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with profile(activities=activities):
            torch.ones(1, device="cuda" if torch.cuda.is_available() else "cpu").add_(1)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        marks[name] = time.perf_counter() - t
    marks["total"] = time.perf_counter() - start
    return marks

start = time.perf_counter()
if sys.argv[1] == "fork_preimport":
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # torch.cuda.is_available() asks NVML, not the driver
import torch
marks = {"import_torch": time.perf_counter() - start}
if sys.argv[1] == "fork_preimport":
    import torch._dynamo, torch.profiler, torch._inductor.standalone_compile  # what a first profile session imports
    marks["preimport"] = time.perf_counter() - start - marks["import_torch"]
if sys.argv[1] in ("fork", "fork_preimport"):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        if torch.cuda._is_in_bad_fork():  # the parent's imports queried the CUDA driver
            os.write(write_end, json.dumps({"bad_fork": 1.0}).encode())
            os._exit(0)
        child = after_import({"import_torch": 0.0}, time.perf_counter())
        os.write(write_end, json.dumps(child).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.waitpid(pid, 0)
    print(data.decode())
else:
    print(json.dumps(after_import(marks, start)))
"""


def measure(mode: str, timeout: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True, timeout=timeout
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per measured process")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"fresh": [], "fork": [], "fork_preimport": []}
    for _ in range(args.runs):
        for mode in results:
            try:
                results[mode].append(measure(mode, args.timeout))
            except (subprocess.SubprocessError, ValueError) as exc:
                print(f"{mode}: {type(exc).__name__}: {exc}", flush=True)
    labels = {
        "fresh": "fresh interpreter",
        "fork": "forked after import torch (cudagym's fork server)",
        "fork_preimport": "forked after import torch and the profiler's modules (NVML-based CUDA check)",
    }
    print("| process | " + " | ".join(f"{p} s" for p in PARTS) + " | ready s |")
    print("|---" * (len(PARTS) + 2) + "|")
    for mode, runs in results.items():
        if any("bad_fork" in r for r in runs):
            print(f"| {labels[mode]} | torch refuses CUDA in this fork (the parent's imports queried the driver) |")
            continue
        if not runs:
            print(f"| {labels[mode]} | failed |")
            continue
        cells = [f"{statistics.median(r[p] for r in runs):.3f}" for p in (*PARTS, "total")]
        print(f"| {labels[mode]} | " + " | ".join(cells) + " |")
    print(f"(medians of {args.runs} runs; cpus: {os.cpu_count()}; {time.strftime('%Y-%m-%d')})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
