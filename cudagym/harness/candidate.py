"""The untrusted candidate process: loads the agent's extension and ``model_new.py``, runs ``ModelNew``
on input files and saves its outputs, or times it. Single-use: a new process for every stage.

It reports progress on the private channel (``stage`` messages) so the parent can tell a load failure
from a runtime failure even when the process dies; the verdict on outputs is made elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

from common import Channel, configure_threads, describe_exception, load_module, synchronize, to_device
from timing import TimingConfig, time_callable


def load_extension(path: str) -> Any:
    """Imports the built extension as the module ``cuda_extension``."""
    spec = importlib.util.spec_from_file_location("cuda_extension", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the extension at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cuda_extension"] = module
    spec.loader.exec_module(module)
    return module


def poison_allocator(device: str, nbytes: int) -> None:
    """Fills free cached device memory with NaN so that outputs a kernel never writes read as NaN."""
    import torch

    if device.startswith("cuda") and nbytes > 0:
        block = torch.full((nbytes // 4,), float("nan"), dtype=torch.float32, device=device)
        del block


def import_model_new(workspace: str) -> Any:
    """Executes the workspace's model_new.py as the module ``model_new`` and returns its ModelNew class."""
    path = os.path.join(workspace, "model_new.py")
    with open(path, encoding="utf-8") as f:
        source = f.read()
    sys.path.insert(0, workspace)
    module = load_module("model_new", source, path)
    if not hasattr(module, "ModelNew"):
        raise AttributeError("model_new.py defines no class ModelNew")
    return module.ModelNew


def build_model(job: dict[str, Any]) -> Any:
    import torch

    state = torch.load(job["state_path"], weights_only=True)
    if job.get("extension"):
        load_extension(job["extension"])
    model = import_model_new(job["workspace"])(*state["init_inputs"])
    model.load_state_dict(state["state_dict"], strict=True)
    model = model.to(job["device"])
    if job.get("eval_mode"):
        model = model.eval()
    return model


def import_only(job: dict[str, Any], channel: Channel) -> None:
    """Imports model_new.py only: a single-file solution builds its kernels (load_inline) at import."""
    channel.send(stage="load")
    try:
        import_model_new(job["workspace"])
    except BaseException as exc:
        channel.send(stage="load", ok=False, error=describe_exception(exc))
        return
    channel.send(stage="done", ok=True)


def run(job: dict[str, Any], channel: Channel) -> None:
    import torch

    os.chdir(job["workspace"])

    if job["mode"] == "import":
        import_only(job, channel)
        return
    configure_threads(job.get("threads", 0))
    device = job["device"]
    dtype = getattr(torch, job.get("dtype", "float32"))
    channel.send(stage="load")
    try:
        model = build_model(job)
    except BaseException as exc:
        channel.send(stage="load", ok=False, error=describe_exception(exc))
        return
    channel.send(stage="run")
    try:
        if job["mode"] == "ncu":
            inputs = to_device(torch.load(job["inputs"], weights_only=True), device, dtype)
            with torch.no_grad():
                model(*inputs)
            synchronize(device)
        elif job["mode"] == "verify":
            for item in job["checks"]:
                inputs = to_device(torch.load(item["inputs"], weights_only=True), device, dtype)
                poison_allocator(device, job.get("poison_bytes", 0))
                with torch.no_grad():
                    out = model(*inputs)
                synchronize(device)
                torch.save(out, item["output"])
                channel.send(stage="checked", key=item["key"])
        else:
            profile(model, job, channel, device, dtype)
    except BaseException as exc:
        channel.send(stage="run", ok=False, error=describe_exception(exc))
        return
    channel.send(stage="done", ok=True)


def profile(model: Any, job: dict[str, Any], channel: Channel, device: str, dtype: Any) -> None:
    import torch

    inputs = to_device(torch.load(job["inputs"], weights_only=True), device, dtype)
    last: dict[str, Any] = {}

    def call() -> None:
        with torch.no_grad():
            last["out"] = model(*inputs)

    stats = time_callable(call, device, TimingConfig(**job["timing"]))
    synchronize(device)
    torch.save(last["out"], job["output"])
    channel.send(stage="timed", median_ms=stats.median_ms, spread=stats.spread, reps=stats.reps, method=stats.method)
    channel.send(stage="kernels", kernels=kernel_breakdown(call, device))


def kernel_breakdown(call: Any, device: str, runs: int = 3) -> list[dict[str, Any]]:
    """Per-kernel device time (cuda) or per-op CPU time (cpu) over a few profiled calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(runs):
            call()
        synchronize(device)
    rows = []
    if device.startswith("cuda"):
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                rows.append((event.name, event.device_time))
    else:
        for avg in prof.key_averages():
            rows.append((avg.key, avg.self_cpu_time_total / max(avg.count, 1) * avg.count))
    totals: dict[str, list[float]] = {}
    for name, us in rows:
        entry = totals.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += us
    grand = sum(v[1] for v in totals.values()) or 1.0
    table = [
        {
            "name": name[:200],
            "calls": int(calls) // runs if device.startswith("cuda") else int(calls),
            "total_ms": us / 1e3 / runs,
            "share": us / grand,
        }
        for name, (calls, us) in totals.items()
    ]
    table.sort(key=lambda r: -r["total_ms"])
    return table[:20]


def main(channel: Channel) -> None:
    """Imports torch first, then waits for the job: a process can be started ahead of its stage."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.init()
    channel.send(stage="warm")
    job = json.loads(sys.stdin.readline())
    run(job, channel)
