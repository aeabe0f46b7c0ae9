"""The trusted reference process: generates inputs from secret seeds, keeps the reference outputs in its
own memory, compares candidate outputs against them, and times the eager and torch.compile baselines.

It runs only the task's reference code, never the agent's. It serves one JSON command per stdin line
and answers on the private channel. The candidate process receives weights as a file and inputs as a
file or through shared device buffers (``transfer.py``), and never sees a seed or a reference output.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from typing import Any

from common import (
    Channel,
    configure_threads,
    describe_exception,
    load_module,
    seed_everything,
    synchronize,
    to_device,
    warmup_slot,
)
from timing import TimingConfig, time_callable
from transfer import SharedBuffers, encode_items, poison, same_values

KEEP_CACHED = 1024**3  # unused device memory the reference process keeps reserved (see ``drop``)
# the inductor compiles the reference's kernels in this process, without its pool of compile workers (one per core):
# a task's handful of kernels compiled faster that way on the H200 (first compiled call 1.89 s against 2.36 s,
# benchmarks/compile_cost.py), and sixteen environments do not start sixteen pools; the generated code is the same
INDUCTOR_COMPILE_THREADS = 1


class ReferenceServer:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.module: Any = None
        self.model: Any = None
        self.device = "cpu"
        self.dtype: Any = None
        self.inputs: dict[str, Any] = {}
        self.outputs: dict[str, Any] = {}
        self.compiled: Any = None
        self._compiling: threading.Thread | None = None  # a torch.compile running in the background
        self._compile_error: BaseException | None = None
        self.compile_threads: int | None = None  # the inductor compile threads of the last compile
        # the last compile's seconds: waiting for its imports (the preload's or its own), for the device's shared
        # slot, then building and running the model once; and the step a compile in the background is at
        self.compile_seconds: dict[str, float] = {}
        self.compile_stage = ""
        self._preloading: threading.Thread | None = None  # imports begun by ``preload``
        self._torch_imported = threading.Event()
        self.transport: dict[str, str] = {}
        self.kept: dict[str, list[Any]] = {}
        self.shared: SharedBuffers | None = None

    # -- commands ----------------------------------------------------------------------------------

    def preload(self, compiler: bool = False, device: str = "cpu") -> dict[str, Any]:
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
        return {"ok": True}

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

    def load(self, source: str, device: str, dtype: str, weight_seed: int, threads: int = 0) -> dict[str, Any]:
        """Builds the reference Model with weights from ``weight_seed``, dropping the previous task's state.

        ``leaked_bytes``: device memory still allocated once everything of the previous task is dropped
        (shared buffers that a killed candidate still mapped stay reserved); the evaluator restarts this
        process when it grows."""
        self._await_preload(torch_only=True)
        import torch

        self._await_background_compile()  # its model is about to go; its error no longer matters
        self._compile_error = None
        self.inputs.clear()
        self.outputs.clear()
        self.transport.clear()
        self.kept.clear()
        self.model = self.compiled = None
        leaked = 0
        if self.shared is not None:
            self.shared.release()
            leaked = torch.cuda.memory_allocated()
        configure_threads(threads)
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
        return {
            "ok": True,
            "eval_mode": not self.model.training,
            "leaked_bytes": leaked,
            "peak_bytes_per_s": _peak_bandwidth(device),
        }

    def export_state(self, path: str) -> dict[str, Any]:
        """Writes the weights and constructor arguments the candidate needs (no seed, no outputs)."""
        import torch

        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        torch.save({"state_dict": state, "init_inputs": _cpu(self.init_inputs)}, path)
        return {"ok": True}

    def draw_inputs(self, seed: int, kind: str) -> list[Any]:
        """One input set from ``seed``: the task's own distribution ("task"), or with every floating input
        replaced by signed standard-normal values of the same shape ("normal")."""
        import torch

        seed_everything(seed)
        with torch.device(self.device):  # drawn where they are used: no host-side generation of GPU-sized data
            inputs = list(self.module.get_inputs())
        if kind == "normal":
            inputs = [
                torch.randn_like(x) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs
            ]
        return inputs

    def prepare(
        self, key: str, seed: int, kind: str, transport: str, path: str = "", keep_output: bool = True
    ) -> dict[str, Any]:
        """Draws input set ``key`` from ``seed``, computes and keeps its reference output, and hands the
        inputs over: written to ``path`` ("file") or into the shared input buffers ("ipc"), whose output
        buffers are then poisoned. A private copy of the inputs stays here (baselines, unchanged-inputs
        check). ``keep_output=False``: the set is only timed, its reference output is not kept (device
        memory). Returns how the candidate finds its inputs and where it puts its outputs."""
        import torch

        inputs = to_device(self.draw_inputs(seed, kind), self.device, self.dtype)
        with torch.no_grad():
            out = self.model(*inputs)
        synchronize(self.device)
        self.inputs[key] = inputs
        self.outputs[key] = _detach(out)
        self.transport[key] = transport
        finite = _all_finite(out)
        moved = sum(x.nbytes for x in [*inputs, *(_flatten(out) or [])] if isinstance(x, torch.Tensor))
        spec = self._share(key, inputs) if transport == "ipc" and self.device.startswith("cuda") else None
        if not keep_output:
            self.outputs.pop(key, None)
        if spec is not None:
            return {"ok": True, "finite": finite, "bytes": moved, "transport": "ipc", **spec}
        self.transport[key] = "file"
        torch.save(_cpu(inputs), path)
        return {
            "ok": True,
            "finite": finite,
            "bytes": moved,
            "transport": "file",
            "inputs": {"file": path},
            "output": {"file": path + ".out"},
        }

    def _share(self, key: str, inputs: list[Any]) -> dict[str, Any] | None:
        """Copies ``inputs`` into the shared buffers and poisons the output buffers; None when an input or
        an output is neither a device tensor nor a JSON scalar (that set travels as a file)."""
        import torch

        expected = _flatten(self.outputs[key])
        if not expected or not all(isinstance(t, torch.Tensor) and t.is_cuda for t in expected):
            return None
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        if not all(t.is_cuda for t in tensors):
            return None
        if self.shared is None:
            self.shared = SharedBuffers()
        buffers, specs = self.shared.place("inputs", tensors)
        described = iter(specs)
        items = encode_items(inputs, lambda _t: next(described))
        if items is None:
            return None
        for buffer, tensor in zip(buffers, tensors, strict=True):
            buffer.copy_(tensor)
        receivers, out_specs = self.shared.place("outputs", expected)
        for buffer, tensor in zip(receivers, expected, strict=True):
            poison(buffer, tensor)
        synchronize(self.device)
        return {"inputs": {"ipc": items}, "output": {"ipc": out_specs}}

    def compare(
        self,
        key: str,
        atol: float,
        rtol: float,
        index: int,
        meta: dict[str, Any] | None = None,
        keep: bool = False,
        same_as: str = "",
    ) -> dict[str, Any]:
        """Judges the candidate's output for input set ``key`` against the kept reference output.

        ``meta`` is what the candidate reported about its output (container, and per tensor its exact
        type, shape, dtype, device; with the file transport the path it wrote). With the ipc transport
        the values are read from the shared output buffers, and the shared inputs are checked against
        the private copy (``inputs_unchanged``). ``keep`` keeps this output; ``same_as`` names a kept
        output of an input set drawn from the same seed, and reports whether the two are bitwise equal
        (``deterministic``).
        """
        import torch

        extra: dict[str, Any] = {}
        meta = meta or {}
        if self.transport.get(key) == "ipc":
            assert self.shared is not None
            private = [x for x in self.inputs[key] if isinstance(x, torch.Tensor)]
            synchronize(self.device)
            extra["inputs_unchanged"] = all(same_values(a, b) for a, b in zip(self.shared.inputs, private, strict=True))
            actual, problem = self._received(key, meta)
            if problem:
                reply = _check(index, False, problem=problem)
                reply["check"].update(extra)
                return reply
        else:
            try:
                actual = torch.load(meta.get("path", ""), weights_only=True, map_location=self.device)
            except Exception as exc:  # a tensor subclass or any other object fails safe loading
                return _check(
                    index,
                    False,
                    problem=f"the output could not be read as plain tensors ({type(exc).__name__}); "
                    "return torch.Tensor objects (no subclasses, no custom objects)",
                )
        reply = compare_outputs(self.outputs[key], actual, atol, rtol, index)
        items = [t for t in (_flatten(actual) or []) if isinstance(t, torch.Tensor)]
        if keep:
            self.kept[key] = [t.clone() for t in items]
        if same_as and same_as in self.kept:
            earlier = self.kept.pop(same_as)
            extra["deterministic"] = len(earlier) == len(items) and all(
                same_values(a, b) for a, b in zip(earlier, items, strict=True)
            )
        reply["check"].update(extra)
        return reply

    def _received(self, key: str, meta: dict[str, Any]) -> tuple[Any, str]:
        """The candidate's output rebuilt from its report and the shared output buffers, or a problem.

        The report is the candidate's word, but only the buffer contents are trusted for values: a
        false report leaves the poisoned buffers as they were, and they fail the comparison."""
        assert self.shared is not None
        expected = self.outputs[key]
        container = type(expected).__name__
        if meta.get("container") != container:
            return None, f"expected a {container} output, got {meta.get('container')}"
        reported = meta.get("items", [])
        receivers = self.shared.outputs
        if len(reported) != len(receivers):
            return None, f"expected {len(receivers)} output tensor(s), got {len(reported)}"
        for i, (item, buffer) in enumerate(zip(reported, receivers, strict=True)):
            if not item.get("exact"):
                return None, f"output {i}: expected torch.Tensor, got {item.get('type')} (no subclasses)"
            if list(item.get("shape", [])) != list(buffer.shape):
                return None, f"output {i}: shape {tuple(item.get('shape', []))}, expected {tuple(buffer.shape)}"
            if item.get("dtype") != str(buffer.dtype).removeprefix("torch."):
                return None, f"output {i}: dtype {item.get('dtype')}, expected {buffer.dtype}"
            if item.get("device") != "cuda":
                return None, f"output {i}: device {item.get('device')}, expected cuda"
        # compared in place, no copy: a candidate that writes into them meanwhile can only spoil its own result
        return (receivers[0] if container == "Tensor" else type(expected)(receivers)), ""

    def compile_reference(self, key: str, background: bool = False, slot: str = "") -> dict[str, Any]:
        """Compiles the reference with torch.compile and runs it once on input set ``key`` (code generation
        is CPU work: done before the device is reserved for timing).

        ``background``: compiles in a thread of this process and answers at once, so that the checks of a first
        verify are served meanwhile instead of waiting seconds for the compiler; every later use of the compiled
        model (this command, ``baseline``, ``await_compile``) waits for it and raises its error. ``slot``
        ("LOCK:GATE", ``cudagym.gpu_lock``): the device's shared slot, which the background compile holds through
        its first call (tracing, building, then running the model and benchmarking the inductor's kernel variants
        on the device): no timing of any process overlaps that device work, so none need await the compile."""
        if background:
            if self.compiled is None and self._compiling is None:
                inputs = self.inputs[key]  # held by the thread: dropping ``key`` meanwhile is safe
                self._compiling = threading.Thread(
                    target=self._compile_in_background, args=(inputs, slot), name="reference-compile", daemon=True
                )
                self._compiling.start()
            return {"ok": True}
        self.await_compile()
        if self.compiled is None:
            self._compile(self.inputs[key])
        else:
            self._run_compiled(self.inputs[key])
        return {"ok": True}

    def compile_done(self) -> dict[str, Any]:
        """Whether no torch.compile runs in the background (its error, if any, stays for the next use) and, if
        one does, its ``stage`` ("imports", "slot": waiting for the device's shared slot, "build"); with how many
        inductor compile threads this process compiles (None before its first compile) and the last compile's
        seconds (the same three steps)."""
        done = self._compiling is None or not self._compiling.is_alive()
        return {
            "ok": True,
            "done": done,
            "stage": "done" if done else self.compile_stage,
            "threads": self.compile_threads,
            "seconds": self.compile_seconds,
        }

    def await_compile(self) -> dict[str, Any]:
        """Waits for a background compile; its failure becomes this command's."""
        self._await_background_compile()
        error, self._compile_error = self._compile_error, None
        if error is not None:
            raise error
        return {"ok": True}

    def _await_background_compile(self) -> None:
        thread, self._compiling = self._compiling, None
        if thread is not None:
            thread.join()

    def _compile(self, inputs: list[Any], slot: str = "") -> None:
        """torch.compile of the model and its first call on ``inputs``; ``slot``: see ``compile_reference``."""
        start = time.perf_counter()
        self.compile_stage = "imports"
        self._await_preload()
        import torch
        import torch._dynamo
        import torch._inductor.compile_fx
        import torch._inductor.config

        imported = time.perf_counter()
        # set in the thread that compiles: torch's config overrides are per thread
        torch._inductor.config.compile_threads = INDUCTOR_COMPILE_THREADS
        torch._dynamo.reset()
        compiled = torch.compile(self.model)
        self.compile_stage = "slot"
        with warmup_slot(slot):
            slotted = time.perf_counter()
            self.compile_stage = "build"
            self._run_compiled(inputs, compiled)
        self.compiled = compiled
        self.compile_threads = torch._inductor.config.compile_threads  # as the inductor left it after compiling
        self.compile_seconds = {
            "imports": imported - start,
            "slot": slotted - imported,
            "build": time.perf_counter() - slotted,
        }

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

    def baseline(self, key: str, mode: str, timing: dict[str, Any]) -> dict[str, Any]:
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
        return {
            "ok": True,
            "median_ms": stats.median_ms,
            "spread": stats.spread,
            "reps": stats.reps,
            "method": stats.method,
            "times_ms": list(stats.times_ms),
            "stream_ms": stats.stream_ms,
            "latency_ms": stats.latency_ms,
        }

    def check_task(
        self, seeds: list[int], kinds: list[str], atol: float, rtol: float, timing: dict[str, Any]
    ) -> dict[str, Any]:
        """Properties of the reference itself: determinism, finiteness, and whether a shortcut passes.

        For each input set: the output twice (determinism), then whether zeros, the output's mean as a
        constant, or any input of the output's shape would pass the tolerance, and whether the output
        of the previous input set would (an output that does not depend on the inputs).
        """
        import torch

        report: dict[str, Any] = {
            "deterministic": True,
            "finite": True,
            "zeros": [],
            "constant": [],
            "input": [],
            "independent": [],
            "kinds": kinds,
        }
        previous = None
        for seed, kind in zip(seeds, kinds, strict=True):
            inputs = to_device(self.draw_inputs(seed, kind), self.device, self.dtype)
            with torch.no_grad():
                first = _detach(self.model(*inputs))
                second = _detach(self.model(*inputs))
            items, again = _flatten(first) or [], _flatten(second) or []
            tensors = [t for t in items if isinstance(t, torch.Tensor) and t.is_floating_point()]
            report["deterministic"] &= all(
                torch.equal(a, b) for a, b in zip(items, again, strict=True) if isinstance(a, torch.Tensor)
            )
            report["finite"] &= all(bool(torch.isfinite(t).all()) for t in tensors)

            def passes(fake: list[Any], real: list[Any] = tensors) -> bool:
                return all(_compare_tensor(t, f, atol, rtol)["passed"] for t, f in zip(real, fake, strict=True))

            report["zeros"].append(bool(tensors) and passes([torch.zeros_like(t) for t in tensors]))
            report["constant"].append(
                bool(tensors) and passes([torch.full_like(t, float(t.double().mean())) for t in tensors])
            )
            same_shape = [
                x
                for x in inputs
                if isinstance(x, torch.Tensor)
                and len(tensors) == 1
                and x.shape == tensors[0].shape
                and x.dtype == tensors[0].dtype
            ]
            report["input"].append(any(passes([x]) for x in same_shape))
            report["independent"].append(
                bool(tensors)
                and previous is not None
                and len(previous) == len(tensors)
                and all(p.shape == t.shape for p, t in zip(previous, tensors, strict=True))
                and passes(previous)
            )
            previous = tensors
            self.inputs["check"] = inputs
        self._await_background_compile()  # timed alone (see ``baseline``)
        eager = time_callable(lambda: self.model(*self.inputs["check"]), self.device, TimingConfig(**timing))
        self.inputs.pop("check", None)
        report["eager_ms"] = eager.median_ms
        return {"ok": True, "report": report}

    def drop(self, key: str) -> dict[str, Any]:
        """Forgets input set ``key`` and gives the device memory it held back to the device once more than
        ``KEEP_CACHED`` lies unused: the caching allocator would otherwise keep every stage's peak reserved
        (14-40 GB per reference process of a GPU-sized task on the H200, which ran sixteen environments out of
        memory), while small tasks keep their blocks and skip the cost of allocating them again."""
        import torch

        self.inputs.pop(key, None)
        self.outputs.pop(key, None)
        self.transport.pop(key, None)
        self.kept.pop(key, None)
        if torch.cuda.is_initialized() and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > KEEP_CACHED:
            torch.cuda.empty_cache()
        return {"ok": True}

    def held(self) -> dict[str, Any]:
        """The names of the input sets this process holds (each a share of device memory)."""
        return {"ok": True, "keys": sorted(self.inputs)}

    def serve(self) -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            command = request.pop("command")
            if command == "shutdown":
                self.channel.send(ok=True)
                return
            try:
                reply = getattr(self, command)(**request)
            except Exception as exc:
                reply = {"ok": False, "error": describe_exception(exc)}
            self.channel.send(**reply)


# -- comparison ------------------------------------------------------------------------------------


def _check(index: int, passed: bool, output: int = 0, **fields: Any) -> dict[str, Any]:
    return {"ok": True, "check": {"index": index, "passed": passed, "output": output, **fields}}


def _flatten(value: Any) -> list[Any] | None:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def compare_outputs(expected: Any, actual: Any, atol: float, rtol: float, index: int) -> dict[str, Any]:
    """Checks structure, type, shape, dtype, device and finiteness, then values within tolerance."""
    import torch

    exp_items, act_items = _flatten(expected), _flatten(actual)
    if exp_items is None:
        same = type(expected) is type(actual) and expected == actual
        return _check(index, same, problem="" if same else f"expected {expected!r}, got {type(actual).__name__}")
    if isinstance(expected, torch.Tensor) and not isinstance(actual, torch.Tensor):
        return _check(index, False, problem=f"expected a torch.Tensor, got {type(actual).__name__}")
    if act_items is None or len(act_items) != len(exp_items) or type(actual) is not type(expected):
        return _check(
            index,
            False,
            problem=f"expected a {type(expected).__name__} of {len(exp_items)} outputs, got {type(actual).__name__}",
        )
    worst: dict[str, Any] | None = None
    for i, (exp, act) in enumerate(zip(exp_items, act_items, strict=False)):
        if not isinstance(exp, torch.Tensor):
            if type(exp) is not type(act) or exp != act:
                return _check(index, False, output=i, problem=f"output {i}: expected {exp!r}, got {act!r}")
            continue
        if type(act) is not torch.Tensor:
            return _check(
                index, False, output=i, problem=f"output {i}: expected torch.Tensor, got {type(act).__name__}"
            )
        if act.shape != exp.shape:
            return _check(
                index, False, output=i, problem=f"output {i}: shape {tuple(act.shape)}, expected {tuple(exp.shape)}"
            )
        if act.dtype != exp.dtype:
            return _check(index, False, output=i, problem=f"output {i}: dtype {act.dtype}, expected {exp.dtype}")
        if act.device.type != exp.device.type:
            return _check(
                index, False, output=i, problem=f"output {i}: device {act.device.type}, expected {exp.device.type}"
            )
        result = _compare_tensor(exp, act, atol, rtol)
        result["output"] = i
        if not result["passed"]:
            return {"ok": True, "check": {"index": index, **result}}
        if worst is None or (result.get("max_abs_error") or 0) > (worst.get("max_abs_error") or 0):
            worst = result
    return {"ok": True, "check": {"index": index, **(worst or {"passed": True})}}


def _compare_tensor(exp: Any, act: Any, atol: float, rtol: float) -> dict[str, Any]:
    """Elementwise |act - exp| <= atol + rtol * |exp| (NaN/Inf fail), with details of the worst element.

    The pass/fail pass runs in the output's own precision; only the reported worst element is read in
    float64, so checking a large output costs a few passes over it.
    """
    import torch

    total = exp.numel()
    if total == 0:
        return {"passed": True, "total": 0, "mismatched": 0}
    if not (exp.is_floating_point() or exp.is_complex()):
        diff = act != exp
        bad = int(diff.sum())
        fields: dict[str, Any] = {"passed": bad == 0, "total": total, "mismatched": bad}
        if bad:
            flat = int(diff.reshape(-1).nonzero()[0])
            fields.update(
                worst_index=_unravel(flat, exp.shape),
                expected=float(exp.reshape(-1)[flat]),
                actual=float(act.reshape(-1)[flat]),
            )
        return fields
    err = (act - exp).abs()
    excess = err - (atol + rtol * exp.abs())
    excess = torch.nan_to_num(excess, nan=math.inf)  # NaN in the candidate counts as the worst error
    bad = int((excess > 0).sum())
    flat = int(torch.argmax(excess.reshape(-1)).item())
    nonfinite = int((~torch.isfinite(act)).sum()) - int((~torch.isfinite(exp)).sum())
    e = float(exp.reshape(-1)[flat].double())
    a = float(act.reshape(-1)[flat].double())
    max_abs = float(torch.nan_to_num(err, nan=math.inf).max())
    fields = {
        "passed": bad == 0,
        "total": total,
        "mismatched": bad,
        "max_abs_error": max_abs,
        "max_rel_error": abs(a - e) / max(abs(e), 1e-12) if math.isfinite(a) else math.inf,
        "worst_index": _unravel(flat, exp.shape),
        "expected": e,
        "actual": a,
    }
    if nonfinite > 0:
        fields["problem"] = f"{nonfinite} NaN/Inf value(s) where the reference is finite"
    return fields


def _unravel(flat: int, shape: Any) -> list[int]:
    index = []
    for size in reversed(list(shape)):
        index.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return list(reversed(index))


def _detach(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_detach(v) for v in value)
    return value


def _cpu(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_cpu(v) for v in value)
    return value


def _all_finite(value: Any) -> bool:
    import torch

    items = _flatten(value) or []
    return all(bool(torch.isfinite(v).all()) for v in items if isinstance(v, torch.Tensor) and v.is_floating_point())


def _peak_bandwidth(device: str) -> float | None:
    """The device memory's theoretical bandwidth in bytes/s (double data rate x bus width), when known."""
    import torch

    if not device.startswith("cuda"):
        return None
    props = torch.cuda.get_device_properties(device)
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    bus_bits = getattr(props, "memory_bus_width", 0) or 0
    return 2.0 * clock_khz * 1e3 * bus_bits / 8 if clock_khz and bus_bits else None


def _has_dropout(model: Any) -> bool:
    """Dropout makes a reference stochastic; such modules are evaluated in eval mode."""
    import torch

    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in model.modules())
