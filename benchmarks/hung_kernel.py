"""What a hung kernel costs: how long its verify takes to come back, and whether the env works right after.

    python3 benchmarks/hung_kernel.py --backend cuda --repeats 3

On the built-in ReLU task, each repeat: the reference solution is verified (the env warm), then a solution whose
kernel spins forever on its first element (an infinite loop in the device or host code, the kind an agent writes by
mistake) is verified: the seconds until that observation are the hang's cost; then the reference solution is verified
again: the seconds until a correct verdict say the env is usable again. A hung candidate is found by its first call
that does not answer within max(10 x the reference's call, ``EvalConfig.hang_seconds``) and killed
(``cudagym/harness/clock.py``, ``Clock.hang_bound_s``); ``--hang-seconds`` sets that floor (default: the backend's).

Prints a Markdown table of medians; ``--json`` writes every repeat too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# an expression of the element ``v`` that never returns: an empty asm statement the compiler must keep in the loop
SPIN = '[&]() { for (;;) { asm volatile(""); } return v; }()'


def timed_verify(env: object, files: dict[str, str]) -> tuple[float, str, str]:
    """Writes ``files`` and verifies; returns (seconds, status, the observation's first line)."""
    from cudagym_testing import write_all

    from cudagym.baselines import tool_call

    write_all(env, files)  # type: ignore[arg-type]
    start = time.monotonic()
    obs, _, _, _, info = env.step(tool_call("verify"))  # type: ignore[attr-defined]
    return time.monotonic() - start, info["status"], obs.strip().splitlines()[0] if obs.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hang-seconds", type=float, default=None, help="EvalConfig.hang_seconds (default: auto)")
    parser.add_argument("--json", default="", help="also write the repeats to this file")
    args = parser.parse_args()

    from cudagym_testing import RELU, relu_solution, with_relu_op

    from cudagym.envs import CudaKernelEnv
    from cudagym.eval_config import EvalConfig, resolve_hang_seconds

    config = EvalConfig() if args.hang_seconds is None else EvalConfig(hang_seconds=args.hang_seconds)
    honest, hung = relu_solution(args.backend), with_relu_op(SPIN, args.backend)
    env = CudaKernelEnv(backend=args.backend, eval_config=config)
    rows = []
    try:
        floor = resolve_hang_seconds(config, env.unwrapped.backend)
        for repeat in range(args.repeats):
            env.reset(options={"task_id": RELU})
            warm, warm_status, _ = timed_verify(env, honest)
            hang, hang_status, said = timed_verify(env, hung)
            after, after_status, _ = timed_verify(env, honest)
            row = {
                "repeat": repeat,
                "warm_verify_s": warm,
                "hung_verify_s": hang,
                "hung_status": hang_status,
                "hung_said": said,
                "next_verify_s": after,
                "next_status": after_status,
                "usable_again_s": hang + after,
                "warm_status": warm_status,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        env.close()
    device = "cpu"
    if args.backend == "cuda":
        import torch

        device = torch.cuda.get_device_name()

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print(f"\nDevice: {device}; backend {args.backend}; hang floor {floor:g} s; {args.repeats} repeats; medians.\n")
    print("| honest verify (s) | hung kernel's verify (s) | next honest verify (s) | hung until usable again (s) |")
    print("|---|---|---|---|")
    figures = ("warm_verify_s", "hung_verify_s", "next_verify_s", "usable_again_s")
    print("| " + " | ".join(f"{med(key):.2f}" for key in figures) + " |")
    statuses = sorted({(r["hung_status"], r["next_status"]) for r in rows})
    print(f"\nStatuses (hung, next): {statuses}; the hung verify said: {rows[-1]['hung_said'][:200]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"floor_s": floor, "device": device, "rows": rows}, indent=1))
    if any(r["hung_status"] != "timeout" or r["next_status"] != "ok" for r in rows):
        raise SystemExit("a hung verify was not a timeout, or the env did not verify the honest solution after it")


if __name__ == "__main__":
    main()
