"""The untrusted candidate process: loads the agent's extension and ``model_new.py`` and runs ``ModelNew``
as the parent asks. Single-use: a new process for every stage, discarded afterwards.

Protocol. The first stdin line is the job (mode, workspace, extension, weights file, device). The
process reports ``warm`` (torch imported), then ``load``/``ready`` once ModelNew is built, and then
serves one command per stdin line until ``end`` or end of input:

* ``run``: run ModelNew once on an input set (a file, or shared device buffers: ``transfer.py``) and
  hand the output over (a file, or a copy into the shared output buffers); reports ``checked`` with a
  description of the output and what the harness observed during the call;
* ``time``: time ModelNew on an input set (``timing.py``), report ``timed``, then the per-kernel
  breakdown as ``kernels`` (unless ``breakdown`` is false: a round of an interleaved timing).

Input sets given as files are copied into the tensors of the previous set when shapes match, so that
every set is seen at the same addresses (as with the shared buffers). What this process reports is
the candidate's own word; the verdict on values is made in the reference process, and the
observations below are judged by the parent against the integrity policy.

Observed here: aten operators dispatched during the first call (``observe``), whether the inputs
changed and whether an output aliases an input (file transport), Python threads started, and trusted
functions replaced (timers, synchronisation, comparison) since before the agent's code was imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from typing import Any

from common import (
    PROFILER_WARMUP_ENV,
    WARMUP_SLOT_ENV,
    Channel,
    configure_threads,
    describe_exception,
    load_module,
    synchronize,
    to_device,
    warmup_slot,
)
from timing import TimingConfig, time_callable
from transfer import IpcOpener, same_values


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


# -- what the harness watches ------------------------------------------------------------------------

GUARDED = (
    ("time", "perf_counter"),
    ("time", "time"),
    ("time", "monotonic"),
    ("torch", "allclose"),
    ("torch", "equal"),
    ("torch", "isclose"),
    ("torch", "save"),
    ("torch.cuda", "synchronize"),
    ("torch.cuda", "Event"),
    ("torch.cuda.Event", "record"),
    ("torch.cuda.Event", "elapsed_time"),
    ("torch.cuda.Event", "synchronize"),
    ("torch.Tensor", "copy_"),
    ("torch.Tensor", "__eq__"),
    ("torch.Tensor", "clone"),
    ("torch.nn.Module", "__call__"),
)


def _resolve(path: str) -> Any:
    import torch

    obj: Any = {"time": time, "torch": torch}[path.split(".")[0]]
    for part in path.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


class Watch:
    """References to trusted functions and the Python thread count, taken before the agent's code runs."""

    def __init__(self) -> None:
        self.functions = {f"{owner}.{name}": getattr(_resolve(owner), name) for owner, name in GUARDED}
        self.threads = threading.active_count()

    def replaced(self) -> list[str]:
        """Trusted functions that are no longer the objects they were."""
        out = []
        for key, original in self.functions.items():
            owner, name = key.rsplit(".", 1)
            try:
                current = getattr(_resolve(owner), name)
            except AttributeError:
                current = None
            if current is not original:
                out.append(key)
        return out

    def report(self) -> dict[str, Any]:
        return {"replaced": self.replaced(), "threads_started": threading.active_count() - self.threads}


def record_ops(call: Any) -> tuple[Any, list[str]]:
    """Runs ``call()`` recording every aten operator dispatched meanwhile (from Python or C++)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            schema = getattr(func, "_schema", None)
            seen.add(schema.name if schema is not None else str(func))
            return func(*args, **(kwargs or {}))

    with Recorder():
        result = call()
    return result, sorted(seen)


# -- inputs and outputs ------------------------------------------------------------------------------


class Inputs:
    """The current input set, at stable addresses (see the module docstring)."""

    def __init__(self, device: str, dtype: Any) -> None:
        self.device, self.dtype = device, dtype
        self.values: list[Any] = []
        self.opener = IpcOpener()

    def update(self, spec: dict[str, Any]) -> list[Any]:
        import torch

        if "ipc" in spec:
            self.values = [self.opener.open(i["tensor"]) if "tensor" in i else i["value"] for i in spec["ipc"]]
            return self.values
        fresh = to_device(torch.load(spec["file"], weights_only=True), self.device, self.dtype)
        same = len(fresh) == len(self.values) and all(
            type(a) is type(b) and (not isinstance(a, torch.Tensor) or (a.shape == b.shape and a.dtype == b.dtype))
            for a, b in zip(fresh, self.values, strict=True)
        )
        if same:
            for old, new in zip(self.values, fresh, strict=True):
                if isinstance(old, torch.Tensor):
                    old.copy_(new)
            self.values = [o if isinstance(o, torch.Tensor) else n for o, n in zip(self.values, fresh, strict=True)]
        else:
            self.values = list(fresh)
        return self.values


def describe_output(out: Any, inputs: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    """The output's container and, per tensor, exact type, shape, dtype, device and input aliasing."""
    import torch

    items = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (list, tuple)) else []
    spans = [_span(x) for x in inputs if isinstance(x, torch.Tensor)]
    described = []
    for item in items:
        if not isinstance(item, torch.Tensor):
            described.append({"type": type(item).__name__, "exact": False})
            continue
        span = _span(item)
        described.append(
            {
                "type": type(item).__name__,
                "exact": type(item) is torch.Tensor,
                "shape": list(item.shape),
                "dtype": str(item.dtype).removeprefix("torch."),
                "device": item.device.type,
                "aliases_input": any(span[0] < s[1] and s[0] < span[1] for s in spans if span[1] > span[0]),
            }
        )
    return {"container": type(out).__name__, "items": described}, items


def _span(t: Any) -> tuple[int, int]:
    """The byte range of a tensor's storage (empty when it has no storage)."""
    try:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.data_ptr() + storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return 0, 0


def hand_over(out: Any, spec: dict[str, Any], inputs: list[Any], opener: IpcOpener, device: str) -> dict[str, Any]:
    """Delivers the output as ``spec`` says and returns its description."""
    import torch

    meta, items = describe_output(out, inputs)
    if "file" in spec:
        torch.save(out, spec["file"])
        meta["path"] = spec["file"]
        return meta
    receivers = [opener.open(s) for s in spec["ipc"]]
    for item, described, buffer in zip(items, meta["items"], receivers, strict=False):
        if described.get("exact") and tuple(item.shape) == tuple(buffer.shape) and item.dtype == buffer.dtype:
            buffer.copy_(item)
    synchronize(device)
    return meta


# -- the stage ---------------------------------------------------------------------------------------


def run(job: dict[str, Any], channel: Channel, watch: Watch) -> None:
    import torch

    os.chdir(job["workspace"])
    if job["mode"] == "import":
        channel.send(stage="load")
        try:
            import_model_new(job["workspace"])  # a single-file solution builds its kernels (load_inline) here
        except BaseException as exc:
            channel.send(stage="load", ok=False, error=describe_exception(exc))
            return
        channel.send(stage="done", ok=True)
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
    inputs = Inputs(device, dtype)
    try:
        if job["mode"] == "ncu":
            values = inputs.update(job["inputs"])
            with torch.no_grad():
                model(*values)
            synchronize(device)
        else:
            channel.send(stage="ready")
            serve(model, job, channel, watch, inputs)
    except BaseException as exc:
        channel.send(stage="run", ok=False, error=describe_exception(exc))
        return
    channel.send(stage="done", ok=True)


def serve(model: Any, job: dict[str, Any], channel: Channel, watch: Watch, inputs: Inputs) -> None:
    """Answers the parent's commands until ``end`` or end of input."""
    for line in sys.stdin:
        command = json.loads(line)
        op = command.get("op")
        if op == "end":
            return
        values = inputs.update(command["inputs"]) if command.get("inputs") else inputs.values
        if op == "run":
            run_once(model, job, command, values, inputs, channel, watch)
        elif op == "time":
            time_model(model, job["device"], command, values, channel, watch)
        else:
            raise ValueError(f"unknown command {op!r}")


def run_once(
    model: Any,
    job: dict[str, Any],
    command: dict[str, Any],
    values: list[Any],
    inputs: Inputs,
    channel: Channel,
    watch: Watch,
) -> None:
    """One call on the current input set; hands the output over and reports what was observed."""
    import torch

    device = job["device"]
    poison_allocator(device, job.get("poison_bytes", 0))
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    before = [t.clone() for t in tensors] if "file" in command["output"] else []

    def call() -> Any:
        with torch.no_grad():
            return model(*values)

    out, ops = record_ops(call) if command.get("observe") else (call(), None)
    synchronize(device)
    meta = hand_over(out, command["output"], values, inputs.opener, device)
    changed = [i for i, (a, b) in enumerate(zip(before, tensors, strict=False)) if not same_values(a, b)]
    channel.send(
        stage="checked",
        key=command["key"],
        meta=meta,
        ops=ops,
        inputs_changed=changed if before else None,
        **watch.report(),
    )


def time_model(
    model: Any, device: str, command: dict[str, Any], values: list[Any], channel: Channel, watch: Watch
) -> None:
    """Times calls on the current input set, then reports the per-kernel breakdown."""
    import torch

    def call() -> None:
        with torch.no_grad():
            model(*values)

    stats = time_callable(call, device, TimingConfig(**command["timing"]))
    synchronize(device)
    channel.send(
        stage="timed",
        median_ms=stats.median_ms,
        spread=stats.spread,
        reps=stats.reps,
        method=stats.method,
        times_ms=list(stats.times_ms),
        stream_ms=stats.stream_ms,
        latency_ms=stats.latency_ms,
    )
    if command.get("breakdown", True):  # an interleaved timing asks for it after its last round only
        channel.send(stage="kernels", kernels=kernel_breakdown(call, device), **watch.report())


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


def warm_profiler() -> None:
    """Initialises the profiler's CUDA tracing (CUPTI) once, while this process waits for its job: the
    first profiling session of a process costs seconds, later ones a fraction of that."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()


def main(channel: Channel) -> None:
    """Imports torch first, then waits for the job: a process can be started ahead of its stage.

    The CUDA context and the profiler's CUDA tracing are set up in a shared slot of the device
    (``CUDAGYM_WARMUP_SLOT``, see ``cudagym/gpu_lock.py``), so that none of it happens on a GPU while another
    process times there (the profiler's part was outside the slot until the sixth session; moving it in did
    not change the spread of five ``profile`` calls on the H200, docs/benchmarks.md, but keeps a known
    source of device work out of every timing)."""
    import torch

    if torch.cuda.is_available():
        with warmup_slot(os.environ.pop(WARMUP_SLOT_ENV, "")):
            torch.cuda.init()
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            if os.environ.pop(PROFILER_WARMUP_ENV, "1") != "0":  # "0" under ncu: it needs no breakdown
                warm_profiler()
    watch = Watch()
    channel.send(stage="warm")
    job = json.loads(sys.stdin.readline())
    run(job, channel, watch)
