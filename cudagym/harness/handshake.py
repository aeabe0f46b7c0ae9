"""The handshake between the trusted clock (the reference process) and a candidate process, both sides' shared part.

The two processes share a *control block*: a small file in the candidate's private exchange folder, mapped by both
(and, on cuda, pinned and mapped for the device, so that streams can write into it and wait on it). Every call the
candidate makes belongs to a numbered *handshake* of one or more calls. The candidate learns nothing else: not whether
a handshake is timed, checked, a warm-up or part of verification; every handshake looks alike.

* **cuda**: the trusted side writes the number into ``ARM``; the candidate queues its calls behind a wait of its stream
  for ``GO`` (the inputs do not exist yet: its kernels cannot start), then the write of ``DONE`` by its stream, and
  describes its outputs (``DESCRIBED``). The clock then writes the inputs and ``GO`` from its own stream and its stream
  waits for ``DONE``: the candidate's host path (Python, dispatch, launches) lies before the timed interval, which holds
  only device work. A forward that waits for the device itself (``.item()``, a synchronisation) cannot finish queueing
  before ``GO``: the clock sees its progress stall (``PROGRESS``) and goes on without the queue; the rest of that
  host path is then inside the interval.
* **cpu**: the trusted side writes the number into ``GO`` when the inputs are in place (the candidate is frozen), the
  candidate runs its calls, writes a description of its outputs and then the number into ``DONE``.

Word layout (little-endian uint64 words at the start of the block):

* ``GO``: the number of the handshake the candidate may run (cuda: written by the clock's stream once the inputs are
  written; cpu: by the clock while the candidate is frozen);
* ``DONE``: the candidate's calls of that handshake are finished (cuda: written by the candidate's stream after its
  work, or by its host when a call failed; cpu: by the candidate, which also sends a datagram to wake the clock);
* ``DESCRIBED``: the candidate has written the description of that handshake's outputs (bytes from ``DESCRIPTION``);
* ``CALLS``: how many calls the handshake holds; ``SETS``..: the input set of each call;
* ``STATE``: ``CALIBRATING`` (before the agent's code is loaded), ``SERVING``, ``ENDED``;
* ``ARM`` (cuda): the number of the handshake the candidate may queue; ``PROGRESS`` (cuda): how many of its calls the
  candidate has queued (reset by the clock before each ``ARM``).

Inputs live in *input sets* owned by the trusted side: device buffers shared by CUDA IPC (cuda) or files in the
exchange folder mapped by both (cpu); ``open_inputs``/``describe_inputs`` turn them into specs and back. Imports only
the standard library and torch.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import socket
import time
from typing import Any

CONTROL_BYTES = 1 << 17
DESCRIPTION = 4096  # byte offset of the description in the control block
MAX_CALLS = 16  # calls one handshake may hold

GO, DONE, DESCRIBED, CALLS, STATE, DESCRIPTION_BYTES, ARM, PROGRESS = range(8)
SETS = 8  # word index of the first call's input set
CALIBRATING, SERVING, ENDED = 0, 1, 2

CONTROL_FILE = "control"
WAKE_SOCKET = "wake"  # cpu: the clock's datagram socket, where the candidate says "done"


class ControlBlock:
    """The mapped control block (see the module docstring)."""

    def __init__(self, path: str, *, create: bool = False) -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, CONTROL_BYTES)
            self.map = mmap.mmap(fd, CONTROL_BYTES)
        finally:
            os.close(fd)
        self.path = path
        self.words = (ctypes.c_uint64 * (DESCRIPTION // 8)).from_buffer(self.map)
        self.host_address = ctypes.addressof(self.words)
        self.device_address = 0  # set by ``map_for_device``

    def map_for_device(self, gpu: Any) -> None:
        """Pins the block and maps it for the device (cuda), so streams can write GO and DONE."""
        self.device_address = gpu.register_host(self.host_address, CONTROL_BYTES)

    def device_word(self, index: int) -> int:
        return self.device_address + 8 * index

    def write_description(self, number: int, description: dict[str, Any]) -> None:
        """Writes the description of handshake ``number``, then marks it written (``DESCRIBED``)."""
        data = json.dumps(description, separators=(",", ":"), default=str).encode()
        if len(data) > CONTROL_BYTES - DESCRIPTION:
            data = json.dumps({"error": {"type": "DescriptionTooLarge", "message": f"{len(data)} bytes"}}).encode()
        self.map[DESCRIPTION : DESCRIPTION + len(data)] = data
        self.words[DESCRIPTION_BYTES] = len(data)
        self.words[DESCRIBED] = number

    def read_description(self) -> dict[str, Any]:
        """The description last written; a garbled one reads as an error (it is the candidate's word)."""
        length = int(self.words[DESCRIPTION_BYTES])
        if not 0 < length <= CONTROL_BYTES - DESCRIPTION:
            return {"error": {"type": "BadDescription", "message": f"length {length}"}}
        try:
            value = json.loads(bytes(self.map[DESCRIPTION : DESCRIPTION + length]))
        except ValueError:
            return {"error": {"type": "BadDescription", "message": "not JSON"}}
        return value if isinstance(value, dict) else {"error": {"type": "BadDescription", "message": "not an object"}}

    def close(self) -> None:
        try:
            del self.words
            self.map.close()
        except (BufferError, ValueError, AttributeError):
            pass  # a ctypes view still alive keeps the mapping: it goes with the process


_FUTEX = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)
FUTEX_WAIT, FUTEX_WAKE = 0, 1  # shared (not FUTEX_PRIVATE): the word lives in a mapping two processes share


class _Timespec(ctypes.Structure):
    _fields_ = [("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)


def futex_wait(address: int, expected: int, timeout_s: float) -> None:
    """cpu: sleeps until the 32-bit word at ``address`` is woken (``futex_wake``), no longer holds ``expected``, or
    ``timeout_s`` passed; a thread asleep here spends no processor time (falls back to a short sleep where futexes
    cannot be reached)."""
    if _FUTEX is None:
        time.sleep(min(timeout_s, 0.0002))
        return
    timeout = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    _libc.syscall(
        ctypes.c_long(_FUTEX),
        ctypes.c_void_p(address),
        ctypes.c_int(FUTEX_WAIT),
        ctypes.c_uint32(expected & 0xFFFFFFFF),
        ctypes.byref(timeout),
        None,
        ctypes.c_uint32(0),
    )


def futex_wake(address: int) -> None:
    """cpu: wakes every thread asleep in ``futex_wait`` on the word at ``address``."""
    if _FUTEX is not None:
        _libc.syscall(
            ctypes.c_long(_FUTEX), ctypes.c_void_p(address), ctypes.c_int(FUTEX_WAKE), ctypes.c_int(1 << 30), None, None
        )


def wake(path: str) -> None:
    """cpu: tells the clock, waiting on its datagram socket at ``path``, that a handshake is done."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(b"!", path)
        except OSError:
            pass  # the clock polls DONE too


# -- input sets ----------------------------------------------------------------------------------------------

DTYPES = "float64 float32 float16 bfloat16 int64 int32 int16 int8 uint8 bool complex64 complex128".split()


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_of(name: str) -> Any:
    import torch

    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {name!r}")
    return getattr(torch, name)


def span_bytes(shape: list[int] | tuple[int, ...], stride: list[int] | tuple[int, ...], element: int) -> int:
    """Bytes a strided view touches from its first element (non-negative strides)."""
    if any(int(s) == 0 for s in shape):
        return 0
    return (sum((int(n) - 1) * int(s) for n, s in zip(shape, stride, strict=True)) + 1) * element


def cpu_input_file(folder: str, set_index: int, position: int) -> str:
    return os.path.join(folder, f"set{set_index}.in{position}")


def map_file_tensor(path: str, dtype: Any, shape: list[int], *, create: bool) -> Any:
    """A tensor over a file both processes map (cpu input sets): writes by one are seen by the other."""
    import torch

    numel = 1
    for n in shape:
        numel *= int(n)
    element = torch.empty(0, dtype=dtype).element_size()
    if create:
        with open(path, "wb") as f:
            f.truncate(max(numel * element, 1))
    flat = torch.from_file(path, shared=True, size=max(numel, 1), dtype=dtype)
    return flat[:numel].view(tuple(shape))


def open_inputs(specs: list[dict[str, Any]], opener: Any) -> list[Any]:
    """The candidate's view of one input set: tensors over shared memory, scalars by value. ``opener`` maps a device
    spec (cuda) to a tensor; it is None on cpu."""
    values: list[Any] = []
    for spec in specs:
        if "value" in spec:
            values.append(spec["value"])
        elif "file" in spec:
            values.append(map_file_tensor(spec["file"], dtype_of(spec["dtype"]), spec["shape"], create=False))
        else:
            values.append(opener(spec["device"]))
    return values
