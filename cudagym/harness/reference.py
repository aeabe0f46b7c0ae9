"""The trusted reference process: generates inputs from secret seeds, keeps the reference outputs in its
own memory, compares candidate outputs against them, and times the eager and torch.compile baselines.

It runs only the task's reference code, never the agent's. It serves one JSON command per stdin line
and answers on the private channel. It is also the trusted clock of every candidate stage (``clock.py``): it writes
each call's fresh inputs, times the candidate's calls on its own clock, reads the outputs from the candidate's memory
and compares them (``stages.py``). The candidate receives weights as a file and inputs in shared memory the clock
writes, and never sees a seed or a reference output.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import threading
import time
from typing import Any

from .clock import CandidateSilent, Clock, require_time_slicing
from .common import (
    Channel,
    configure_threads,
    describe_exception,
    load_module,
    map_tensors,
    seed_everything,
    synchronize,
    to_device,
)
from .compare import flatten
from .compile_backend import SlotAfterCodegen
from .protocol import (
    Attached,
    Bandwidth,
    BaselineTimed,
    Calibrated,
    CompileState,
    Done,
    ErrorReport,
    Failed,
    HeldSets,
    Loaded,
    MemoryUse,
    Prepared,
    Reply,
    ShortcutReport,
    Timed,
    Verified,
    arguments,
    decode_request,
    encode_reply,
)
from .shortcuts import shortcut_report
from .stages import time_candidate, verify
from .timing import TimingConfig, time_callable

LARGE_MAGNITUDES = (1e2, 1e3)  # "large" inputs: signed normal values times a magnitude drawn log-uniformly in here
KEEP_CACHED = 1024**3  # unused device memory the reference process keeps reserved (see ``drop``)
# the inductor compiles the reference's kernels in this process, without its pool of compile workers (one per core):
# a task's handful of kernels compiled faster that way on the H200 (first compiled call 1.89 s against 2.36 s,
# benchmarks/compile_cost.py), and sixteen environments do not start sixteen pools; the generated code is the same
INDUCTOR_COMPILE_THREADS = 1


def _give_back_cached_memory() -> None:
    """Gives the device memory the caching allocator keeps unused back to the device once it exceeds
    ``KEEP_CACHED``: after a command whose temporaries are gone when it answers (an input set dropped, ``drop``; a
    stage's clock closed, ``detach``: its input sets, staging copies and flush buffer; the baselines' timing and its
    flush buffer; the input probe's and the task check's input sets, outputs and shortcut outputs; a verify's or a
    timing's reference outputs and float64 twin outputs; the previous task at ``load``), so that an idle reference
    process holds no command's peak. Never inside a timed interval: each such command has finished its device work
    when this runs (``empty_cache`` synchronises the device)."""
    import torch

    if torch.cuda.is_initialized() and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > KEEP_CACHED:
        torch.cuda.empty_cache()


class ReferenceServer:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.module: Any = None
        self.model: Any = None
        self.device = "cpu"
        self.dtype: Any = None
        self.inputs: dict[str, Any] = {}
        self.compiled: Any = None
        self._compiling: threading.Thread | None = None  # a torch.compile running in the background
        self._compile_error: BaseException | None = None
        self.compile_threads: int | None = None  # the inductor compile threads of the last compile
        # the last compile's seconds: waiting for its imports (the preload's or its own), tracing and building the
        # model, waiting for the device's shared slot, then running it once (``compile_backend``); and the step a
        # compile in the background is at
        self.compile_seconds: dict[str, float] = {}
        self.compile_stage = ""
        self._preloading: threading.Thread | None = None  # imports begun by ``preload``
        self._torch_imported = threading.Event()
        self.clock: Clock | None = None  # the trusted clock of the candidate stage in progress

    # -- commands ----------------------------------------------------------------------------------

    def preload(self, compiler: bool = False, device: str = "cpu") -> Done:
        """Starts importing torch and, with ``compiler``, what torch.compile builds with (dynamo, the inductor
        and, on cuda, its Triton code generation) in a thread of this process, and answers at once.

        The imports then overlap the task's loading instead of following it: importing dynamo and the inductor
        took 6-9.5 s of a cold cycle's critical path on the H200 (docs/benchmarks.md). Every later command waits
        for the part it needs (``load`` for torch, a compile for all of it) rather than importing beside the
        thread. A failed import is left for the command that needs the module to raise."""
        if self._preloading is None:
            self._preloading = threading.Thread(
                target=self._preload, args=(compiler, device), name="reference-preload", daemon=True
            )
            self._preloading.start()
        return Done()

    def _preload(self, compiler: bool, device: str) -> None:
        try:
            import torch

            self._torch_imported.set()
            if compiler:
                import torch._dynamo
                import torch._inductor.compile_fx

                if device.startswith("cuda"):
                    import torch._inductor.codegen.triton  # noqa: F401
        except Exception:  # the command that needs the module imports it again and reports why it failed
            pass
        finally:
            self._torch_imported.set()

    def _await_preload(self, torch_only: bool = False) -> None:
        """Waits for the preload's imports (only its ``import torch`` with ``torch_only``)."""
        if self._preloading is None:
            return
        if torch_only:
            self._torch_imported.wait()
        else:
            self._preloading.join()

    def load(self, source: str, device: str, dtype: str, weight_seed: int, threads: int = 0) -> Loaded:
        """Builds the reference Model with weights from ``weight_seed``, dropping the previous task's state.

        ``leaked_bytes``: device memory still allocated once everything of the previous task is dropped
        (input buffers that a killed candidate still mapped stay reserved); the evaluator restarts this
        process when it grows."""
        self._await_preload(torch_only=True)
        import torch

        self._await_background_compile()  # its model is about to go; its error no longer matters
        self._compile_error = None
        self.inputs.clear()
        self.detach()
        self.model = self.compiled = None
        self.model64, self.model64_error = None, ""  # the float64 twin, built on first use (``_float64_model``)
        leaked = 0
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.ipc_collect()
            leaked = torch.cuda.memory_allocated()
            _give_back_cached_memory()
        configure_threads(threads)
        _plain_fp32_arithmetic()
        self.device = device
        self.dtype = getattr(torch, dtype)
        self.module = load_module("reference_model", source, "model.py")
        seed_everything(weight_seed)
        init_inputs = self.module.get_init_inputs()
        seed_everything(weight_seed)
        with torch.no_grad():
            model = self.module.Model(*init_inputs)
        model = model.to(device)
        if self.dtype != torch.float32:
            model = model.to(self.dtype)
        self.model = model.eval() if _has_dropout(model) else model
        self.init_inputs = init_inputs
        return Loaded(eval_mode=not self.model.training, leaked_bytes=leaked, peak_bytes_per_s=_peak_bandwidth(device))

    def export_state(self, path: str) -> Done:
        """Writes the weights and constructor arguments the candidate needs (no seed, no outputs)."""
        import torch

        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        torch.save({"state_dict": state, "init_inputs": _cpu(self.init_inputs)}, path)
        return Done()

    def draw_inputs(self, seed: int, kind: str) -> list[Any]:
        """One input set from ``seed``: the task's own distribution ("task"), or with every floating input
        replaced by signed standard-normal values of the same shape ("normal"), or by such values times one magnitude
        between 1e2 and 1e3 drawn from the seed ("large": numerically unsafe shortcuts such as a softmax without the
        max subtraction overflow on them)."""
        import torch

        seed_everything(seed)
        with torch.device(self.device):  # drawn where they are used: no host-side generation of GPU-sized data
            inputs = list(self.module.get_inputs())
        scale = _large_magnitude() if kind == "large" else 1.0
        if kind in ("normal", "large"):
            inputs = [
                torch.randn_like(x) * scale if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                for x in inputs
            ]
        return inputs

    def prepare(self, key: str, seed: int, kind: str, path: str = "") -> Prepared:
        """Draws input set ``key`` from ``seed`` and keeps it here (for the baselines); with ``path``, also writes it
        there (the inputs of a run Nsight Compute wraps). Returns the bytes every correct solution reads and writes
        (the inputs and the reference's outputs: the speed-of-light bound) and whether the output is finite."""
        import torch

        inputs = to_device(self.draw_inputs(seed, kind), self.device, self.dtype)
        with torch.no_grad():
            out = self.model(*inputs)
        synchronize(self.device)
        self.inputs[key] = inputs
        moved = sum(x.nbytes for x in [*inputs, *(flatten(out) or [])] if isinstance(x, torch.Tensor))
        if path:
            torch.save(_cpu(inputs), path)
        return Prepared(finite=_all_finite(out), bytes=moved)

    # -- a candidate stage through the trusted clock (``clock.py``, ``stages.py``) ---------------------------

    def _drawn(self, seed: int, kind: str) -> list[Any]:
        return to_device(self.draw_inputs(seed, kind), self.device, self.dtype)

    def _expected(self, inputs: list[Any], precise: bool) -> tuple[Any, Any]:
        """The reference's output on ``inputs`` and, with ``precise``, its float64 twin's on the same values cast to
        float64 (None where there is no twin: a task not in fp32, or a model float64 cannot run)."""
        import torch

        with torch.no_grad():
            expected = self.model(*inputs)
            return expected, self._float64_output(inputs) if precise else None

    def _float64_output(self, inputs: list[Any]) -> Any:
        """The float64 twin's output on ``inputs`` (floating ones cast to float64), or None without a twin."""
        import torch

        twin = self._float64_model()
        if twin is None:
            return None
        wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        try:
            return twin(*wide)
        except Exception as exc:  # e.g. an op with no float64 kernel: the task's tolerance alone judges this task
            self.model64, self.model64_error = None, f"{type(exc).__name__}: {exc}"
            return None

    def _float64_model(self) -> Any:
        """The float64 twin of an fp32 reference (same weights, ``copy.deepcopy(model).double()``), built on the first
        precision check of the task, so that only fp32 tasks checked for precision hold their weights twice."""
        import torch

        if self.model64 is None and not self.model64_error:
            if self.dtype != torch.float32:
                self.model64_error = f"the task computes in {self.dtype}, not float32"
            else:
                self.model64 = copy.deepcopy(self.model).double()
        return self.model64

    def attach(
        self,
        exchange: str,
        root_pid: int,
        gpu_library: str = "",
        symbols_dir: str = "",
        hang_s: float = 0.0,
    ) -> Attached:
        """Sets up the clock for a candidate stage: its control block and input sets in the candidate's private
        ``exchange`` folder (or shared device memory); ``root_pid``: the candidate's outermost process;
        ``symbols_dir``: where the cpu sampler caches libraries' symbols; ``hang_s``: the floor of a handshake's hang
        bound (``Clock.hang_bound_s``; 0: none). Returns what the candidate's job carries to
        reach the clock."""
        self.detach()
        if self.device.startswith("cuda"):
            problem = require_time_slicing()
            if problem:
                raise RuntimeError(problem)
        self.clock = Clock(
            self.model,
            self._drawn,
            self.device,
            exchange,
            root_pid,
            gpu_library,
            symbols_dir,
            expect=self._expected,
            hang_s=hang_s,
        )
        return Attached(link=self.clock.link_spec(), max_calls=self.clock.max_calls, bytes=self.clock.moved_bytes)

    def _stage_clock(self) -> Clock:
        if self.clock is None:
            raise RuntimeError("no candidate is attached")
        return self.clock

    def calibrate(self, seconds: float) -> Calibrated:
        """Measures what a handshake costs with the candidate before the agent's code is loaded into it."""
        try:
            calibration = self._stage_clock().calibrate(time.monotonic() + seconds)
        except CandidateSilent as exc:
            return Calibrated(silent=str(exc))
        return Calibrated(total_us={str(k): v for k, v in calibration.total_us.items()})

    def verify_candidate(
        self,
        plan: list[tuple[int, str]],
        repeat_first: bool,
        atol: float,
        rtol: float,
        seconds: float,
        precision: str = "off",
    ) -> Verified:
        """The candidate's verification (``stages.verify``): one checked call per ``(seed, kind)`` of ``plan``;
        ``precision`` ("fp32", "tf32" or "off"): the bound against the float64 twin (``compare.compare_precision``)."""
        try:
            deadline = time.monotonic() + seconds
            return verify(self._stage_clock(), plan, repeat_first, atol, rtol, deadline, precision)
        except CandidateSilent as exc:
            return Verified(silent=str(exc))
        finally:
            _give_back_cached_memory()  # the checks' reference and float64 outputs (the clock's own sets stay)

    def time_candidate(
        self, timing: dict[str, Any], atol: float, rtol: float, seconds: float, precision: str = "off"
    ) -> Timed:
        """The candidate's timing (``stages.time_candidate``), with eager re-validated beside it; ``precision``: as
        for ``verify_candidate``."""
        import torch

        model = self.model

        def eager(*inputs: Any) -> None:
            with torch.no_grad():
                model(*inputs)

        try:
            return time_candidate(
                self._stage_clock(), TimingConfig(**timing), eager, atol, rtol, time.monotonic() + seconds, precision
            )
        except CandidateSilent as exc:
            return Timed(silent=str(exc))
        finally:
            _give_back_cached_memory()  # eager's and the checked calls' outputs, once every call is timed

    def end_candidate(self) -> Done:
        """Lets the candidate leave its serving loop (it then reports its last words to the evaluator)."""
        if self.clock is not None:
            self.clock.end()
        return Done()

    def detach(self) -> Done:
        """Releases the stage's clock: its mappings, buffers and files."""
        clock, self.clock = self.clock, None
        if clock is not None:
            clock.end()
            clock.close()
            del clock
            _give_back_cached_memory()
        return Done()

    def compile_reference(self, key: str, background: bool = False, slot: str = "") -> Done:
        """Compiles the reference with torch.compile and runs it once on input set ``key`` (code generation
        is CPU work: done before the device is reserved for timing).

        ``background``: compiles in a thread of this process and answers at once, so that the checks of a first
        verify are served meanwhile instead of waiting seconds for the compiler; every later use of the compiled
        model (this command, ``baseline``, ``await_compile``) waits for it and raises its error. ``slot``
        ("LOCK:GATE", ``cudagym.gpu_lock``): the device's shared slot, which the compile takes once the model's code
        is generated and holds through its first run (the model and the inductor's benchmarks of kernel variants on
        the device; ``compile_backend``): no timing of any process overlaps that device work, so none need await the
        compile, and none waits for its code generation either."""
        if background:
            if self.compiled is None and self._compiling is None:
                inputs = self.inputs[key]  # held by the thread: dropping ``key`` meanwhile is safe
                self._compiling = threading.Thread(
                    target=self._compile_in_background, args=(inputs, slot), name="reference-compile", daemon=True
                )
                self._compiling.start()
            return Done()
        self.await_compile()
        if self.compiled is None:
            self._compile(self.inputs[key])
        else:
            self._run_compiled(self.inputs[key])
        return Done()

    def compile_done(self) -> CompileState:
        """Whether no torch.compile runs in the background (its error, if any, stays for the next use) and, if
        one does, its ``stage`` ("imports", "slot": waiting for the device's shared slot, "build"); with how many
        inductor compile threads this process compiles (None before its first compile) and the last compile's
        seconds (the same three steps)."""
        done = self._compiling is None or not self._compiling.is_alive()
        return CompileState(
            done=done,
            stage="done" if done else self.compile_stage,
            threads=self.compile_threads,
            seconds=dict(self.compile_seconds),
        )

    def await_compile(self) -> Done:
        """Waits for a background compile; its failure becomes this command's."""
        self._await_background_compile()
        error, self._compile_error = self._compile_error, None
        if error is not None:
            raise error
        return Done()

    def _await_background_compile(self) -> None:
        thread, self._compiling = self._compiling, None
        if thread is not None:
            thread.join()

    def _compile(self, inputs: list[Any], slot: str = "") -> None:
        """torch.compile of the model and its first call on ``inputs``; ``slot``: see ``compile_reference``."""
        start = time.perf_counter()
        self.compile_stage = "imports"
        self.compile_seconds = {}  # a compile that fails leaves none
        self._await_preload()
        import torch
        import torch._dynamo
        import torch._inductor.compile_fx
        import torch._inductor.config

        imported = time.perf_counter()
        # set in the thread that compiles: torch's config overrides are per thread
        torch._inductor.config.compile_threads = INDUCTOR_COMPILE_THREADS
        torch._dynamo.reset()
        backend = SlotAfterCodegen(slot, on_stage=self._compile_at)
        compiled = torch.compile(self.model, backend=backend)
        self.compile_stage = "build"
        try:
            self._run_compiled(inputs, compiled)
        finally:
            backend.release()
        ran = time.perf_counter()
        built = backend.built_at or imported  # a model dynamo does not trace builds nothing and runs eagerly
        slotted = backend.slotted_at or built
        self.compiled = compiled
        self.compile_threads = torch._inductor.config.compile_threads  # as the inductor left it after compiling
        self.compile_seconds = {
            "imports": imported - start,
            "build": built - imported,
            "slot": slotted - built,
            "run": ran - slotted,
        }

    def _compile_at(self, stage: str) -> None:
        self.compile_stage = stage

    def _compile_in_background(self, inputs: list[Any], slot: str) -> None:
        try:
            self._compile(inputs, slot)
        except BaseException as exc:  # raised by the next command that needs the compiled model
            self._compile_error = exc

    def _run_compiled(self, inputs: list[Any], compiled: Any = None) -> None:
        import torch

        model = self.compiled if compiled is None else compiled
        with torch.no_grad():
            model(*inputs)
        synchronize(self.device)

    def baseline(self, key: str, mode: str, timing: dict[str, Any]) -> BaselineTimed:
        """Times eager or torch.compile on input set ``key`` by the candidate's method, never while a
        torch.compile runs in this process's background: its code generation holds the interpreter between
        the timed calls (eager timed beside it on the H200 came out 1.5-7x slower than alone)."""
        import torch

        self._await_background_compile()  # its error stays for the command that uses the compiled model
        model = self.model
        if mode == "compile":
            self.await_compile()
            if self.compiled is None:
                self._compile(self.inputs[key])
            model = self.compiled
        inputs = self.inputs[key]

        def call() -> None:
            with torch.no_grad():
                model(*inputs)

        stats = time_callable(call, self.device, TimingConfig(**timing))
        _give_back_cached_memory()  # the timed calls' outputs and the flush buffer, after the timing
        return BaselineTimed(
            median_ms=stats.median_ms,
            spread=stats.spread,
            reps=stats.reps,
            method=stats.method,
            times_ms=list(stats.times_ms),
            stream_ms=stats.stream_ms,
            latency_ms=stats.latency_ms,
        )

    def check_task(
        self, seeds: list[int], kinds: list[str], atol: float, rtol: float, timing: dict[str, Any] | None = None
    ) -> ShortcutReport:
        """Properties of the reference itself (``cudagym tasks check``): for each input set the output twice
        (determinism), whether it is finite and whether a shortcut passes (``shortcuts.shortcut_report``); then the
        eager time on the last set, or, with no ``timing``, that set kept as input set ``check`` for a ``baseline``."""
        report, last = shortcut_report(self.model, self._drawn, seeds, kinds, atol, rtol, twice=True)
        self.inputs["check"] = last
        if timing is None:
            return report
        self._await_background_compile()  # timed alone (see ``baseline``)
        eager = time_callable(lambda: self.model(*self.inputs["check"]), self.device, TimingConfig(**timing))
        self.inputs.pop("check", None)
        del last
        _give_back_cached_memory()
        return dataclasses.replace(report, eager_ms=eager.median_ms)

    def shortcuts(self, seeds: list[int], kinds: list[str], atol: float, rtol: float) -> ShortcutReport:
        """Whether a shortcut passes on one input set per ``(seed, kind)`` (``shortcuts.shortcut_report``): the input
        probe that decides which input kinds verification draws (``cudagym/input_probe.py``)."""
        report, _ = shortcut_report(self.model, self._drawn, seeds, kinds, atol, rtol, twice=False)
        _give_back_cached_memory()  # every probed input set and its outputs are gone
        return report

    def drop(self, key: str) -> Done:
        """Forgets input set ``key`` and gives the device memory it held back to the device once more than
        ``KEEP_CACHED`` lies unused: the caching allocator would otherwise keep every stage's peak reserved
        (14-40 GB per reference process of a GPU-sized task on the H200, which ran sixteen environments out of
        memory), while small tasks keep their blocks and skip the cost of allocating them again."""
        self.inputs.pop(key, None)
        _give_back_cached_memory()
        return Done()

    def host_bandwidth(self, nbytes: int) -> Bandwidth:
        """The host's bandwidth measured now for a working set of ``nbytes`` (``_copy_bandwidth``): asked when a
        cpu profile would fail the speed-of-light bound taken at load, since a copy timed while the host was
        busy, or one larger than the caches that the task's data fits in, reads low."""
        return Bandwidth(bytes_per_s=_copy_bandwidth(nbytes))

    def memory(self) -> MemoryUse:
        """The device memory this process's caching allocator holds now (``reserved_bytes``) and the most it has held
        since the process started (``peak_reserved_bytes``: every command's peak, the stages' included); 0 on cpu or
        before the device is used. The machine pool admits evaluators by it (``cudagym/pool/admission.py``)."""
        self._await_preload(torch_only=True)
        import torch

        if not torch.cuda.is_initialized():
            return MemoryUse(reserved_bytes=0, peak_reserved_bytes=0)
        return MemoryUse(
            reserved_bytes=torch.cuda.memory_reserved(), peak_reserved_bytes=torch.cuda.max_memory_reserved()
        )

    def held(self) -> HeldSets:
        """The names of the input sets this process holds (each a share of device memory)."""
        return HeldSets(keys=sorted(self.inputs))

    def serve(self) -> None:
        """Answers each request on stdin (``protocol.py``) until ``shutdown`` or the end of stdin: a request that
        raised (or did not fit the protocol) is answered with ``Failed``, and the process goes on serving."""
        for line in sys.stdin:
            if not line.strip():
                continue
            reply: Reply
            try:
                request = decode_request(json.loads(line))
                if request.command == "shutdown":
                    self.channel.send(**encode_reply(Done()))
                    return
                reply = getattr(self, request.command)(**arguments(request))
            except Exception as exc:
                reply = Failed(ErrorReport(**describe_exception(exc)))
            self.channel.send(**encode_reply(reply))


def _cpu(value: Any) -> Any:
    return map_tensors(value, lambda tensor: tensor.detach().cpu())


def _all_finite(value: Any) -> bool:
    import torch

    items = flatten(value) or []
    return all(bool(torch.isfinite(v).all()) for v in items if isinstance(v, torch.Tensor) and v.is_floating_point())


HOST_BANDWIDTH_MARGIN = 2.0  # the host's bound: twice the fastest copy this process makes (no datasheet to read)
_HOST_BANDWIDTH: list[float] = []


def _host_bandwidth() -> float:
    """The host's bound at load: ``_copy_bandwidth`` of 128 MiB (beyond the caches), measured once per process."""
    if not _HOST_BANDWIDTH:
        _HOST_BANDWIDTH.append(_copy_bandwidth(128 * 1024 * 1024))
    return _HOST_BANDWIDTH[0]


def _copy_bandwidth(nbytes: int, budget_s: float = 0.05) -> float:
    """Bytes/s moved by the fastest copy of ``nbytes / 2`` bytes into as many (read plus write: a working set of
    ``nbytes``, at least 64 KiB, at most 128 MiB) over at least five copies and ``budget_s`` seconds, times
    ``HOST_BANDWIDTH_MARGIN`` (a copy falls short of the memory's peak; the bound must not fail honest code).

    Each copy is charged like a cpu candidate's call (``cputime``): the run time of this thread, or of all this
    process's threads over the threads torch may use, whichever is more; or its wall-clock time where that is less
    (what a copy is charged for a moment it waits for a core would make a busy host's bound too low, failing
    honest code whose own calls are charged only the time they ran)."""
    import torch

    half = max(32 * 1024, min(nbytes, 128 * 1024 * 1024) // 2)
    src = torch.ones(half // 4)
    dst = torch.empty_like(src)
    threads = max(1, torch.get_num_threads())
    best = float("inf")
    start = time.perf_counter()
    copies = 0
    while copies < 5 or time.perf_counter() - start < budget_s:
        began, own, process = time.perf_counter(), time.thread_time(), time.process_time()
        dst.copy_(src)
        wall = time.perf_counter() - began
        charged = max(time.thread_time() - own, (time.process_time() - process) / threads)
        best = min(best, wall, charged if charged > 0 else wall)
        copies += 1
        if copies >= 10_000:
            break
    return HOST_BANDWIDTH_MARGIN * 2 * src.nbytes / max(best, 1e-9)


def _peak_bandwidth(device: str) -> float | None:
    """The memory's bandwidth in bytes/s: on cuda the device's theoretical one (double data rate x bus width), on
    cpu a measured one (``_host_bandwidth``)."""
    import torch

    if not device.startswith("cuda"):
        return _host_bandwidth()
    props = torch.cuda.get_device_properties(device)
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    bus_bits = getattr(props, "memory_bus_width", 0) or 0
    return 2.0 * clock_khz * 1e3 * bus_bits / 8 if clock_khz and bus_bits else None


def _plain_fp32_arithmetic() -> None:
    """Plain fp32 in this process: no TF32 in cuBLAS or cuDNN (torch's default lets cuDNN convolutions round their
    inputs to TF32), so the reference's fp32 outputs, its own error against the float64 twin and the eager baselines
    are those of fp32 arithmetic."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def _large_magnitude() -> float:
    """A magnitude between ``LARGE_MAGNITUDES``, log-uniform, from torch's (seeded) CPU generator."""
    import torch

    low, high = LARGE_MAGNITUDES
    return low * (high / low) ** float(torch.rand(()))


def _has_dropout(model: Any) -> bool:
    """Dropout makes a reference stochastic; such modules are evaluated in eval mode."""
    import torch

    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in model.modules())
