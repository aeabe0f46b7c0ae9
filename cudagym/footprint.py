"""Whether a task's tensors fit the backend's memory, judged at ``reset`` before anything is allocated.

KernelBench's level-1 sizes make tensors of several GB (19_ReLU: 6.4 GB an input, as much again for the output),
which a CPU machine cannot evaluate: the reference process ran out of memory inside ``submit``. An environment
estimates a task's bytes at its sizes (one input set and its output) and compares what an evaluation holds at least,
:data:`WORKING_COPIES` times that, with the memory there is: available host memory on cpu, the GPU's memory on cuda.
A task that does not fit gets a ``logging`` warning and a note in the first observation (``cudagym.tasks.load(...,
sizes=)`` shrinks it); nothing raises.

The estimate runs the task's ``get_inputs`` (and, where it can, the model) on torch's ``meta`` device in this process:
shapes and dtypes without memory or computation. It is kept per source and dtype in memory and under
``<cache_dir>/footprints/``, so a warm cache never imports torch here. A source that cannot run on ``meta`` (or needs
packages beyond cudagym's) gets no estimate and no warning.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import logging
import os
import threading
import types
from pathlib import Path
from typing import Any

from cudagym.backends import Backend
from cudagym.gpu_lock import nvidia_smi_selector, query_gpu_field
from cudagym.tasks.task import Task, module_constants

logger = logging.getLogger(__name__)

WORKING_COPIES = 2
"""Copies of one input set and its output that an evaluation holds at least: the reference process's and the
candidate's (the float64 twin, the clock's buffers and check 1 kept for the determinism repeat add more)."""

_KNOWN: dict[str, TaskBytes] = {}
_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class TaskBytes:
    """The bytes of one input set of a task and of its output (None where the model could not run on ``meta``)."""

    input_bytes: int
    output_bytes: int | None = None

    @property
    def total(self) -> int:
        """Inputs and output (the inputs alone where the output is not known)."""
        return self.input_bytes + (self.output_bytes or 0)


@dataclasses.dataclass(frozen=True)
class MemoryCheck:
    """A task's estimated needs against the backend's memory.

    Attributes:
        need_bytes: :data:`WORKING_COPIES` times one input set and its output.
        available_bytes: available host memory (cpu) or the GPU's total memory (cuda).
        task_bytes: the estimate it rests on.
    """

    need_bytes: int
    available_bytes: int
    task_bytes: TaskBytes
    sizes: str = ""  # the task's module-level integer constants as ``name=value, ...`` (what ``sizes=`` rewrites)

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.available_bytes

    def warning(self, task_id: str, backend: str) -> str:
        """One line for the log and the first observation."""
        where = "available host memory" if backend == "cpu" else "the GPU's memory"
        output = "" if self.task_bytes.output_bytes is not None else " (output size unknown: inputs only)"
        return (
            f"task {task_id} needs at least {_gb(self.need_bytes)} ({WORKING_COPIES} copies of an input set and its "
            f"output, {_gb(self.task_bytes.total)}{output}) but {where} is {_gb(self.available_bytes)}: its "
            "evaluation will likely fail with a harness error. Load the task set with smaller sizes "
            f"(gym.make(..., sizes={{NAME: VALUE}}), `cudagym tasks check --sizes NAME=VALUE`){self._constants()}."
        )

    def _constants(self) -> str:
        return f"; this task's size constants: {self.sizes}" if self.sizes else ""


def check_memory(task: Task, backend: Backend, cache_dir: str | Path) -> MemoryCheck | None:
    """The task's needs against the backend's memory, or None when either cannot be told."""
    estimate = task_bytes(task, backend.name, cache_dir)
    available = available_memory(backend)
    if estimate is None or available is None:
        return None
    return MemoryCheck(
        WORKING_COPIES * estimate.total, available, estimate, _size_constants(task.source_for(backend.name))
    )


def available_memory(backend: Backend) -> int | None:
    """Bytes there are for a task: ``MemAvailable`` of /proc/meminfo on cpu, the GPU's total memory on cuda."""
    if backend.is_cuda:
        mib = query_gpu_field(nvidia_smi_selector(backend), "memory.total")
        try:
            return int(float(mib) * 1024**2) if mib else None
        except ValueError:
            return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def task_bytes(task: Task, backend: str, cache_dir: str | Path) -> TaskBytes | None:
    """The bytes of one input set of ``task`` on ``backend`` and of its output (see the module docstring)."""
    if task.metadata.requires:  # its module imports packages beyond cudagym's (and may fetch weights)
        return None
    source = task.source_for(backend)
    key = hashlib.sha256(f"{source}\0{task.metadata.dtype}".encode()).hexdigest()[:24]
    with _LOCK:
        if key in _KNOWN:
            return _KNOWN[key]
    file = Path(cache_dir) / "footprints" / f"{key}.json"
    try:
        found = TaskBytes(**json.loads(file.read_text()))
    except (OSError, ValueError, TypeError):
        found = _estimate(source, task.metadata.dtype)
        if found is None:
            return None
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(found)))
        os.replace(tmp, file)
    with _LOCK:
        _KNOWN[key] = found
    return found


def _estimate(source: str, dtype: str) -> TaskBytes | None:
    """Runs the task module's ``get_inputs`` and, where it can, ``Model`` on the ``meta`` device."""
    import torch

    module = types.ModuleType("cudagym_footprint_model")
    try:
        with torch.device("meta"):
            exec(compile(source, "model.py", "exec"), module.__dict__)  # the task set's reference, not the agent's
            inputs = list(module.get_inputs())
    except Exception as exc:  # a reference that cannot run on meta: no estimate
        logger.debug("no memory estimate for a task: %s: %s", type(exc).__name__, exc)
        return None
    width = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    input_bytes = sum(_bytes(x, width) for x in inputs)
    try:
        with torch.device("meta"), torch.no_grad():
            model = module.Model(*module.get_init_inputs())
            output_bytes: int | None = sum(_bytes(x, width) for x in _tensors(model(*inputs)))
    except Exception as exc:  # an op without a meta kernel: the inputs alone
        logger.debug("no output estimate for a task: %s: %s", type(exc).__name__, exc)
        output_bytes = None
    return TaskBytes(input_bytes, output_bytes)


def _size_constants(source: str) -> str:
    """The module-level integer constants of ``source``, as ``name=value, ...``."""
    found = []
    for name, node in module_constants(source).items():
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, SyntaxError, TypeError):
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            found.append(f"{name}={value}")
    return ", ".join(found)


def _bytes(value: Any, float_width: int) -> int:
    """A tensor's bytes as evaluated (floating tensors in the task's dtype); 0 for anything else."""
    import torch

    if not isinstance(value, torch.Tensor):
        return 0
    width = float_width if value.is_floating_point() else value.element_size()
    return value.numel() * width


def _tensors(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return [value]


def _gb(count: int) -> str:
    return f"{count / 1e9:.3g} GB"
