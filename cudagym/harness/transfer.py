"""How inputs and outputs travel between the reference and the candidate process.

Two transports:

* ``file``: torch.save files in RAM-backed scratch (the CPU backend, and ncu runs). The reference
  writes the inputs; the candidate writes its outputs, which the reference reads with
  ``weights_only=True`` (plain tensors only).
* ``ipc``: CUDA IPC (the cuda backend). The reference owns *shared buffers* for the inputs and for
  the candidate's outputs; the candidate maps them into its own address space. GPU-sized data then
  never leaves the device: a check costs a device-to-device copy instead of gigabytes through files.

The shared buffers live in a private CUDA memory pool, so the allocation segments a candidate can map
hold only those buffers, never a reference output. The same buffers are reused for every input set
of a task: fresh data written into the same addresses is what defeats caching by pointer.
Output buffers are poisoned before each run (NaN for floating types, a value different from the
expected one elsewhere), so an element the candidate never writes fails the comparison.

Imports only the standard library and torch (runs inside the children).
"""

from __future__ import annotations

import base64
from typing import Any

JSON_SCALARS = (int, float, bool, str, type(None))


def _b64(value: bytes | None) -> str | None:
    return base64.b64encode(value).decode() if value is not None else None


def _unb64(value: str | None) -> bytes | None:
    return base64.b64decode(value) if value is not None else None


def export_cuda(tensor: Any) -> dict[str, Any]:
    """An IPC description of ``tensor``'s storage (JSON-able; no pickle crosses the process boundary)."""
    storage = tensor.untyped_storage()
    device, handle, size, offset, ref_handle, ref_offset, event, event_sync = storage._share_cuda_()
    return {
        "device": device,
        "handle": _b64(handle),
        "size": size,
        "offset": offset,
        "ref_handle": _b64(ref_handle),
        "ref_offset": ref_offset,
        "event": _b64(event),
        "event_sync": event_sync,
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()),
        "storage_offset": tensor.storage_offset(),
    }


class IpcOpener:
    """Maps IPC descriptions into tensors, each storage once per process (CUDA refuses to open a handle
    twice), so a buffer refilled by the reference is the same tensor, at the same address, every time."""

    def __init__(self) -> None:
        self._storages: dict[tuple[str, int], Any] = {}

    def open(self, spec: dict[str, Any]) -> Any:
        import torch

        key = (spec["handle"], spec["offset"])
        storage = self._storages.get(key)
        if storage is None:
            torch.cuda._lazy_init()
            storage = torch.UntypedStorage._new_shared_cuda(
                spec["device"],
                _unb64(spec["handle"]),
                spec["size"],
                spec["offset"],
                _unb64(spec["ref_handle"]),
                spec["ref_offset"],
                _unb64(spec["event"]),
                spec["event_sync"],
            )
            self._storages[key] = storage
        dtype = getattr(torch, spec["dtype"])
        typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)
        return torch._utils._rebuild_tensor(typed, spec["storage_offset"], tuple(spec["shape"]), tuple(spec["stride"]))

    def close(self) -> None:
        self._storages.clear()


def encode_items(items: list[Any], export: Any) -> list[dict[str, Any]] | None:
    """Describes a list of inputs: tensors through ``export``, JSON scalars by value; None when an item is
    neither (such input sets travel as files)."""
    import torch

    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, torch.Tensor):
            out.append({"tensor": export(item)})
        elif isinstance(item, JSON_SCALARS):
            out.append({"value": item})
        else:
            return None
    return out


class SharedBuffers:
    """The reference's device buffers shared with candidates (see the module docstring)."""

    def __init__(self) -> None:
        import torch

        self.pool = torch.cuda.MemPool()
        self._buffers: dict[str, list[Any]] = {"inputs": [], "outputs": []}
        self._specs: dict[str, list[dict[str, Any]]] = {"inputs": [], "outputs": []}

    def place(self, role: str, tensors: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
        """Buffers shaped like ``tensors`` for ``role`` ("inputs" or "outputs"): the current ones when they
        match, new ones from the private pool otherwise. Returns (buffers, their IPC descriptions)."""
        import torch

        current = self._buffers[role]
        same = len(current) == len(tensors) and all(
            c.shape == t.shape and c.dtype == t.dtype and c.stride() == t.stride()
            for c, t in zip(current, tensors, strict=True)
        )
        if not same:
            with torch.cuda.use_mem_pool(self.pool):
                current = [torch.empty_like(t) for t in tensors]
            self._buffers[role] = current
            self._specs[role] = [export_cuda(b) for b in current]
        return current, self._specs[role]

    @property
    def inputs(self) -> list[Any]:
        return self._buffers["inputs"]

    @property
    def outputs(self) -> list[Any]:
        return self._buffers["outputs"]

    def release(self) -> None:
        """Drops the buffers (memory a killed candidate still maps stays reserved until this process ends)."""
        import torch

        self._buffers = {"inputs": [], "outputs": []}
        self._specs = {"inputs": [], "outputs": []}
        torch.cuda.synchronize()
        torch.cuda.ipc_collect()


def poison(buffer: Any, expected: Any) -> None:
    """Fills an output buffer so that any element left unwritten differs from ``expected``."""
    import torch

    if buffer.is_floating_point() or buffer.is_complex():
        buffer.fill_(float("nan"))
    elif buffer.dtype == torch.bool:
        torch.logical_not(expected, out=buffer)
    else:
        buffer.copy_(expected)
        buffer.add_(1)


def same_values(a: Any, b: Any) -> bool:
    """Bitwise-equal tensors, NaN equal to NaN (for the inputs-unchanged and determinism checks)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))
