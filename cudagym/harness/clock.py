"""The trusted clock: times a candidate process's calls from the reference process, which runs no agent code.

A *handshake* (``handshake.py``) is one or more calls of the candidate, each on an input set of its own, bracketed by
the clock. Everything the candidate does for a handshake lies inside the interval the clock measures:

* **cuda** (one timeline: the clock's own stream, in its own CUDA context). The candidate first queues its calls
  behind a wait of its stream for *go* and says so (``handshake.py``); its host path lies before the interval. Then
  ``E0`` | the fresh inputs copied from the clock's private staging buffers into the shared input buffers | the L2
  cache flushed | *go* written by the clock's stream | the candidate's queued work runs; the clock's stream waits
  for the *done* the candidate's stream writes after it | the outputs, read where the candidate's memory holds them,
  sealed with a keyed hash | ``E4``. Kernels of two processes never run at once on a GPU without MPS
  (``require_time_slicing``), and the inputs exist only after ``E0``, so no work on them can happen before the
  interval; the outputs are sealed before ``E4``, so no work after it can change what is judged. A candidate that says
  "done" early gains nothing: its work either lands before the seal (and is timed) or the sealed output is
  incomplete. One that does not queue (its forward waits for the device, or it stalls) gets its *go* anyway once its
  progress stops; what is left of its host path is then timed.
* **cpu**. The candidate is frozen (``freezer.py``) except during its handshakes: the inputs are written while it is
  frozen, the clock thaws it and starts timing, and stops timing once it said done and is frozen again. Its outputs
  are then read from its memory. What the handshake is charged is the run time the kernel accounted to the
  candidate's threads meanwhile (``cputime.py``), read while it is frozen, so that the moments it waited for a core
  on a busy host, and the clock's own wake-ups, are not charged; where the kernel does not account it, the interval.

What a handshake costs by itself (two GPU context switches, the clock's waits, copies and seal) is *calibrated*
with the candidate process before the agent's code is loaded into it: the same handshakes answered with outputs
prepared in advance and no work. A candidate's time per call is the interval less that cost, divided by the number of
calls; on cuda the clock's own phases (copy, flush, seal) are taken off as measured but at most their calibrated
length and noise, so a phase the candidate slowed down by running beside it is charged to the candidate.

Every output the clock reads can be compared in full afterwards (``check``); the comparison re-seals it first, so
an output changed after the interval fails. Imports only the standard library, torch and the harness.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from . import cputime
from .compare import check_reply, compare_outputs, compare_precision, flatten, fused_agrees, same_values
from .cputime import Spent, TreeTimes
from .freezer import Freezer, read_memory, write_memory
from .gpulib import CudaDriver, GpuLib, device_view
from .handshake import (
    ARM,
    CALIBRATING,
    CALLS,
    CONTROL_FILE,
    DESCRIBED,
    DONE,
    ENDED,
    GO,
    MAX_CALLS,
    PROGRESS,
    SERVING,
    SETS,
    STATE,
    WAKE_SOCKET,
    ControlBlock,
    cpu_input_file,
    dtype_name,
    dtype_of,
    futex_wake,
    map_file_tensor,
    span_bytes,
)
from .protocol import Check, Samples, decode
from .sampler import Sampler

# memory the input sets beyond the first may take (twice over: the clock's private staging and the shared buffers):
# cuda, a 64th of the device's memory up to 2 GiB (sixteen calls of a few tens of microseconds each move that much);
# cpu, 128 MiB. On cuda a set larger than a quarter of it gets no second one: its calls are long enough for one call per
# handshake, and a reference process and its candidate must stay within the device's memory slot
# (``Tuning.memory_slots``)
SET_BUDGET_CUDA_MAX = 1 << 31
SET_BUDGET_CUDA_SHARE = 64
SET_BUDGET_CPU = 1 << 27
FLUSH_BYTES = 256 * 1024 * 1024
# handshakes measured per number of calls, after the unmeasured ones (cuda, cpu); the same in every stage, so that
# the number of the first handshake after the calibration says nothing about the stage
CALIBRATION_HANDSHAKES = {True: 10, False: 6}
CALIBRATION_WARMUP = {True: 2, False: 1}
# the calibration of each number of calls is measured in this many rounds (cuda, cpu), always all of them (so that the
# count of handshakes says nothing of the device's state), and the round that takes off least is kept: another
# process's work on the device during a round can only lengthen what the clock would take off, never shorten it. A
# round is steady when what it takes off varies by at most the larger of these (cuda, cpu) around its median; with no
# steady round the calibration is ``disturbed``
CALIBRATION_ROUNDS = {True: 3, False: 1}  # cuda, cpu: a cpu round costs a tenth of a second or more, a cuda one ms
STEADY_NOISE_US = {True: 25.0, False: 50.0}
STEADY_NOISE_SHARE = 0.1
MAX_CALLS_CPU = 4  # on cpu the freeze makes a handshake cheap: a few calls amortise it
# cuda: how long the clock waits for the candidate to queue a handshake's calls before it writes the inputs and the go
# anyway: while the candidate's count of queued calls moves, up to ``QUEUE_WAIT_S`` in all; once it has not moved for
# ``QUEUE_STALL_S`` (a forward that waits for the device waits for the go), at once. Neither is timed
QUEUE_WAIT_S = 0.05
QUEUE_STALL_S = 0.005
POISON = {"float32": 0x7FC00000, "float64": 0x7FF80000, "float16": 0x7E007E00, "bfloat16": 0x7FC07FC0}
ALIVE_CHECK_S = 0.05
# a handshake still unanswered after max(HANG_FACTOR x the reference's time for its calls, the hang floor) is a hung or
# runaway candidate: the stage ends there (a timeout) instead of at its deadline. The floor (``hang_s``, from
# ``EvalConfig.hang_seconds``) covers a first call's one-off costs (library handles, lazily loaded modules)
HANG_FACTOR = 10.0
TRUSTED_PHASES = (0, 1, 3)  # cuda: copy, flush, seal
# cuda: from the go to the done: the candidate's work and the switches of context (the GPU may switch to the candidate
# as soon as the go is written, before any later mark of the clock's stream: the go belongs to this phase)
CANDIDATE_PHASE = 2


class CandidateSilent(RuntimeError):
    """The candidate did not answer a handshake in time, or its process ended."""


@dataclasses.dataclass
class Handshake:
    """One measured handshake: its calls' input sets, the interval and its phases (microseconds), what the
    candidate said about its outputs, and (cuda) the seal of each output tensor."""

    number: int
    sets: list[int]
    total_us: float
    phases_us: list[float]
    description: dict[str, Any]
    key: int = 0
    outputs: list[list[Any]] = dataclasses.field(default_factory=list)  # per call: tensors, or a problem string
    cpu: Spent | None = None  # cpu: the run time the kernel accounted to the candidate's threads (``cputime.py``)
    queued: bool = False  # cuda: the candidate had queued its calls before the go (else part of its host path is timed)

    @property
    def error(self) -> dict[str, Any] | None:
        error = self.description.get("error")
        return error if isinstance(error, dict) else None


@dataclasses.dataclass
class Calibration:
    """What a handshake costs with no work, by number of calls: the whole interval, and (cuda) each phase with its
    noise (how far above its median the calibration saw it: ``_above_median``)."""

    total_us: dict[int, float] = dataclasses.field(default_factory=dict)
    phases_us: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    noise_us: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    # the shortest time per call the clock can tell from no work: the noise of what the calibration takes off (cuda:
    # the candidate's phase; cpu: the whole handshake), per call, at least 1 us
    resolution: dict[int, float] = dataclasses.field(default_factory=dict)
    # the numbers of calls for which no calibration round was steady (``CALIBRATION_ROUNDS``)
    disturbed: list[int] = dataclasses.field(default_factory=list)

    def resolution_us(self, calls: int) -> float:
        """The clock's resolution per call at ``calls`` calls per handshake (1 us before any calibration)."""
        return self.resolution.get(calls, 1.0)


@dataclasses.dataclass(frozen=True)
class CalibrationRound:
    """One round of a calibration (``CALIBRATION_ROUNDS``): medians of the interval and of each phase, each phase's
    noise, what the round would take off a handshake (cuda: the candidate's phase; cpu: the interval) and its noise
    (``spread_us``), and whether that noise is small enough to trust the round (``steady``)."""

    total_us: float
    phases_us: list[float]
    noise_us: list[float]
    taken_off_us: float
    spread_us: float
    steady: bool


class Clock:
    """The reference process's end of one candidate stage (see the module docstring).

    ``model`` and ``draw`` are the reference's model and its input drawer (``draw(seed, kind)`` -> inputs on the
    device in the task's dtype); ``exchange`` is the candidate's private folder, ``root_pid`` its outermost process."""

    def __init__(
        self,
        model: Any,
        draw: Any,
        device: str,
        exchange: str,
        root_pid: int,
        gpulib: str = "",
        symbols_dir: str = "",
        *,
        expect: Any = None,
        hang_s: float = 0.0,
    ) -> None:
        import torch

        # ``expect(inputs, precise)``: the reference's outputs on ``inputs`` in fp32 and, with ``precise``, in float64
        # (None where the float64 reference cannot run); without it ``check`` runs ``model`` and has no float64 output
        self.expect = expect

        self.torch, self.model, self.draw, self.device = torch, model, draw, device
        self.cuda = device.startswith("cuda")
        self.freezer = Freezer(root_pid)
        self.block = ControlBlock(os.path.join(exchange, CONTROL_FILE), create=True)
        self.words = self.block.words
        self.number = 0
        template = draw(secrets.randbits(62), "task")
        started = time.perf_counter()
        with torch.no_grad():
            expected = model(*template)
        if self.cuda:
            torch.cuda.synchronize(device)
        # the reference's time for one call (its first on this input set: an upper estimate), which bounds a handshake
        self.reference_call_s = time.perf_counter() - started
        self.hang_s = hang_s  # 0: no bound but the stage's deadline
        self._hang_reason = ""  # why the current handshake's wait is bounded short of the stage's deadline
        self.templates = _templates(expected)
        tensors = [x for x in template if isinstance(x, torch.Tensor)]
        set_bytes = sum(x.nbytes for x in tensors) + sum(t.get("nbytes", 0) for t in self.templates)
        self.moved_bytes = set_bytes  # what every correct call reads and writes at least
        budget = set_budget_bytes(device)
        if self.cuda and set_bytes > budget // 4:
            self.max_calls = 1
        else:
            most = MAX_CALLS if self.cuda else MAX_CALLS_CPU
            self.max_calls = max(1, min(most, 1 + budget // max(set_bytes, 1)))
        self.layout = [
            ("tensor", dtype_name(x.dtype), list(x.shape)) if isinstance(x, torch.Tensor) else ("value", x)
            for x in template
        ]
        self.staging: list[list[Any]] = [list(template) for _ in range(self.max_calls)]
        self.shared, self.specs = self._shared_sets(exchange, template)
        self.gpu: GpuLib | None = None
        self.fused: GpuLib | None = None  # cuda: the comparison kernels, where they give torch's figures here
        self.driver: CudaDriver | None = None
        self._mapped: dict[str, tuple[int, int]] = {}  # candidate allocation handle -> (address here, size)
        self.wake: socket.socket | None = None
        self.gpulib = gpulib
        if self.cuda:
            self.gpu = GpuLib(gpulib, device)
            self.block.map_for_device(self.gpu)
            self.fused = self.gpu if _kernels_agree(self.gpu, gpulib, device) else None
            self.flush: Any = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
            seals = self.max_calls * max(1, len(self.templates))
            self.seal_out: Any = torch.zeros(seals, dtype=torch.int64, device=device)
            self.events = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
        else:
            self.wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.wake.bind(os.path.join(exchange, WAKE_SOCKET))
        # cpu: where the candidate's threads run during its calls, sampled by the kernel (``sampler.py``), and how long
        # they ran (``cputime.py``: the run time the handshake is charged, where the kernel accounts it)
        self.sampler = Sampler(Path(symbols_dir or exchange) / "symbols") if not self.cuda else None
        self.times = TreeTimes() if not self.cuda else None
        if self.times is not None and not self.times.available(root_pid):
            self.times.close()
            self.times = None
        self.threads = torch.get_num_threads()  # P: the candidate's job configures the same number
        self.calibration = Calibration()
        self._pids: dict[int, int] = {}

    # -- what the candidate is given ------------------------------------------------------------------------

    def _shared_sets(self, exchange: str, template: list[Any]) -> tuple[list[list[Any]], list[list[dict[str, Any]]]]:
        """The input buffers the candidate reads, ``max_calls`` sets shaped like ``template``, and their specs."""
        torch = self.torch
        sets, specs = [], []
        pool = torch.cuda.MemPool() if self.cuda else None  # a mapped allocation holds only these buffers
        driver = CudaDriver() if self.cuda else None
        self._pool: Any = pool
        for index in range(self.max_calls):
            values, described = [], []
            for position, value in enumerate(template):
                if not isinstance(value, torch.Tensor):
                    values.append(value)
                    described.append({"value": value})
                elif self.cuda:
                    assert pool is not None and driver is not None
                    with torch.cuda.use_mem_pool(pool):
                        buffer = torch.empty_like(value, memory_format=torch.contiguous_format)
                    base, _ = driver.allocation(buffer.data_ptr())
                    values.append(buffer)
                    described.append(
                        {
                            "device": {
                                "handle": driver.export(base),
                                "offset": buffer.data_ptr() - base,
                                "nbytes": buffer.nbytes,
                                "dtype": dtype_name(buffer.dtype),
                                "shape": list(buffer.shape),
                                "stride": list(buffer.stride()),
                            }
                        }
                    )
                else:
                    path = cpu_input_file(exchange, index, position)
                    values.append(map_file_tensor(path, value.dtype, list(value.shape), create=True))
                    described.append({"file": path, "dtype": dtype_name(value.dtype), "shape": list(value.shape)})
            sets.append(values)
            specs.append(described)
        return sets, specs

    def link_spec(self) -> dict[str, Any]:
        """What the candidate's job carries to reach this clock."""
        return {"control": self.block.path, "sets": self.specs, "outputs": self.templates, "gpulib": self.gpulib}

    # -- inputs -------------------------------------------------------------------------------------------------

    def stage_inputs(self, index: int, seed: int, kind: str) -> None:
        """Draws a fresh input set from ``seed`` into staging set ``index`` (private: the candidate never sees it
        before the handshake that copies it in)."""
        values = self.draw(seed, kind)
        layout = [
            ("tensor", dtype_name(x.dtype), list(x.shape)) if isinstance(x, self.torch.Tensor) else ("value", x)
            for x in values
        ]
        if layout != self.layout:
            raise ValueError("get_inputs() gave inputs of another shape, dtype or value than before")
        self.staging[index] = values

    def _copy_in(self, sets: list[int]) -> None:
        for index in sets:
            for buffer, value in zip(self.shared[index], self.staging[index], strict=True):
                if isinstance(buffer, self.torch.Tensor):
                    buffer.copy_(value)

    # -- one handshake ----------------------------------------------------------------------------------------

    def handshake(self, sets: list[int], deadline: float) -> Handshake:
        """Runs one handshake of ``len(sets)`` calls, call k on input set ``sets[k]`` (staged before)."""
        if not 1 <= len(sets) <= self.max_calls:
            raise ValueError(f"a handshake holds 1 to {self.max_calls} calls, got {len(sets)}")
        self.number += 1
        number = self.number
        bound = self.hang_bound_s(len(sets))
        if bound is not None and time.monotonic() + bound < deadline:
            deadline = time.monotonic() + bound
            calls = "its call" if len(sets) == 1 else f"its {len(sets)} calls"
            self._hang_reason = (
                f"{calls} did not return within {bound:.1f} s (the longer of {HANG_FACTOR:g}x the reference's "
                f"{self.reference_call_s * 1e3:.3g} ms per call and {self.hang_s:g} s): a hung or runaway kernel"
            )
        else:
            self._hang_reason = ""
        self.words[CALLS] = len(sets)
        for k, index in enumerate(sets):
            self.words[SETS + k] = index
        if self.cuda:
            return self._handshake_cuda(number, sets, deadline)
        return self._handshake_cpu(number, sets, deadline)

    def hang_bound_s(self, calls: int) -> float | None:
        """How long a handshake of ``calls`` calls may take before the candidate counts as hung (None: no bound)."""
        if self.hang_s <= 0:
            return None
        return max(self.hang_s, HANG_FACTOR * self.reference_call_s * calls)

    def _silent(self, number: int) -> CandidateSilent:
        """The error for handshake ``number`` unanswered: the candidate's process ended, or the wait passed its hang
        bound or the stage's deadline."""
        if not self.freezer.alive():
            return CandidateSilent(f"the candidate's process ended during handshake {number}")
        return CandidateSilent(self._hang_reason or f"the candidate did not answer handshake {number} in time")

    def _handshake_cuda(self, number: int, sets: list[int], deadline: float) -> Handshake:
        assert self.gpu is not None
        events, gpu, words = self.events, self.gpu, self.words
        words[PROGRESS] = 0
        words[ARM] = number
        queued = self._await_queued(number, deadline)
        if queued:
            description = self._described(number)
            outputs = self._map_outputs(description, len(sets))
        key = secrets.randbits(63)
        self.seal_out.zero_()
        events[0].record()
        self._copy_in(sets)
        events[1].record()
        self.flush.fill_(0)
        events[2].record()
        # the go opens the candidate's phase: the GPU may switch to the candidate's context as soon as it is written
        gpu.flag(self.block.device_word(GO), number)
        if not queued:  # the candidate goes on with its calls now: what is left of its host path is timed
            description = self._await(DESCRIBED, number, deadline, done_ends=False)
            outputs = self._map_outputs(description, len(sets))
        gpu.wait(self.block.device_word(DONE), number)
        events[3].record()
        self._seal(outputs, key)
        events[4].record()
        try:
            self._await(DONE, number, deadline)
        except CandidateSilent:
            words[DONE] = number  # lets this stream past its wait (the candidate's never will): the stage ends
            raise
        events[4].synchronize()
        later = self.block.read_description()  # a fault found after the description: the candidate says so
        if later.get("n") == number and isinstance(later.get("error"), dict):
            description = later
        phases = [events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(4)]
        total = events[0].elapsed_time(events[4]) * 1e3
        return Handshake(number, sets, total, phases, description, key, outputs, queued=queued)

    def _await_queued(self, number: int, deadline: float) -> bool:
        """cuda: waits until the candidate has queued handshake ``number`` and described its outputs (True), or until
        its count of queued calls has not moved for ``QUEUE_STALL_S`` or ``QUEUE_WAIT_S`` have passed (False)."""
        words = self.words
        start = moved = checked = time.monotonic()
        progress = words[PROGRESS]
        while words[DESCRIBED] != number:
            now = time.monotonic()
            if words[PROGRESS] != progress:
                progress, moved = words[PROGRESS], now
            elif now - moved > QUEUE_STALL_S or now - start > QUEUE_WAIT_S:
                return False
            checked = self._watch(number, deadline, checked, now)
        return True

    def _watch(self, number: int, deadline: float, checked: float, now: float) -> float:
        """While waiting on handshake ``number``: raises ``CandidateSilent`` once the deadline passed or the
        candidate's process ended, looked at every ``ALIVE_CHECK_S`` from ``checked`` (the last look); returns when it
        last looked."""
        if now - checked <= ALIVE_CHECK_S:
            return checked
        if now > deadline or not self.freezer.alive():
            raise self._silent(number)
        return now

    def _described(self, number: int) -> dict[str, Any]:
        """The description of handshake ``number`` the candidate wrote, or an error standing for it."""
        description = self.block.read_description()
        if self.words[DESCRIBED] != number or description.get("n") != number:
            return {"error": {"type": "MissingDescription", "message": "no description of this handshake"}}
        return description

    def _handshake_cpu(self, number: int, sets: list[int], deadline: float) -> Handshake:
        assert self.wake is not None
        self.freezer.freeze()
        self._copy_in(sets)
        self.wake.setblocking(False)
        try:
            while True:
                self.wake.recv(16)
        except BlockingIOError:
            pass
        serving = self.words[STATE] == SERVING and self.sampler is not None
        if serving:
            self.sampler.watch(self.freezer.frozen)  # type: ignore[union-attr]
        before = self.times.snapshot(self.freezer.frozen) if self.times is not None else None
        self.words[GO] = number
        start = time.perf_counter_ns()
        self.freezer.thaw()
        self._wake_candidate()
        thawed = time.perf_counter_ns()
        self.wake.setblocking(True)
        while self.words[DONE] != number:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.freezer.alive():
                self.freezer.freeze()
                raise self._silent(number)
            self.wake.settimeout(min(remaining, ALIVE_CHECK_S))
            try:
                self.wake.recv(16)
            except (TimeoutError, BlockingIOError):
                pass
        seen = time.perf_counter_ns()
        self.freezer.freeze()
        end = time.perf_counter_ns()
        ran = None
        if before is not None and self.times is not None:
            ran = cputime.spent(before, self.times.snapshot(self.freezer.frozen), self.threads)
        if serving:
            self.sampler.drain()  # type: ignore[union-attr]
        total = (end - start) / 1e3
        phases = [(thawed - start) / 1e3, (seen - thawed) / 1e3, (end - seen) / 1e3]  # thaw, candidate, freeze
        description = self.block.read_description()
        if int(self.words[DESCRIBED]) != number or description.get("n") != number:
            description = {"error": {"type": "MissingDescription", "message": "no description of this handshake"}}
        outputs = self._read_cpu(description, len(sets))
        return Handshake(number, sets, total, phases, description, outputs=outputs, cpu=ran)

    def _await(self, word: int, number: int, deadline: float, *, done_ends: bool = True) -> dict[str, Any]:
        """Spins until the candidate wrote ``number`` into ``word``; for ``DESCRIBED``, returns the description (with
        ``done_ends``, a done without a description ends the wait: on cpu the candidate describes before it says done;
        on cuda its stream may say done before its host has described)."""
        words, checked = self.words, time.monotonic()
        while words[word] != number:
            if done_ends and word == DESCRIBED and words[DONE] == number and words[DESCRIBED] != number:
                break  # done without a description: a candidate fault, judged below
            checked = self._watch(number, deadline, checked, time.monotonic())
        return self._described(number) if word == DESCRIBED else {}

    # -- reading outputs ----------------------------------------------------------------------------------------

    def _items(self, description: dict[str, Any], calls: int) -> list[list[Any]]:
        """Per call, its described output items (or a problem string for the whole call)."""
        described = description.get("calls")
        if description.get("error") is not None or not isinstance(described, list) or len(described) != calls:
            return [["the candidate did not describe its outputs"] for _ in range(calls)]
        most = max(1, len(self.templates))  # more tensors than the reference's output: judged as a wrong structure
        out: list[list[Any]] = []
        for call in described:
            items = call.get("items") if isinstance(call, dict) else None
            if not isinstance(items, list):
                out.append(["a garbled description"])
            elif len(items) > most:
                out.append([f"{len(items)} output tensors, the reference returns {len(self.templates)}"])
            else:
                out.append(items)
        return out

    def _validated(self, item: Any) -> tuple[Any, list[int], list[int], int] | str:
        """(dtype, shape, stride, span) of a described tensor whose numbers are sane, or why not."""
        if not isinstance(item, dict) or not item.get("exact"):
            return f"expected a torch.Tensor, got {item.get('type') if isinstance(item, dict) else item!r}"
        where = item.get("where")
        if not isinstance(where, dict):
            return f"the output could not be read ({item.get('where_error', 'no location')})"
        try:
            dtype = dtype_of(str(item.get("dtype")))
            shape = [int(n) for n in item["shape"]]
            stride = [int(s) for s in item["stride"]]
        except (KeyError, TypeError, ValueError):
            return "a garbled output description"
        element = self.torch.empty(0, dtype=dtype).element_size()
        if len(shape) != len(stride) or any(n < 0 for n in shape) or any(s < 0 for s in stride):
            return "an output with negative sizes or strides"
        span = span_bytes(shape, stride, element)
        if int(where.get("span", -1)) != span:
            return "an output description whose extent does not match its shape"
        return dtype, shape, stride, span

    def _map_outputs(self, description: dict[str, Any], calls: int) -> list[list[Any]]:
        """cuda: per call, views of the candidate's output tensors through interprocess mappings."""
        assert self.driver is not None or self.cuda
        if self.driver is None:
            self.driver = CudaDriver()
        out: list[list[Any]] = []
        for items in self._items(description, calls):
            views: list[Any] = []
            for item in items:
                checked = self._validated(item) if not isinstance(item, str) else item
                if isinstance(checked, str):
                    views.append(checked)
                    continue
                dtype, shape, stride, span = checked
                if span == 0:
                    views.append(self.torch.empty(shape, dtype=dtype, device=self.device))
                    continue
                views.append(self._device_view(item["where"], dtype, shape, stride, span))
            out.append(views)
        return out

    def _device_view(self, where: dict[str, Any], dtype: Any, shape: list[int], stride: list[int], span: int) -> Any:
        assert self.driver is not None
        handle = str(where.get("handle", ""))
        try:
            if handle not in self._mapped:
                address = self.driver.open(handle)
                self._mapped[handle] = (address, self.driver.allocation(address)[1])
            address, size = self._mapped[handle]
            offset = int(where.get("offset", -1))
        except (RuntimeError, ValueError, TypeError) as exc:
            return f"the output could not be mapped ({exc})"
        if offset < 0 or offset + span > size:
            return "an output described outside its allocation"
        return device_view(address + offset, span, dtype, shape, stride)

    def _seal(self, outputs: list[list[Any]], key: int) -> None:
        """cuda: hashes every readable output tensor into ``seal_out`` (one slot per tensor, in order)."""
        assert self.gpu is not None
        slot = 0
        for views in outputs:
            for view in views:
                if not isinstance(view, str) and view.numel() > 0:
                    nbytes = span_bytes(list(view.shape), list(view.stride()), view.element_size())
                    self.gpu.hash(view.data_ptr(), nbytes, key, self.seal_out[slot].data_ptr())
                slot += 1

    def _read_cpu(self, description: dict[str, Any], calls: int) -> list[list[Any]]:
        """cpu: per call, copies of the candidate's output tensors, read from its (frozen) memory."""
        torch = self.torch
        out: list[list[Any]] = []
        for items in self._items(description, calls):
            copies: list[Any] = []
            for item in items:
                checked = self._validated(item) if not isinstance(item, str) else item
                if isinstance(checked, str):
                    copies.append(checked)
                    continue
                dtype, shape, stride, span = checked
                raw = torch.empty(max(span, 1), dtype=torch.uint8)
                try:
                    pid = self._pid(int(item["where"]["pid"]))
                    if span:
                        read_memory(pid, int(item["where"]["address"]), raw.data_ptr(), span)
                except (OSError, LookupError, KeyError, TypeError, ValueError) as exc:
                    copies.append(f"the output could not be read ({exc})")
                    continue
                element = torch.empty(0, dtype=dtype).element_size()
                typed = raw[: span - span % element].view(dtype) if span else torch.empty(0, dtype=dtype)
                copies.append(typed.as_strided(shape, stride, 0))
            out.append(copies)
        return out

    def _pid(self, inner: int) -> int:
        if inner not in self._pids:
            self._pids[inner] = self.freezer.process_of(inner)
        return self._pids[inner]

    # -- judging one call -------------------------------------------------------------------------------------

    def actual(self, record: Handshake, call: int) -> tuple[Any, str]:
        """The output of one call as the reference's comparison takes it, or a problem."""
        items = record.outputs[call]
        if any(isinstance(v, str) for v in items):
            return None, next(v for v in items if isinstance(v, str))
        described = record.description["calls"][call]
        container = described.get("container")
        if container == "Tensor" and len(items) == 1:
            return items[0], ""
        if container in ("tuple", "list"):
            return (tuple(items) if container == "tuple" else list(items)), ""
        return None, f"expected tensor outputs, got a {container}"

    def check(
        self, record: Handshake, call: int, atol: float, rtol: float, index: int, precision: str = "off"
    ) -> Check:
        """Compares call ``call`` of ``record`` in full with the reference's output on the same inputs; with
        ``precision`` "fp32" or "tf32" also with the float64 reference's (``compare.compare_precision``); then that the
        output is what was sealed in the interval (cuda) and that the inputs are as they were written."""
        torch = self.torch
        inputs = self.staging[record.sets[call]]
        expected64 = None
        if self.expect is not None:
            expected, expected64 = self.expect(inputs, precision != "off")
        else:
            with torch.no_grad():
                expected = self.model(*inputs)
        actual, problem = self.actual(record, call)
        if problem:
            fields = check_reply(index, False, problem=problem)
        else:
            fields = compare_outputs(expected, actual, atol, rtol, index, self.fused)
            if fields["passed"] and expected64 is not None:
                fields.update(compare_precision(expected, expected64, actual, precision, self.fused))
            if fields["passed"] and self.cuda and not self._seal_holds(record, call):
                fields = check_reply(index, False, problem="the output changed after the timed interval ended")
        fields["inputs_unchanged"] = self.inputs_unchanged(record.sets[call])
        return decode(Check, fields)

    def _seal_holds(self, record: Handshake, call: int) -> bool:
        assert self.gpu is not None
        first = sum(len(v) for v in record.outputs[:call])
        sealed = self.seal_out[first : first + len(record.outputs[call])].clone()
        again = self.torch.zeros_like(sealed)
        for slot, view in enumerate(record.outputs[call]):
            if not isinstance(view, str) and view.numel() > 0:
                nbytes = span_bytes(list(view.shape), list(view.stride()), view.element_size())
                self.gpu.hash(view.data_ptr(), nbytes, record.key, again[slot].data_ptr())
        return bool(self.torch.equal(again, sealed))

    def inputs_unchanged(self, index: int) -> bool:
        return all(
            same_values(buffer, value)
            for buffer, value in zip(self.shared[index], self.staging[index], strict=True)
            if isinstance(buffer, self.torch.Tensor)
        )

    def keep(self, record: Handshake, call: int) -> list[Any]:
        """Private copies of one call's output tensors (the determinism check compares a later call with them)."""
        actual, problem = self.actual(record, call)
        return [] if problem else [t.clone() for t in (flatten(actual) or [])]

    def poison(self, record: Handshake) -> None:
        """Overwrites every output the candidate returned, so that memory it hands back unwritten next time holds
        no earlier result (NaN for floating types, a random pattern otherwise)."""
        pattern_other = secrets.randbits(32)
        for call, views in enumerate(record.outputs):
            for slot, view in enumerate(views):
                if isinstance(view, str) or view.numel() == 0:
                    continue
                pattern = POISON.get(dtype_name(view.dtype), pattern_other)
                nbytes = span_bytes(list(view.shape), list(view.stride()), view.element_size())
                if self.cuda:
                    assert self.gpu is not None
                    self.gpu.fill(view.data_ptr(), nbytes, pattern)
                else:
                    self._poison_cpu(record, call, slot, nbytes, pattern)
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def _poison_cpu(self, record: Handshake, call: int, slot: int, nbytes: int, pattern: int) -> None:
        where = record.description["calls"][call]["items"][slot]["where"]
        signed = pattern - (1 << 32) if pattern >= 1 << 31 else pattern  # the same four bytes as an int32
        local = self.torch.empty(nbytes // 4 + 1, dtype=self.torch.int32).fill_(signed)  # little-endian words
        try:
            write_memory(self._pid(int(where["pid"])), int(where["address"]), local.data_ptr(), nbytes)
        except (OSError, LookupError):
            pass  # its memory is gone: nothing to poison

    # -- calibration, and the stage's end ---------------------------------------------------------------------

    def call_counts(self) -> list[int]:
        """The numbers of calls a handshake may hold: powers of two up to ``max_calls`` (each calibrated)."""
        return [1 << i for i in range(self.max_calls.bit_length()) if 1 << i <= self.max_calls]

    def calibrate(self, deadline: float) -> Calibration:
        """Measures handshakes the candidate answers without work (it is still calibrating: no agent code is loaded)
        for every number of calls a handshake may hold; then lets the candidate go on to load the agent's code."""
        calibration = self.calibration
        for calls in self.call_counts():
            rounds = [self._calibration_round(calls, deadline) for _ in range(CALIBRATION_ROUNDS[self.cuda])]
            steady = [r for r in rounds if r.steady]
            kept = min(steady or rounds, key=lambda r: r.taken_off_us)
            calibration.total_us[calls], calibration.phases_us[calls] = kept.total_us, kept.phases_us
            calibration.noise_us[calls] = kept.noise_us
            calibration.resolution[calls] = max(kept.spread_us, 1.0) / calls
            if not steady:
                calibration.disturbed.append(calls)
        self.words[STATE] = SERVING
        if not self.cuda:
            self.freezer.thaw()
            self._wake_candidate()
        return self.calibration

    def _calibration_round(self, calls: int, deadline: float) -> CalibrationRound:
        """One round of empty handshakes of ``calls`` calls, after its unmeasured ones."""
        sets = list(range(calls))
        skip = CALIBRATION_WARMUP[self.cuda]
        records = [self.handshake(sets, deadline) for _ in range(skip + CALIBRATION_HANDSHAKES[self.cuda])][skip:]
        totals = sorted(self.measured_us(r) for r in records)
        columns = [sorted(r.phases_us[i] for r in records) for i in range(len(records[0].phases_us))]
        phases = [statistics.median(c) for c in columns]
        noise = [_above_median(c) for c in columns]
        total = statistics.median(totals)
        taken_off, spread = (
            (phases[CANDIDATE_PHASE], noise[CANDIDATE_PHASE]) if self.cuda else (total, _above_median(totals))
        )
        steady = spread <= max(STEADY_NOISE_US[self.cuda], STEADY_NOISE_SHARE * taken_off)
        return CalibrationRound(total, phases, noise, taken_off, spread, steady)

    def _wake_candidate(self) -> None:
        """cpu: wakes the candidate where it sleeps waiting for the next go or a change of ``STATE``."""
        futex_wake(self.block.host_address + 8 * GO)

    def _calibrated(self, calls: int) -> tuple[float, list[float]]:
        """The calibration of a handshake of ``calls`` calls (one of ``call_counts``)."""
        if calls not in self.calibration.total_us:
            raise ValueError(f"no calibration for {calls} calls per handshake")
        return self.calibration.total_us[calls], self.calibration.phases_us[calls]

    def measured_us(self, record: Handshake) -> float:
        """What the clock charges a whole handshake before the calibrated cost is taken off: on cpu the run time the
        kernel accounted to the candidate (``cputime.Spent.charged_us``) where it is read and no process of its tree
        appeared or ended meanwhile, else the interval."""
        if not self.cuda and record.cpu is not None and not record.cpu.tree_changed:
            return record.cpu.charged_us
        return record.total_us

    @property
    def cpu_method(self) -> str:
        """cpu: how a handshake is measured, in words."""
        if self.times is not None:
            return (
                "run time the kernel accounted to the candidate's threads while it was thawed (the busiest thread's, "
                f"or all threads' over {self.threads}, whichever is more)"
            )
        return "perf_counter in the reference process while the candidate ran (frozen otherwise)"

    def per_call_us(self, record: Handshake) -> float:
        """The candidate's time per call in ``record``, never below the clock's resolution (``resolution_us``): the
        interval less the calibrated cost of a handshake, divided by the calls. On cuda that is the candidate's phase
        less its calibrated length, plus what the clock's own phases took beyond their calibrated length and noise
        (the candidate's work running beside them is charged)."""
        calls = len(record.sets)
        total, phases = self._calibrated(calls)
        if self.cuda:
            noise = self.calibration.noise_us[calls]
            beside = sum(max(0.0, record.phases_us[i] - phases[i] - noise[i]) for i in TRUSTED_PHASES)
            spent = record.phases_us[CANDIDATE_PHASE] - phases[CANDIDATE_PHASE] + beside
        else:
            spent = self.measured_us(record) - total
        return max(spent / calls, self.calibration.resolution_us(calls))

    def clock_slowed(self, record: Handshake, tolerance: float = 0.25, slack_us: float = 20.0) -> bool:
        """cuda: whether the clock's own phases took clearly longer than calibrated (something else ran on the GPU
        meanwhile: another context, or the candidate beside the clock's work)."""
        if not self.cuda:
            return False
        _, phases = self._calibrated(len(record.sets))
        spent = sum(record.phases_us[i] for i in TRUSTED_PHASES)
        expected = sum(phases[i] for i in TRUSTED_PHASES)
        return spent > expected * (1 + tolerance) + slack_us

    def clock_quickened(self, record: Handshake, tolerance: float = 0.25, slack_us: float = 20.0) -> bool:
        """cuda: whether the clock's own phases took clearly less time than calibrated: the calibration was taken while
        something else ran on the device, and takes off more than a handshake costs now."""
        if not self.cuda:
            return False
        _, phases = self._calibrated(len(record.sets))
        spent = sum(record.phases_us[i] for i in TRUSTED_PHASES)
        expected = sum(phases[i] for i in TRUSTED_PHASES)
        return spent < expected * (1 - tolerance) - slack_us

    def sampled(self) -> Samples:
        """cpu: where the candidate's threads were sampled during its calls (``Sampler.counts``); cuda: nothing."""
        if self.sampler is None:
            return Samples(observed=False, why="the GPU's kernels are traced instead")
        return self.sampler.counts()

    def end(self) -> None:
        """Ends the stage: the candidate leaves its serving loop (and is thawed on cpu) and reports its last words."""
        self.words[STATE] = ENDED
        if not self.cuda:
            self.freezer.thaw()
            self._wake_candidate()

    def close(self) -> None:
        """Releases every mapping, buffer and file of this stage."""
        if self.driver is not None:
            for address, _ in self._mapped.values():
                self.driver.close(address)
        self._mapped.clear()
        if self.wake is not None:
            self.wake.close()
        if self.sampler is not None:
            self.sampler.close()
        if self.times is not None:
            self.times.close()
        if self.gpu is not None:
            self.torch.cuda.synchronize(self.device)
            self.gpu.unregister_host(self.block.host_address)
        # the device memory of this stage (the L2 flush buffer, the input sets' pool) goes back with it, so that the
        # reference process's empty_cache after a detach returns it to the device at once
        self.flush = self.seal_out = self._pool = None
        self.shared = self.staging = []
        self.freezer.close()
        self.block.close()


_AGREE: dict[tuple[str, str], bool] = {}  # (library, device) -> whether its comparison kernels gave torch's figures


def _kernels_agree(gpu: GpuLib, library: str, device: str) -> bool:
    """Whether the comparison kernels of ``library`` give torch's figures on ``device`` (``compare.fused_agrees``),
    tried once per process; where they do not, the checks take torch's operations and stderr says so."""
    key = (str(library), str(device))
    if key not in _AGREE:
        try:
            _AGREE[key] = fused_agrees(gpu, device)
        except RuntimeError as exc:  # a kernel that did not launch
            print(f"cudagym: the comparison kernels failed ({exc}); checks take torch's operations", file=sys.stderr)
            _AGREE[key] = False
        else:
            if not _AGREE[key]:
                print(
                    "cudagym: the comparison kernels disagree with torch here; checks take torch's operations",
                    file=sys.stderr,
                )
    return _AGREE[key]


def set_budget_bytes(device: str) -> int:
    """The memory the input sets beyond the first may take on ``device`` (``SET_BUDGET_CUDA_MAX`` and friends)."""
    if not device.startswith("cuda"):
        return SET_BUDGET_CPU
    import torch

    total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    return min(SET_BUDGET_CUDA_MAX, total // SET_BUDGET_CUDA_SHARE)


def _above_median(ordered: list[float]) -> float:
    """How far above its median the 90th percentile of ``ordered`` lies, estimated from the median absolute deviation
    (1.2816 standard deviations of a normal spread, 1.4826 MADs each): a few outlying calibration handshakes do not
    move it, where the sample's own 90th percentile of ten is its second largest value."""
    middle = statistics.median(ordered)
    return 1.2816 * 1.4826 * statistics.median(abs(v - middle) for v in ordered)


def _templates(expected: Any) -> list[dict[str, Any]]:
    """The reference output's structure, for the candidate's calibration outputs (one entry per tensor)."""
    import torch

    items = flatten(expected) or []
    container = type(expected).__name__
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, torch.Tensor):
            out.append(
                {
                    "container": container,
                    "dtype": dtype_name(item.dtype),
                    "shape": list(item.shape),
                    "nbytes": item.nbytes,
                }
            )
    return out


def require_time_slicing() -> str:
    """Why the clock cannot time on this machine, or "": kernels of two processes must never run at once on the
    GPU, which holds unless the CUDA MPS server shares it between them."""
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    if os.path.exists(os.path.join(pipe, "control")):
        return (
            f"the CUDA MPS server is running ({pipe}): kernels of different processes may run at once there, "
            "so no clock can tell the candidate's work from its own"
        )
    return ""


__all__ = ["CALIBRATING", "Calibration", "CandidateSilent", "Clock", "Handshake", "require_time_slicing"]
