"""The untrusted candidate process: loads the agent's extension and ``model_new.py`` and runs ``ModelNew`` when the
trusted clock says so. Single-use: a new process for every stage, discarded afterwards.

Protocol. The process reports ``warm`` (torch imported, CUDA initialised) on its private channel, then reads its job
(one stdin line). For ``import`` (a single-file solution's compile) it imports ``model_new.py`` and ends; for ``ncu``
it runs ModelNew once on an input file. Otherwise the job names the stage's control block, the input sets and the
shapes of the outputs (``handshake.py``), and the process serves handshakes:

1. *calibration*, before any of the agent's code exists in the process: every handshake is answered with outputs
   prepared in advance and no work, so the clock measures what a handshake costs by itself;
2. it reports ``load``, builds ModelNew, reports ``ready``;
3. *serving*: for every handshake, ModelNew runs once per call on the call's input set (on cuda its work queued
   behind a wait for the clock's go, before the clock writes the inputs), the outputs are described
   (where they lie, so that the clock reads them itself; what type and shape they have; the aten operators the calls
   dispatched; threads started; trusted functions replaced) and the handshake is marked done;
4. when the clock ends the stage it reports the device time per kernel (cuda) as ``kernels``, then ``done``.

Nothing here times anything or knows why a handshake runs: a handshake looks the same in verification, warm-up and
timing, checked or not. What this process reports is only its word: the clock reads the outputs from this process's
memory and judges them itself, and reads the time from its own clock.
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib.util
import json
import os
import secrets
import sys
import threading
import time
import traceback
from typing import Any

from .common import (
    PROFILER_WARMUP_ENV,
    WARMUP_SLOT_ENV,
    Channel,
    configure_threads,
    describe_exception,
    harness_warnings_ignored,
    load_module,
    synchronize,
    to_device,
    warmup_slot,
)
from .gpulib import CudaDriver, GpuLib, device_view
from .handshake import (
    ARM,
    CALIBRATING,
    CALLS,
    DONE,
    GO,
    MAX_CALLS,
    PROGRESS,
    SERVING,
    SETS,
    STATE,
    WAKE_SOCKET,
    ControlBlock,
    dtype_name,
    dtype_of,
    futex_wait,
    open_inputs,
    span_bytes,
    wake,
)
from .inline_loader import InlineLoader, ask_over_channel
from .protocol import CandidateJob, decode

PR_SET_PTRACER, PR_SET_PTRACER_ANY = 0x59616D61, ctypes.c_ulong(-1)
# the aten operators a call dispatches are recorded on the first call and on a random one in this many after it: the
# recording costs a call tens of microseconds of Python the eager baseline does not pay, so most calls, and the median
# of the timed ones, go without it; a solution that computes with torch on every call is still seen at once
RECORD_ONE_IN = 8
# cpu: how long one wait for the next go sleeps at most before it looks at STATE again (the clock wakes it sooner)
GO_WAIT_S = 0.05


def load_extension(path: str) -> Any:
    """Imports the built extension as the module ``cuda_extension``."""
    spec = importlib.util.spec_from_file_location("cuda_extension", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the extension at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cuda_extension"] = module
    spec.loader.exec_module(module)
    return module


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


def build_model(job: CandidateJob) -> Any:
    import torch

    state = torch.load(job.state_path, weights_only=True)
    InlineLoader(builds=job.inline_builds).install()
    if job.extension:
        load_extension(job.extension)
    model = import_model_new(job.workspace)(*state["init_inputs"])
    model.load_state_dict(state["state_dict"], strict=True)
    model = model.to(job.device)
    if job.eval_mode:
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


def recorder(seen: set[str]) -> Any:
    """A dispatch mode that adds the name of every aten operator dispatched while it is active (from Python or
    C++) to ``seen``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            schema = getattr(func, "_schema", None)
            seen.add(schema.name if schema is not None else str(func))
            return func(*args, **(kwargs or {}))

    return Recorder()


# -- where outputs lie ------------------------------------------------------------------------------------


class Locator:
    """Says where an output tensor's bytes lie so the clock can read them itself: an interprocess handle of the
    device allocation and the offset in it (cuda), or this process's id and the address (cpu)."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        self.driver = CudaDriver() if self.cuda else None
        self._handles: dict[int, str] = {}

    def __call__(self, tensor: Any) -> dict[str, Any]:
        element = tensor.element_size()
        span = span_bytes(list(tensor.shape), list(tensor.stride()), element)
        address = tensor.data_ptr()
        if not self.cuda:
            return {"pid": os.getpid(), "address": address, "span": span}
        assert self.driver is not None
        if span == 0:
            return {"span": 0}
        base, size = self.driver.allocation(address)
        handle = self._handles.get(base)
        if handle is None:
            handle = self._handles[base] = self.driver.export(base)
        return {"handle": handle, "offset": address - base, "span": span, "size": size}


def describe(out: Any, inputs: list[Any], locate: Locator) -> dict[str, Any]:
    """One call's output: its container and, per tensor, exact type, dtype, shape, strides, device, whether it
    shares memory with an input, and where its bytes lie."""
    import torch

    items = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (list, tuple)) else []
    spans = [_span(x) for x in inputs if isinstance(x, torch.Tensor)]
    described = []
    for item in items:
        if not isinstance(item, torch.Tensor):
            described.append({"type": type(item).__name__, "exact": False})
            continue
        span = _span(item)
        entry: dict[str, Any] = {
            "type": type(item).__name__,
            "exact": type(item) is torch.Tensor,
            "dtype": dtype_name(item.dtype),
            "shape": list(item.shape),
            "stride": list(item.stride()),
            "device": item.device.type,
            "aliases_input": any(span[0] < s[1] and s[0] < span[1] for s in spans if span[1] > span[0]),
        }
        try:
            entry["where"] = locate(item)
        except Exception as exc:  # the clock reads nothing, and says the output could not be read
            entry["where_error"] = f"{type(exc).__name__}: {exc}"[:300]
        described.append(entry)
    return {"container": type(out).__name__, "items": described}


def _span(t: Any) -> tuple[int, int]:
    """The byte range of a tensor's storage (empty when it has no storage)."""
    try:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.data_ptr() + storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return 0, 0


# -- serving handshakes ------------------------------------------------------------------------------------


class Link:
    """This process's end of the handshake: the control block, the input sets and how to say done."""

    def __init__(self, spec: dict[str, Any], device: str) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self.block = ControlBlock(spec["control"])
        self.words = self.block.words
        self.wake_path = os.path.join(os.path.dirname(spec["control"]), WAKE_SOCKET)
        self.gpu = GpuLib(spec["gpulib"], device) if self.cuda else None
        if self.gpu is not None:
            self.block.map_for_device(self.gpu)
        self.driver = CudaDriver() if self.cuda else None
        self._opened: dict[str, int] = {}
        self.sets = [open_inputs(s, self._open_device) for s in spec["sets"]]
        self.templates = spec["outputs"]
        self.locate = Locator(device)
        self.last = 0

    def _open_device(self, spec: dict[str, Any]) -> Any:
        assert self.driver is not None
        address = self._opened.get(spec["handle"])
        if address is None:
            address = self._opened[spec["handle"]] = self.driver.open(spec["handle"])
        return device_view(
            address + spec["offset"], spec["nbytes"], dtype_of(spec["dtype"]), spec["shape"], spec["stride"]
        )

    def await_turn(self, state: int) -> int | None:
        """The next handshake's number, or None when the clock moved the stage on (``STATE``). On cuda it spins on
        ``ARM`` (the clock's host writes it); on cpu it sleeps on ``GO`` (the clock writes it while this process is
        frozen and wakes it), so that between its handshakes it runs no code the clock would charge."""
        words, last = self.words, self.last
        word = ARM if self.cuda else GO
        address = self.block.host_address + 8 * word
        while True:
            number = words[word]
            if number != last:
                self.last = number
                return number
            if words[STATE] != state:
                return None
            if not self.cuda:
                futex_wait(address, last, GO_WAIT_S)

    def fail(self, number: int, error: dict[str, Any]) -> None:
        """Says handshake ``number`` failed: the error as its description, then done from the host (on cuda the
        stream's own done may never come)."""
        self.block.write_description(number, {"n": number, "error": error})
        self.words[DONE] = number
        if not self.cuda:
            wake(self.wake_path)

    def serve(self, state: int, run_call: Any, report: Any) -> dict[str, Any] | None:
        """Answers handshakes while ``STATE`` is ``state``: each call is ``run_call(inputs)``; ``report()`` adds to
        the description. Returns the error that ended the serving early, else None."""
        held: list[Any] = []
        while (number := self.await_turn(state)) is not None:
            held.clear()  # the clock has read the last handshake's outputs: they may go
            calls = max(1, min(int(self.words[CALLS]), MAX_CALLS))
            try:
                inputs = [self.sets[int(self.words[SETS + k]) % len(self.sets)] for k in range(calls)]
                if self.gpu is not None:
                    self._queue(number, inputs, run_call, held)
                else:
                    held.extend(run_call(values, k) for k, values in enumerate(inputs))
                described = [describe(out, values, self.locate) for out, values in zip(held, inputs, strict=True)]
                self.block.write_description(number, {"n": number, "calls": described, **report()})
                if self.gpu is None:
                    self.words[DONE] = number
                    wake(self.wake_path)
                else:
                    # nothing else to do until the next turn: waiting here is free, and a fault of this handshake's
                    # kernels (after which its done never comes) is reported at once instead of at the deadline
                    import torch

                    torch.cuda.synchronize(self.device)
            except BaseException as exc:  # the clock hears of it at once (done from the host), then the evaluator
                error = describe_exception(exc)
                self.fail(number, error)
                return error
        return None

    def _queue(self, number: int, inputs: list[Any], run_call: Any, held: list[Any]) -> None:
        """cuda: queues the handshake's calls behind a wait for its go (their inputs are written just before it),
        counting them in ``PROGRESS``, then the done, written by the stream after their work."""
        assert self.gpu is not None
        self.gpu.wait(self.block.device_word(GO), number)
        for k, values in enumerate(inputs):
            held.append(run_call(values, k))
            self.words[PROGRESS] = k + 1
        self.gpu.flag(self.block.device_word(DONE), number)


def _calibration_call(templates: list[dict[str, Any]], device: str) -> Any:
    """The calls of the calibration handshakes: no work, outputs shaped like the reference's made in advance (one
    per call slot), so the clock measures the handshake alone."""
    import torch

    made = []
    for _ in range(MAX_CALLS):
        tensors = [torch.empty(t["shape"], dtype=dtype_of(t["dtype"]), device=device) for t in templates]
        container = templates[0].get("container", "Tensor") if templates else "Tensor"
        made.append(tensors[0] if container == "Tensor" and len(tensors) == 1 else tuple(tensors))
    return lambda _values, k: made[k]


class KernelTrace:
    """Device time per kernel over every call of the stage (cuda), taken by torch's profiler from before the first
    call to the end; the process's own word, like everything it reports."""

    def __init__(self, device: str) -> None:
        self.session: Any = None
        if device.startswith("cuda"):
            from torch.profiler import ProfilerActivity, profile

            with harness_warnings_ignored():
                self.session = profile(activities=[ProfilerActivity.CUDA])
                self.session.__enter__()

    def table(self) -> list[dict[str, Any]]:
        if self.session is None:
            return []
        import torch

        with harness_warnings_ignored():
            self.session.__exit__(None, None, None)
            events = self.session.events()
        totals: dict[str, list[float]] = {}
        for event in events:
            if event.device_type == torch.autograd.DeviceType.CUDA and not event.name.startswith("cudagym_"):
                entry = totals.setdefault(event.name, [0, 0.0])
                entry[0] += 1
                entry[1] += event.device_time
        grand = sum(v[1] for v in totals.values()) or 1.0
        rows = [
            {"name": name[:200], "calls": int(calls), "total_ms": us / 1e3, "share": us / grand}
            for name, (calls, us) in totals.items()
        ]
        rows.sort(key=lambda r: -r["total_ms"])
        return rows[:20]


# -- the stage ---------------------------------------------------------------------------------------


def run(job: CandidateJob, channel: Channel, watch: Watch) -> None:
    import torch

    os.chdir(job.workspace)
    if job.mode == "import":
        channel.send(stage="load")
        try:
            # a single-file solution's load_inline calls are built here, by the trusted builder it asks
            InlineLoader(ask=ask_over_channel(channel)).install()
            import_model_new(job.workspace)
        except BaseException as exc:
            channel.send(stage="load", ok=False, error=describe_exception(exc))
            return
        channel.send(stage="done", ok=True)
        return
    configure_threads(job.threads)
    device = job.device
    if job.mode == "ncu":
        run_once_for_ncu(job, channel, device)
        return
    try:
        if job.link is None:
            raise ValueError("a serving job without a link to the clock")
        link = Link(job.link, device)
        channel.send(stage="calibrating")
        calibrated = link.serve(CALIBRATING, _calibration_call(link.templates, device), dict)
    except BaseException as exc:
        channel.send(stage="attach", ok=False, error=describe_exception(exc))
        return
    if calibrated is not None:
        channel.send(stage="attach", ok=False, error=calibrated)
        return
    model = loaded(job, channel)
    if model is None:
        return
    channel.send(stage="ready")
    seen: set[str] = set()
    record = recorder(seen)
    calls = 0

    def call(values: list[Any], _k: int) -> Any:
        nonlocal calls
        calls += 1
        with torch.no_grad():
            if calls == 1 or secrets.randbelow(RECORD_ONE_IN) == 0:
                with record:
                    return model(*values)
            return model(*values)

    def report() -> dict[str, Any]:
        ops = sorted(seen)
        seen.clear()
        return {"ops": ops, **watch.report()}

    trace = KernelTrace(device)
    error = link.serve(SERVING, call, report)
    if error is not None:
        channel.send(stage="run", ok=False, error=error)
        return
    try:
        synchronize(device)
        channel.send(stage="kernels", kernels=trace.table())
    except BaseException as exc:
        channel.send(stage="run", ok=False, error=describe_exception(exc))
        return
    channel.send(stage="done", ok=True)


def loaded(job: CandidateJob, channel: Channel) -> Any:
    """ModelNew built from the job (``load`` reported before, its error instead of it), or None when it failed."""
    channel.send(stage="load")
    try:
        return build_model(job)
    except BaseException as exc:
        channel.send(stage="load", ok=False, error=describe_exception(exc))
        return None


def run_once_for_ncu(job: CandidateJob, channel: Channel, device: str) -> None:
    """One forward on the inputs in ``job.inputs_file`` (the run Nsight Compute wraps)."""
    import torch

    model = loaded(job, channel)
    if model is None:
        return
    channel.send(stage="run")
    try:
        dtype = getattr(torch, job.dtype)
        values = to_device(torch.load(job.inputs_file, weights_only=True), device, dtype)
        with torch.no_grad():
            model(*values)
        synchronize(device)
    except BaseException as exc:
        channel.send(stage="run", ok=False, error=describe_exception(exc))
        return
    channel.send(stage="done", ok=True)


def warm_profiler() -> None:
    """Initialises the profiler's CUDA tracing (CUPTI) once, while this process waits for its job: the
    first profiling session of a process costs seconds, later ones a fraction of that."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with harness_warnings_ignored(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()


def allow_the_clock_to_read() -> None:
    """Lets the trusted clock read this process's memory (cpu outputs) where Yama restricts ptrace to ancestors."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(channel: Channel) -> None:
    """Imports torch first, then waits for the job: a process can be started ahead of its stage.

    The CUDA context and the profiler's CUDA tracing are set up in a shared slot of the device
    (``CUDAGYM_WARMUP_SLOT``, see ``cudagym/gpu_lock.py``), so that none of it happens on a GPU while another
    process times there."""
    import torch

    allow_the_clock_to_read()
    # a native crash (a segfault in the agent's kernel) prints the Python line that called into it to the output the
    # agent reads; the process still dies by its signal (faulthandler re-raises it), which decides the verdict
    faulthandler.enable(all_threads=False)
    if torch.cuda.is_available():
        with warmup_slot(os.environ.pop(WARMUP_SLOT_ENV, "")):
            torch.cuda.init()
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            if os.environ.pop(PROFILER_WARMUP_ENV, "1") != "0":  # "0" under ncu: it needs no breakdown
                warm_profiler()
    watch = Watch()
    channel.send(stage="warm")
    try:
        run(decode(CandidateJob, json.loads(sys.stdin.readline())), channel, watch)
    except BaseException as exc:  # a harness fault: reported, never silent
        channel.send(stage="run", ok=False, error=describe_exception(exc), harness=traceback.format_exc()[-2000:])
    # single-use: no teardown (a CUDA context that faulted, or a profiler session still open, can hang it)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)
