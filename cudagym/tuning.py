"""``Tuning``: how an evaluation is made fast, apart from what it measures (``EvalConfig``).

The settings here change how long a cycle takes and how much memory it holds, never a verdict, a time or a tier: spare
candidate processes started ahead, the fork server they come from, the task prepared while the agent still writes,
torch.compile's modules imported early, the bound on environments inside a stage per GPU, the bytecode cache the
children read, and when the reference process restarts to give back leaked device memory. The defaults suit every
user; the benchmarks and tests set them to compare or to save memory. Their ``"auto"`` values depend on the backend
and are answered in one place, :func:`resolve`, once per evaluator (``ResolvedTuning``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from cudagym import bytecode
from cudagym.backends import Backend
from cudagym.forkserver import fork_server_allowed
from cudagym.memory_slots import auto_slots

Auto = Literal["auto"]
PRESTART = {True: 2, False: 1}  # cuda, cpu: spare candidates ``prestart="auto"`` keeps (a cpu one takes a core)


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The throughput machinery of an evaluator (see the module docstring).

    Attributes:
        prestart: candidate processes kept started ahead (torch imported, CUDA and its tracing initialised), so a
            stage rarely waits for one. "auto": 2 on cuda, 1 on cpu; on cpu never more than 1.
        fork_server: fork candidates from a server that imported torch once (``cudagym/forkserver.py``) instead of
            starting new interpreters; ``$CUDAGYM_FORK_SERVER=0`` turns it off for a process (a debugging switch).
        prepare_ahead: while the agent writes and compiles, start the reference process, load the task, build its
            torch.compile and start spare candidates (a background thread per task). "auto": on for cuda, off for cpu
            (where it would take cores from the agent's compiles).
        preload_compiler: the reference process imports dynamo and the inductor from its start, so that the
            torch.compile baseline (a cold cycle's critical path) is built sooner. "auto": when preparing ahead with
            the compile baseline on.
        memory_slots: at most this many environments of one GPU inside a verify or a profile at once, whose inputs,
            buffers and reference outputs fill device memory (``cudagym/memory_slots.py``). "auto": one per 20 GiB
            of the device's memory on cuda (7 on an H200), no bound on cpu; 0: no bound.
        bytecode_cache: the children read imported modules' bytecode from ``<cache>/pycache``, which the trusted
            processes write (``cudagym/bytecode.py``): where the Python installation holds none, every child would
            compile torch from its sources. "auto": where the installation holds no bytecode and candidates cannot
            write the folder; True: always; False: never.
        max_leaked_bytes: the reference process restarts when this much device memory leaked (device memory
            mapped by killed candidates is only given back when the process that imported it ends).
    """

    prestart: int | Auto = "auto"
    fork_server: bool = True
    prepare_ahead: bool | Auto = "auto"
    preload_compiler: bool | Auto = "auto"
    memory_slots: int | Auto = "auto"
    bytecode_cache: bool | Auto = "auto"
    max_leaked_bytes: int = 4 * 1024**3

    def __post_init__(self) -> None:
        for name in ("prepare_ahead", "preload_compiler", "bytecode_cache"):
            if getattr(self, name) not in (True, False, "auto"):
                raise ValueError(f"Tuning.{name} must be True, False or 'auto', got {getattr(self, name)!r}")
        for name in ("prestart", "memory_slots"):
            value = getattr(self, name)
            if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"Tuning.{name} must be 'auto' or an integer >= 0, got {value!r}")
        if self.max_leaked_bytes <= 0:
            raise ValueError(f"Tuning.max_leaked_bytes must be > 0, got {self.max_leaked_bytes}")


@dataclasses.dataclass(frozen=True)
class ResolvedTuning:
    """A ``Tuning`` with every ``"auto"`` answered for one backend and cache (:func:`resolve`): what an evaluator
    runs with. ``memory_slots`` 0 means no bound; ``bytecode_dir`` None means the installation's own bytecode."""

    prestart: int
    fork_server: bool
    prepare_ahead: bool
    preload_compiler: bool
    memory_slots: int
    bytecode_dir: Path | None
    max_leaked_bytes: int


def prepares_ahead(tuning: Tuning, backend: Backend) -> bool:
    """Whether evaluators prepare each task in the background (``Tuning.prepare_ahead``)."""
    return tuning.prepare_ahead is True or (tuning.prepare_ahead == "auto" and backend.is_cuda)


def preloads_compiler(tuning: Tuning, backend: Backend, compile_baseline: bool) -> bool:
    """Whether reference processes import torch.compile's modules from their start (``Tuning.preload_compiler``)."""
    if not compile_baseline:
        return False
    return tuning.preload_compiler is True or (tuning.preload_compiler == "auto" and prepares_ahead(tuning, backend))


def resolve(
    tuning: Tuning,
    backend: Backend,
    cache_dir: Path,
    *,
    compile_baseline: bool = True,
    readonly_filesystem: bool | str = "auto",
) -> ResolvedTuning:
    """``tuning`` with every ``"auto"`` answered for ``backend`` and ``cache_dir`` (``compile_baseline`` and
    ``readonly_filesystem``: the ``EvalConfig`` settings two of the answers depend on). Reads the device's memory
    (nvidia-smi) when ``memory_slots`` is "auto" on cuda, and the Python installation when ``bytecode_cache`` is."""
    prestart = PRESTART[backend.is_cuda] if tuning.prestart == "auto" else int(tuning.prestart)
    if not backend.is_cuda:
        prestart = min(1, prestart)
    return ResolvedTuning(
        prestart=prestart,
        fork_server=tuning.fork_server and fork_server_allowed(),
        prepare_ahead=prepares_ahead(tuning, backend),
        preload_compiler=preloads_compiler(tuning, backend, compile_baseline),
        memory_slots=auto_slots(backend) if tuning.memory_slots == "auto" else int(tuning.memory_slots),
        bytecode_dir=bytecode.resolve(tuning.bytecode_cache, cache_dir, readonly_filesystem),
        max_leaked_bytes=tuning.max_leaked_bytes,
    )
