"""Where the reference's torch.compile spends its seconds in a fresh process, with an empty and a warm inductor cache.

    python benchmarks/compile_cost.py --task builtin/scale_bias_tanh --runs 3

A first ``profile`` of a task cannot report its torch.compile baseline before the reference process has imported
dynamo and the inductor and compiled the model once; on an empty cache that chain, not the agent's kernel, sets the
cold cycle's length (docs/benchmarks.md). Each run starts a fresh interpreter and times, in order: ``import torch``,
importing ``torch._dynamo`` and the inductor (also as the process's CPU seconds: equal to the wall time when the
import is bound by the interpreter, as it was on the H200), the first eager call, and the first and second compiled
calls. Three variants: an empty inductor cache (``TORCHINDUCTOR_CACHE_DIR`` in a new folder), the same folder again
(a warm cache: what a second run of an environment sees), and an empty cache with ``TORCHINDUCTOR_COMPILE_THREADS=1``
(no pool of compile workers). Prints a table of medians; ``--out`` writes every run as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PARTS = ("import_torch", "import_inductor", "import_inductor_cpu", "eager_first", "compile_first", "compile_second")

CHILD = r"""
import json, sys, time
marks = {}
t = time.perf_counter()
import torch
marks["import_torch"] = time.perf_counter() - t
t, cpu = time.perf_counter(), time.process_time()
import torch._dynamo
import torch._inductor.compile_fx
marks["import_inductor"] = time.perf_counter() - t
marks["import_inductor_cpu"] = time.process_time() - cpu
from cudagym.tasks import load
task = load("builtin").get(sys.argv[1])
device = "cuda" if torch.cuda.is_available() else "cpu"
namespace = {}
exec(compile(task.source_for("cuda" if device == "cuda" else "cpu"), "model.py", "exec"), namespace)
model = namespace["Model"](*namespace["get_init_inputs"]()).to(device)
inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in namespace["get_inputs"]()]
def timed(name, fn):
    t = time.perf_counter()
    with torch.no_grad():
        fn(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    marks[name] = time.perf_counter() - t
timed("eager_first", model)
compiled = torch.compile(model)
timed("compile_first", compiled)
timed("compile_second", compiled)
print(json.dumps(marks))
"""


def run_child(task: str, env: dict[str, str], timeout: float) -> dict[str, float] | str:
    """One fresh interpreter's figures, or why it gave none."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, task], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:g} s"
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="builtin/scale_bias_tanh")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per fresh interpreter")
    parser.add_argument("--out")
    args = parser.parse_args()
    variants: dict[str, list[dict[str, float] | str]] = {"empty cache": [], "warm cache": [], "empty, 1 thread": []}
    for _ in range(args.runs):
        folder = tempfile.mkdtemp(prefix="cudagym-inductor-")
        base = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": folder}
        variants["empty cache"].append(run_child(args.task, base, args.timeout))
        variants["warm cache"].append(run_child(args.task, base, args.timeout))
        single = {**base, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="cudagym-inductor-")}
        single["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        variants["empty, 1 thread"].append(run_child(args.task, single, args.timeout))
    print(f"\ntorch.compile of {args.task}'s reference in a fresh process, {args.runs} runs, medians in seconds\n")
    print("| variant | " + " | ".join(PARTS) + " | runs ok |")
    print("|---|" + "---|" * (len(PARTS) + 1))
    for name, runs in variants.items():
        ok = [r for r in runs if isinstance(r, dict)]
        cells = [f"{statistics.median(r[p] for r in ok):.2f}" if ok else "n/a" for p in PARTS]
        print(f"| {name} | " + " | ".join(cells) + f" | {len(ok)}/{len(runs)} |")
        for failure in (r for r in runs if isinstance(r, str)):
            print(f"  {name} failed: {failure}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"task": args.task, "variants": variants}, f, indent=1)


if __name__ == "__main__":
    main()
