"""The trusted clock against CUDA events: the same honest kernel timed both ways, side by side in one run.

For each size of the built-in ReLU task, the reference CUDA solution is profiled through a real environment (the
reference process times the candidate process's calls on its own clock, ``cudagym/harness/clock.py``), and the
same extension, loaded into this process, is timed by the method the baselines use (CUDA events around each call,
the GPU held before the start event, L2 flushed, ``cudagym/harness/timing.py``). The ratio trusted / events says
how far the trusted figure is from the event figure for a kernel of that length; the table also gives the calls
per handshake the clock chose, the kernel's own device time as the candidate's profiler traced it (to tell
the kernel's time from the handshake's), the spread of the trusted figure and the seconds a profile took.

    python3 benchmarks/trusted_clock.py --sizes 22,24,25,26,28,29 --repeats 3 --handshake-us 1,default

``--handshake-us`` profiles each size with several ``TimingConfig.handshake_us`` values taking turns (``1``: one
call per handshake; ``default``: as many calls as reach the backend's target).

Needs a GPU (the cuda backend). Prints a Markdown table; ``--json`` writes the rows too.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def events_ms(extension: object, n: int, timing: object, repeats: int) -> list[float]:
    """The extension's ReLU on ``n`` floats timed in this process by the baselines' method, ``repeats`` times."""
    import torch

    from cudagym.harness.timing import time_callable

    inputs = [torch.randn(n, device="cuda")]
    forward = extension.relu_forward  # type: ignore[attr-defined]
    times = [time_callable(lambda: forward(inputs[0]), "cuda", timing).median_ms for _ in range(repeats)]  # type: ignore[arg-type]
    inputs.clear()
    torch.cuda.empty_cache()
    return times


def own_kernel_ms(result: dict) -> float:
    """The candidate's busiest kernel's device time per launch, as the profiler in the candidate traced it over the
    whole profile (its own word: shown to tell the kernel's time from the handshake's, never used for a reward)."""
    kernels = result.get("kernels") or []
    if not kernels:
        return float("nan")
    top = max(kernels, key=lambda k: k["total_ms"])
    return top["total_ms"] / max(1, top["calls"])


def queued_share(clocks: list[dict | None]) -> float:
    """The share of timed handshakes whose calls the candidate had queued before its go, over the profiles."""
    queued = sum(int((c or {}).get("queued_handshakes") or 0) for c in clocks)
    handshakes = sum(int((c or {}).get("handshakes") or 0) for c in clocks)
    return queued / handshakes if handshakes else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="22,24,25,26,27,28,29", help="log2 of the ReLU task's N, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="profiles (and event timings) per size")
    parser.add_argument(
        "--handshake-us",
        default="default",
        help="comma-separated TimingConfig.handshake_us values profiled side by side ('default': the backend's; "
        "1: one call per handshake)",
    )
    parser.add_argument("--json", default="", help="also write the rows to this file")
    args = parser.parse_args()

    import torch
    from cudagym_testing import RELU, relu_solution, write_all

    from cudagym.baselines import tool_call
    from cudagym.envs import CudaKernelEnv
    from cudagym.evaluator import EvalConfig
    from cudagym.tasks import load

    relu = load("builtin").get(RELU)
    variants = [None if v == "default" else float(v) for v in args.handshake_us.split(",")]
    rows = []
    for exponent in (int(e) for e in args.sizes.split(",")):
        n = 1 << exponent
        task = dataclasses.replace(relu, metadata=dataclasses.replace(relu.metadata, sizes={"cuda": {"N": n}}))
        envs = []
        for target in variants:
            config = EvalConfig()
            config = dataclasses.replace(config, timing=dataclasses.replace(config.timing, handshake_us=target))
            envs.append(CudaKernelEnv([task], backend="cuda", eval_config=config))
        found: list[dict[str, list]] = [
            {"trusted": [], "spreads": [], "calls": [], "seconds": [], "traced": [], "clocks": []} for _ in variants
        ]
        try:
            for env in envs:
                env.reset(options={"task_id": RELU})
                write_all(env, relu_solution("cuda"))
                _, _, _, _, info = env.step(tool_call("compile"))
                artifact = info["result"]["artifact"]
            for _ in range(args.repeats):  # the variants take turns
                for env, got in zip(envs, found, strict=True):
                    start = time.monotonic()
                    obs, _, _, _, info = env.step(tool_call("profile"))
                    got["seconds"].append(time.monotonic() - start)
                    result = info["result"]
                    if info["status"] != "ok":
                        raise SystemExit(f"profile failed at N=2^{exponent}: {obs}\n{json.dumps(result.get('clock'))}")
                    got["trusted"].append(result["candidate_ms"])
                    got["spreads"].append(result["spread"])
                    got["calls"].append(result["calls_per_handshake"])
                    got["traced"].append(own_kernel_ms(result))
                    got["clocks"].append(result.get("clock"))
            timing = envs[0].unwrapped.evaluator.timing
        finally:
            for env in envs:
                env.close()
        spec = importlib.util.spec_from_file_location("cuda_extension", artifact)
        assert spec is not None and spec.loader is not None
        extension = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(extension)
        events = events_ms(extension, n, timing, args.repeats)
        for target, got in zip(variants, found, strict=True):
            row = {
                "n": n,
                "handshake_us": target,
                "mb_moved": 8 * n / 1e6,
                "events_ms": statistics.median(events),
                "trusted_ms": statistics.median(got["trusted"]),
                "ratio": statistics.median(got["trusted"]) / statistics.median(events),
                "trusted_runs_ms": got["trusted"],
                "events_runs_ms": events,
                "traced_ms": statistics.median(got["traced"]),
                "trusted_spread": statistics.median(got["spreads"]),
                "calls_per_handshake": statistics.median(got["calls"]),
                "profile_seconds": statistics.median(got["seconds"]),
                "queued_share": queued_share(got["clocks"]),
                "clock": got["clocks"],  # per profile: the calibration, the timed handshakes' phases, per-call times
            }
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "clock"}), flush=True)
    device = torch.cuda.get_device_name()
    print(f"\nDevice: {device}; {args.repeats} profiles and event timings per size and variant; medians.\n")
    print("| N | MB moved | handshake target (us) | CUDA events (ms) | trusted clock (ms) | trusted / events | "
          "kernel, traced (ms) | calls per handshake | queued | trusted spread | profile (s) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        target = "default" if r["handshake_us"] is None else f"{r['handshake_us']:g}"
        print(
            f"| 2^{r['n'].bit_length() - 1} | {r['mb_moved']:.0f} | {target} | {r['events_ms']:.4f} | "
            f"{r['trusted_ms']:.4f} | {r['ratio']:.3f} | {r['traced_ms']:.4f} | {r['calls_per_handshake']:g} | "
            f"{r['queued_share']:.0%} | "
            f"{r['trusted_spread']:.1%} | {r['profile_seconds']:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
