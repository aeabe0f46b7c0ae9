"""Helpers shared by the two child roles (reference and candidate). Imports only the standard library
and torch; the children run the harness as ``cudagym.harness.*`` without the cudagym package's ``__init__``
(``launch_arguments``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import sys
import time
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

# Runs the module ``sys.argv[1]`` as ``__main__`` like ``python -m`` would, but with ``cudagym`` a bare package whose
# ``__init__`` never runs: it imports Gymnasium, whose numpy starts BLAS threads on import, and a process with a
# second thread cannot enter a user namespace (``unshare(CLONE_NEWUSER)`` fails with EINVAL), which a candidate must
# do before anything else. The harness imports nothing of cudagym outside ``cudagym.harness``.
_BOOTSTRAP = (
    "import importlib.util, runpy, sys\n"
    "sys.modules['cudagym'] = importlib.util.module_from_spec(importlib.util.find_spec('cudagym'))\n"
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"
)


def launch_arguments(module: str) -> list[str]:
    """The interpreter arguments that run the harness module ``module`` (``cudagym.harness.<name>``) as a process's
    main module: under the one name it has in the library too, with the working directory kept off ``sys.path``
    (``-P``: no module of the agent's or the user's folder shadows the harness or torch) and without the package's
    ``__init__`` (``_BOOTSTRAP``)."""
    return ["-P", "-c", _BOOTSTRAP, module]


# environment variables the evaluator sets for a candidate process (cudagym imports them from here)
WARMUP_SLOT_ENV = "CUDAGYM_WARMUP_SLOT"  # "LOCK:GATE": the device slot it creates its CUDA context in
PROFILER_WARMUP_ENV = "CUDAGYM_PROFILER_WARMUP"  # "0": no profiler session while it warms up (an ncu run)

CUDA_ERROR_NAMES = (
    "illegal memory access",
    "misaligned address",
    "unspecified launch failure",
    "device-side assert",
    "invalid configuration argument",
    "invalid argument",
    "too many resources requested for launch",
    "an illegal instruction was encountered",
    "out of memory",
    "invalid device function",
    "no kernel image is available",
)


class Channel:
    """The private channel to the parent: JSON lines on an inherited pipe fd, never stdout."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "w", buffering=1, closefd=True)
        os.set_inheritable(fd, False)

    def send(self, **message: Any) -> None:
        self._file.write(json.dumps(message, default=str) + "\n")
        self._file.flush()


@contextlib.contextmanager
def warmup_slot(paths: str, timeout: float = 900.0) -> Iterator[None]:
    """A shared slot of the device for the ``with`` block (``paths``: "LOCK:GATE", empty: no slot).

    The protocol of ``cudagym.gpu_lock.device_slot`` in shared mode (``take_slot``). Past ``timeout`` the
    block runs anyway."""
    if not paths:
        yield
        return
    main_path, gate_path = paths.rsplit(":", 1)
    with open(main_path, "rb") as main, open(gate_path, "rb") as gate:
        locked = take_slot(main.fileno(), gate.fileno(), exclusive=False, deadline=time.monotonic() + timeout)
        try:
            yield
        finally:
            if locked:
                fcntl.flock(main.fileno(), fcntl.LOCK_UN)


def take_slot(main: int, gate: int, *, exclusive: bool, deadline: float) -> bool:
    """Takes a device slot: ``flock`` on the lock file ``main``, exclusive or shared, through the turnstile
    file ``gate`` (taken exclusively on the way in, so a queued exclusive holder goes before shared holders
    that come after it). False when ``deadline`` (monotonic) passed first; True: release ``main`` when done.
    Used by ``cudagym.gpu_lock`` and by candidates warming up (``warmup_slot``)."""
    if not poll_flock(gate, fcntl.LOCK_EX, deadline):
        return False
    try:
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)  # a shared holder does not keep others waiting at the gate
        return poll_flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline)
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)


def poll_flock(fd: int, operation: int, deadline: float) -> bool:
    """Takes ``operation`` on ``fd`` when it can before ``deadline`` (monotonic); False when it could not."""
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.01)


def load_module(name: str, source: str, filename: str) -> types.ModuleType:
    """Executes ``source`` as a fresh module registered under ``name``."""
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % (2**32))
    except ImportError:
        pass


def describe_exception(exc: BaseException) -> dict[str, str]:
    """Type, message and a short traceback; names a CUDA fault when the message shows one."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    lowered = str(exc).lower()
    cuda_fault = next((n for n in CUDA_ERROR_NAMES if n in lowered), "")
    return {"type": type(exc).__name__, "message": str(exc)[:4000], "traceback": text[-6000:], "cuda": cuda_fault}


@contextlib.contextmanager
def harness_warnings_ignored() -> Iterator[None]:
    """Ignores the warnings raised while the harness itself calls torch (its profiler's set-up and tear-down): they
    are the harness's, not the candidate's, and would reach the agent in the candidate's output. Only the warning
    filters change, and only for the calls inside; the agent's code never runs inside."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` with every tensor in it (also inside lists and tuples, which keep their type) replaced by ``fn`` of
    it; anything else as it is."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(v, fn) for v in value)
    return value


def to_device(value: Any, device: str, dtype: Any = None) -> Any:
    """Moves tensors (also inside lists/tuples) to ``device``, casting floating ones to ``dtype``."""

    def move(tensor: Any) -> Any:
        tensor = tensor.to(device)
        return tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor

    return map_tensors(value, move)


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def configure_threads(threads: int) -> None:
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
