"""Helpers shared by the two child roles (reference and candidate). Imports only the standard library
and torch; the children run this folder as top-level modules (``python child.py``), not as cudagym."""

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
from collections.abc import Iterator
from typing import Any

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

    The protocol of ``cudagym.gpu_lock.device_slot`` in shared mode: through the turnstile (queued timing
    jobs go first), then a shared ``flock`` on the lock file. Past ``timeout`` the block runs anyway."""
    if not paths:
        yield
        return
    main_path, gate_path = paths.rsplit(":", 1)
    with open(main_path, "rb") as main, open(gate_path, "rb") as gate:
        deadline = time.monotonic() + timeout
        locked = poll_flock(gate.fileno(), fcntl.LOCK_EX, deadline)
        try:
            locked = poll_flock(main.fileno(), fcntl.LOCK_SH, deadline) and locked
        finally:
            fcntl.flock(gate.fileno(), fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(main.fileno(), fcntl.LOCK_UN)


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


def to_device(value: Any, device: str, dtype: Any = None) -> Any:
    """Moves tensors (also inside lists/tuples) to ``device``, casting floating ones to ``dtype``."""
    import torch

    if isinstance(value, torch.Tensor):
        value = value.to(device)
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device, dtype) for v in value)
    return value


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def configure_threads(threads: int) -> None:
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
