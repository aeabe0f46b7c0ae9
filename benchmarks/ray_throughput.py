"""Ray pool throughput with 1, 2 and 3 simulated worker nodes (cpu backend, one machine).

Each level starts a ``ray.cluster_utils.Cluster`` whose head holds no worker and N nodes of ``--cpus-per-node`` CPUs
each, a ``RayPool`` of one cpu worker per node, warms every worker (one job each, untimed), then submits
``--cycles-per-node`` x N full cycles at once through ``submit_many``: a cycle is one ``submit`` job (compile,
verify, profile) of the built-in task's solution with an edit of its own, so every build is real. It prints, per
level, the median over ``--runs`` of cycles/hour and the scaling efficiency of each added node (throughput at N nodes
over N x the 1-node throughput).

Simulated nodes share this machine's cores: on a machine with fewer cores than the nodes ask for, the figure says how
the pool spreads work and what its overhead is, not what separate machines would reach.

    python benchmarks/ray_throughput.py --nodes 1,2,3 --cycles-per-node 3 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def cycle_jobs(count: int, task_id: str, cache_tag: str) -> list:
    from cudagym.baselines.scripted import solution_files
    from cudagym.evaluator import EvalConfig
    from cudagym.harness.timing import TimingConfig
    from cudagym.ray_pool import Job, JobStage
    from cudagym.tasks import load
    from cudagym.workspace import Workspace

    task = load("builtin").get(task_id)
    files = solution_files(task, "cpu")
    kernel = next(p for p in files if p.endswith(".cpp") and not p.endswith("_binding.cpp"))
    timing = TimingConfig(warmup=2, warmup_seconds=0.02, min_reps=5, max_reps=50, budget_seconds=0.2)
    config = EvalConfig(num_checks=3, timing=timing)
    jobs = []
    for i in range(count):
        workspace = Workspace(task.source_for("cpu"), "instructions")
        for path, content in files.items():
            edit = f"\nint cudagym_bench_{cache_tag}_{i}() {{ return {i}; }}\n" if path == kernel else ""
            workspace.write(path, content + edit)
        jobs.append(Job(JobStage.SUBMIT, task, "cpu", config, workspace.freeze(), client=f"rollout-{i}"))
        workspace.remove()
    return jobs


def run_level(nodes: int, args: argparse.Namespace, cache_dir: str, run: int) -> float:
    """Cycles/hour of one run at ``nodes`` worker nodes."""
    import ray
    from ray.cluster_utils import Cluster

    from cudagym.ray_pool import RayPool, WorkerSpec
    from cudagym.results import Status

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(nodes):
        cluster.add_node(num_cpus=args.cpus_per_node, resources={"eval_node": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        spec = WorkerSpec(
            "cpu", count=nodes, num_cpus=args.cpus_per_node, resources={"eval_node": 1}, cache_dir=cache_dir
        )
        with RayPool(spec) as pool:
            warm = pool.submit_many(cycle_jobs(nodes, args.task, f"w{nodes}_{run}"))
            assert all(f.result().status is Status.OK for f in warm), [f.result().message for f in warm]
            jobs = cycle_jobs(nodes * args.cycles_per_node, args.task, f"r{nodes}_{run}")
            start = time.monotonic()
            results = [f.result() for f in pool.submit_many(jobs)]
            wall = time.monotonic() - start
        failed = [r.message for r in results if r.status is not Status.OK]
        if failed:
            raise RuntimeError(f"{len(failed)} cycles failed: {failed[0]}")
        return len(results) / wall * 3600
    finally:
        ray.shutdown()
        cluster.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1,2,3", help="comma list of worker-node counts (default 1,2,3)")
    parser.add_argument("--cycles-per-node", type=int, default=3, help="timed cycles per node and run (default 3)")
    parser.add_argument("--runs", type=int, default=3, help="runs per level; the table shows the median (default 3)")
    parser.add_argument("--cpus-per-node", type=float, default=1.0, help="CPUs each simulated node declares")
    parser.add_argument("--task", default="builtin/relu", help="the built-in task cycled (default builtin/relu)")
    parser.add_argument("--cache-dir", help="compile cache (default: a fresh one, its header built in the warm-up)")
    args = parser.parse_args(argv)
    levels = [int(n) for n in args.nodes.split(",")]
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="cg-ray-tp-")
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    medians: dict[int, float] = {}
    for nodes in levels:
        rates = [run_level(nodes, args, cache_dir, run) for run in range(args.runs)]
        medians[nodes] = statistics.median(rates)
        print(f"[{nodes} nodes] runs: {', '.join(f'{r:.0f}' for r in rates)} cycles/h", flush=True)
    base = medians.get(1)
    print("\n| worker nodes | cycles/hour (median) | scaling efficiency |")
    print("|---:|---:|---:|")
    for nodes, rate in medians.items():
        efficiency = f"{rate / (nodes * base):.0%}" if base else "n/a"
        print(f"| {nodes} | {rate:,.0f} | {efficiency} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
