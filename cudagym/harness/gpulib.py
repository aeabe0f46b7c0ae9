"""The trusted side's small CUDA library, and the driver calls that share device memory between processes.

Kernels (built once per cache directory and architecture with nvcc, loaded with ctypes):

* **hold**: occupies every thread slot of every SM for a set time. The baselines' event timing launches it before
  its start event, so the host path into the timed call's first kernel (Python, the dispatcher, the launch) happens
  while the GPU is busy and is not timed (the trusted clock needs none: the candidate queues its calls before the
  interval). It takes every thread slot, so no kernel of another stream can run beside it; copy engines are
  not SMs: an asynchronous copy on a side stream can overlap it, for at most the hold's length.
* **flag**: writes a 64-bit value into host memory mapped for the device, after every earlier write of the stream
  is visible system-wide: how a stream says "done" (or "go") to a process spinning on that memory.
* **hash**: a keyed 64-bit digest of a byte range (each 16-byte word mixed with its position and the key, summed).
  The clock seals a candidate's output inside the timed interval with it; a later change of the output, by the
  candidate after the interval, changes the digest, and without the key (fresh for every handshake) no change can
  be made that keeps it.
* **fill**: writes a byte pattern over a range (poisoning outputs through a mapping).
* **tolerance** and **precision**: the figures of the trusted comparison of a float32 output (``compare.py``) in one
  read of each tensor, where torch's operations take several passes and temporaries: the largest excess over the
  tolerance with the first element that holds it and the largest error; the largest differences from the float64
  reference. Maxima are exact whatever the order of the reduction, so the figures are torch's, element for element.

Stream waits (``libcuda``'s ``cuStreamWaitValue32`` through ctypes): a stream stops until a word of memory mapped for
the device reaches a value, without occupying an SM, so that the other process's context has the GPU meanwhile. The
candidate queues its calls behind a wait for the clock's *go*; the clock's stream waits for the candidate's *done*.

Driver calls (``libcuda`` through ctypes): an allocation's interprocess handle and the range it covers, and the
opening and closing of a handle exported by another process. torch's own sharing (``_share_cuda_``) also creates
reference-count files in /dev/shm, which a candidate with a private /dev/shm cannot see; these calls need nothing
but the driver.

Kept free of cudagym imports (the children import it by path); ``build`` needs ``nvcc``.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import os
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Any

SOURCE = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// each block spins from its own start until ns have passed: the blocks start together, since the grid fits
__global__ void __launch_bounds__(1024) cudagym_hold_every_sm(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
}

__global__ void cudagym_flag_kernel(volatile unsigned long long* where, unsigned long long value) {
  __threadfence_system();
  *where = value;
  __threadfence_system();
}

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z;
}

// words: 16-byte words from an aligned start; head/tail: the bytes before and after them, folded in by block 0
__global__ void cudagym_hash_kernel(const unsigned char* head, unsigned long long head_bytes, const uint4* words,
                                    unsigned long long count, const unsigned char* tail,
                                    unsigned long long tail_bytes, unsigned long long key,
                                    unsigned long long* out) {
  unsigned long long acc = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    const uint4 v = words[i];
    const unsigned long long a = ((unsigned long long)v.x << 32) | v.y;
    const unsigned long long b = ((unsigned long long)v.z << 32) | v.w;
    acc += mix64((a ^ key) + (i + 1) * 0x9E3779B97F4A7C15ull) ^ mix64((b ^ (key * 3)) + i);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (unsigned long long j = 0; j < head_bytes; ++j) acc += mix64((head[j] ^ key) + 0x1000 + j);
    for (unsigned long long j = 0; j < tail_bytes; ++j) acc += mix64((tail[j] ^ key) + 0x2000 + j);
  }
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}

__global__ void cudagym_fill_kernel(unsigned char* where, unsigned long long bytes, unsigned int pattern) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride)
    where[i] = (unsigned char)(pattern >> (8 * (i & 3)));
}

// a float's bits as an unsigned integer of the same order (negative below positive); -0 reads as +0, so equal values
// tie as torch's argmax ties them
__device__ __forceinline__ unsigned int ordered_bits(float v) {
  const unsigned int u = __float_as_uint(__fadd_rn(v, 0.0f));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const unsigned long long other = __shfl_down_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// the tolerance figures of a float32 output a against its reference e (n < 2^32 elements, both contiguous), each
// element's excess |a - e| - (atol + rtol * |e|) rounded step by step as torch's operations round it:
// out[0]: the largest excess (ordered bits, high word) with the complement of the first index holding it (low word);
// out[1]: the bits of the largest error |a - e|; out[2]: nonzero where an excess is NaN. out starts zeroed.
__global__ void cudagym_tolerance_kernel(const float* e, const float* a, unsigned long long n, float atol, float rtol,
                                         unsigned long long* out) {
  unsigned long long best = 0, largest = 0, nan = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float ev = e[i];
    const float err = fabsf(__fsub_rn(a[i], ev));
    const float tolerance = __fadd_rn(__fmul_rn(fabsf(ev), rtol), atol);
    const float excess = __fsub_rn(err, tolerance);
    if (isnan(excess)) {
      nan = 1;
      continue;
    }
    const unsigned long long key = ((unsigned long long)ordered_bits(excess) << 32) | (0xFFFFFFFFull - i);
    best = key > best ? key : best;
    const unsigned long long bits = __float_as_uint(err);
    largest = bits > largest ? bits : largest;
  }
  best = warp_max(best);
  largest = warp_max(largest);
  nan = warp_max(nan);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(out, best);
    atomicMax(out + 1, largest);
    if (nan) atomicMax(out + 2, nan);
  }
}

// the precision figures of a float32 output a against the float64 reference e64 and the float32 one e32 (n elements,
// all contiguous), differences in float64 as torch takes them: out[0..2] the bits of max |e64 - e32|, max |e64| and
// max |a - e64| (non-negative doubles order as their bits); out[3] nonzero where any of them is NaN. out starts zeroed.
__global__ void cudagym_precision_kernel(const float* e32, const double* e64, const float* a, unsigned long long n,
                                         unsigned long long* out) {
  unsigned long long own = 0, magnitude = 0, err = 0, nan = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double wide = e64[i];
    const double d_own = fabs(__dsub_rn(wide, (double)e32[i]));
    const double d_mag = fabs(wide);
    const double d_err = fabs(__dsub_rn((double)a[i], wide));
    if (isnan(d_own) || isnan(d_mag) || isnan(d_err)) {
      nan = 1;
      continue;
    }
    const unsigned long long b_own = __double_as_longlong(d_own), b_mag = __double_as_longlong(d_mag);
    const unsigned long long b_err = __double_as_longlong(d_err);
    own = b_own > own ? b_own : own;
    magnitude = b_mag > magnitude ? b_mag : magnitude;
    err = b_err > err ? b_err : err;
  }
  own = warp_max(own);
  magnitude = warp_max(magnitude);
  err = warp_max(err);
  nan = warp_max(nan);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(out, own);
    atomicMax(out + 1, magnitude);
    atomicMax(out + 2, err);
    if (nan) atomicMax(out + 3, nan);
  }
}

extern "C" {
int cudagym_hold(void* stream, unsigned long long ns, int blocks, int threads) {
  cudagym_hold_every_sm<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(ns);
  return static_cast<int>(cudaGetLastError());
}

int cudagym_flag(void* stream, void* where, unsigned long long value) {
  cudagym_flag_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<volatile unsigned long long*>(where), value);
  return static_cast<int>(cudaGetLastError());
}

int cudagym_hash(void* stream, const void* data, unsigned long long bytes, unsigned long long key, void* out,
                 int blocks) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(data);
  uintptr_t aligned = (start + 15) & ~static_cast<uintptr_t>(15);
  if (aligned > start + bytes) aligned = start + bytes;
  const unsigned long long head = aligned - start;
  const unsigned long long count = (bytes - head) / 16;
  const unsigned long long tail = bytes - head - count * 16;
  cudagym_hash_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const unsigned char*>(start), head, reinterpret_cast<const uint4*>(aligned), count,
      reinterpret_cast<const unsigned char*>(aligned + count * 16), tail, key,
      static_cast<unsigned long long*>(out));
  return static_cast<int>(cudaGetLastError());
}

int cudagym_fill(void* stream, void* where, unsigned long long bytes, unsigned int pattern, int blocks) {
  cudagym_fill_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<unsigned char*>(where), bytes, pattern);
  return static_cast<int>(cudaGetLastError());
}

int cudagym_tolerance(void* stream, const void* e, const void* a, unsigned long long n, float atol, float rtol,
                      void* out, int blocks) {
  cudagym_tolerance_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(e), static_cast<const float*>(a), n, atol, rtol, static_cast<unsigned long long*>(out));
  return static_cast<int>(cudaGetLastError());
}

int cudagym_precision(void* stream, const void* e32, const void* e64, const void* a, unsigned long long n, void* out,
                      int blocks) {
  cudagym_precision_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(e32), static_cast<const double*>(e64), static_cast<const float*>(a), n,
      static_cast<unsigned long long*>(out));
  return static_cast<int>(cudaGetLastError());
}

int cudagym_register_host(void* host, unsigned long long bytes, void** device) {
  int code = static_cast<int>(cudaHostRegister(host, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
  if (code != 0) return code;
  return static_cast<int>(cudaHostGetDevicePointer(device, host, 0));
}

int cudagym_unregister_host(void* host) { return static_cast<int>(cudaHostUnregister(host)); }
}
"""

_SIGNATURES: dict[str, list[Any]] = {
    "cudagym_hold": [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_int],
    "cudagym_flag": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong],
    "cudagym_hash": [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_ulonglong,
        ctypes.c_ulonglong,
        ctypes.c_void_p,
        ctypes.c_int,
    ],
    "cudagym_fill": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_uint, ctypes.c_int],
    "cudagym_tolerance": [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_ulonglong,
        ctypes.c_float,
        ctypes.c_float,
        ctypes.c_void_p,
        ctypes.c_int,
    ],
    "cudagym_precision": [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_ulonglong,
        ctypes.c_void_p,
        ctypes.c_int,
    ],
    "cudagym_register_host": [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_void_p)],
    "cudagym_unregister_host": [ctypes.c_void_p],
}


def library_name(arch: str) -> str:
    """The built library's file name: the source's hash and the architecture, so a changed source rebuilds."""
    digest = hashlib.sha256(f"{SOURCE}\0{arch}".encode()).hexdigest()[:16]
    return f"cudagym_gpulib_{arch}_{digest}.so"


def build(folder: Path, arch: str, nvcc: str = "nvcc", timeout: float = 120.0) -> Path:
    """Builds the library for ``arch`` (e.g. ``sm_90``) into ``folder`` unless it is there already; returns its path.
    The file appears whole or not at all (built beside it, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / library_name(arch)
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=folder, prefix=".gpulib-") as tmp:
        source = Path(tmp) / "gpulib.cu"
        source.write_text(SOURCE)
        built = Path(tmp) / "gpulib.so"
        command = [nvcc, "-O2", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", "-o", str(built), str(source)]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"building the GPU library failed: {proc.stderr[-2000:]}")
        os.replace(built, target)
    return target


CU_STREAM_WAIT_VALUE_GEQ = 0x0


def _driver_function(names: tuple[str, ...]) -> Any:
    """The first of ``names`` that ``libcuda`` exports (newer drivers keep the older spelling too)."""
    driver = ctypes.CDLL("libcuda.so.1")
    for name in names:
        function = getattr(driver, name, None)
        if function is not None:
            return function
    raise RuntimeError(f"libcuda exports none of {', '.join(names)}")


class GpuLib:
    """The loaded library for one device; every launch goes on the current stream unless a stream is given."""

    def __init__(self, library: str | os.PathLike[str], device: Any) -> None:
        import torch

        self._torch = torch
        self._lib = ctypes.CDLL(str(library))
        for name, argtypes in _SIGNATURES.items():
            function = getattr(self._lib, name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int
        props = torch.cuda.get_device_properties(device)
        per_sm = int(props.max_threads_per_multi_processor)
        # whole blocks of at most 1,024 threads that fill an SM's thread slots exactly (2,048 on sm_90: 2 x 1,024)
        self.threads = next(t for t in (1024, 768, 512, 384, 256, 128, 64, 32) if per_sm % t == 0)
        self.blocks = int(props.multi_processor_count) * (per_sm // self.threads)
        self.streaming_blocks = int(props.multi_processor_count) * 4  # for the hash and the fill
        self.fused_blocks = int(props.multi_processor_count) * 8  # the comparison's figures: more loads in flight
        self.device = device
        self._wait_value = _driver_function(("cuStreamWaitValue32_v2", "cuStreamWaitValue32"))
        self._wait_value.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self._wait_value.restype = ctypes.c_int

    def _stream(self, stream: Any = None) -> int:
        return int((stream or self._torch.cuda.current_stream(self.device)).cuda_stream)

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed (cudaError {code})")

    def hold(self, microseconds: float, stream: Any = None) -> None:
        """Keeps every SM busy for ``microseconds``, from when the stream reaches this launch."""
        code = self._lib.cudagym_hold(self._stream(stream), int(microseconds * 1000), self.blocks, self.threads)
        self._check(code, "the hold kernel")

    def launch(self, microseconds: float) -> None:
        """``hold`` on the current stream (the name the timing loop uses)."""
        self.hold(microseconds)

    def flag(self, device_address: int, value: int, stream: Any = None) -> None:
        """Writes ``value`` at ``device_address`` (host memory mapped for the device) once the stream gets here."""
        self._check(self._lib.cudagym_flag(self._stream(stream), device_address, value), "the flag kernel")

    def hash(self, address: int, nbytes: int, key: int, out_address: int, stream: Any = None) -> None:
        """Adds the keyed digest of ``nbytes`` at ``address`` to the int64 at ``out_address`` (zero it first)."""
        code = self._lib.cudagym_hash(
            self._stream(stream), address, nbytes, key & (2**64 - 1), out_address, self.streaming_blocks
        )
        self._check(code, "the hash kernel")

    def fill(self, address: int, nbytes: int, pattern: int, stream: Any = None) -> None:
        """Writes the 32-bit ``pattern`` (little-endian, repeated) over ``nbytes`` at ``address``."""
        code = self._lib.cudagym_fill(self._stream(stream), address, nbytes, pattern, self.streaming_blocks)
        self._check(code, "the fill kernel")

    def tolerance(self, exp: Any, act: Any, atol: float, rtol: float) -> tuple[bool, float, int, float] | None:
        """The tolerance figures of float32 output ``act`` against ``exp`` (``compare.FusedFigures``): whether an
        excess was NaN, the largest excess, the first flat index holding it, and the largest error; None where the
        kernel does not take these tensors (``_fusable``)."""
        torch = self._torch
        if not _fusable(torch, self.device, torch.float32, exp, act):
            return None
        out = torch.zeros(3, dtype=torch.int64, device=exp.device)
        code = self._lib.cudagym_tolerance(
            self._stream(), exp.data_ptr(), act.data_ptr(), exp.numel(), atol, rtol, out.data_ptr(), self.fused_blocks
        )
        self._check(code, "the tolerance kernel")
        key, largest, nan = (v & (2**64 - 1) for v in out.tolist())
        ordered, index = key >> 32, 0xFFFFFFFF - (key & 0xFFFFFFFF)
        bits = ordered & 0x7FFFFFFF if ordered & 0x80000000 else ~ordered & 0xFFFFFFFF
        return bool(nan), _float_of(bits), index, _float_of(largest)

    def precision(self, exp32: Any, exp64: Any, act: Any) -> tuple[bool, float, float, float] | None:
        """The precision figures of float32 output ``act`` (``compare.FusedFigures``): whether a difference was NaN,
        max |exp64 - exp32|, max |exp64| and max |act - exp64| in float64; None where the kernel does not take these
        tensors."""
        torch = self._torch
        if not (
            _fusable(torch, self.device, torch.float32, exp32, act)
            and _fusable(torch, self.device, torch.float64, exp64)
        ):
            return None
        if exp64.shape != exp32.shape:
            return None
        out = torch.zeros(4, dtype=torch.int64, device=exp32.device)
        code = self._lib.cudagym_precision(
            self._stream(),
            exp32.data_ptr(),
            exp64.data_ptr(),
            act.data_ptr(),
            exp32.numel(),
            out.data_ptr(),
            self.fused_blocks,
        )
        self._check(code, "the precision kernel")
        own, magnitude, err, nan = (v & (2**64 - 1) for v in out.tolist())
        return bool(nan), _double_of(own), _double_of(magnitude), _double_of(err)

    def wait(self, device_address: int, value: int, stream: Any = None) -> None:
        """Makes the stream wait until the 32-bit word at ``device_address`` (host memory mapped for the device)
        reaches ``value`` (``(int32)(word - value) >= 0``): later work of the stream starts only then."""
        code = self._wait_value(self._stream(stream), device_address, value & 0xFFFFFFFF, CU_STREAM_WAIT_VALUE_GEQ)
        self._check(code, "cuStreamWaitValue32")

    def register_host(self, host_address: int, nbytes: int) -> int:
        """Pins and maps host memory for the device; returns its device address."""
        device = ctypes.c_void_p()
        self._check(self._lib.cudagym_register_host(host_address, nbytes, ctypes.byref(device)), "cudaHostRegister")
        return int(device.value or 0)

    def unregister_host(self, host_address: int) -> None:
        self._lib.cudagym_unregister_host(host_address)


MAX_FUSED_ELEMENTS = 1 << 32  # the tolerance kernel keeps an element's index in 32 bits


def _fusable(torch: Any, device: Any, dtype: Any, *tensors: Any) -> bool:
    """Whether the comparison kernels take ``tensors``: of ``dtype``, contiguous, on ``device``, one shape, not empty
    and fewer than ``MAX_FUSED_ELEMENTS`` elements."""
    first = tensors[0]
    if not 0 < first.numel() < MAX_FUSED_ELEMENTS:
        return False
    where = torch.device(device)
    return all(
        type(t) is torch.Tensor
        and t.dtype == dtype
        and t.is_contiguous()
        and t.device.type == "cuda"
        and t.device.index == (where.index if where.index is not None else torch.cuda.current_device())
        and t.shape == first.shape
        for t in tensors
    )


def _float_of(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def _double_of(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits & (2**64 - 1)))[0]


# -- interprocess device memory through the driver --------------------------------------------------------------

IPC_HANDLE_BYTES = 64
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * IPC_HANDLE_BYTES)]


class CudaDriver:
    """The few driver calls that share device memory between processes (``libcuda`` through ctypes). Call from a
    thread on which torch has made the device's primary context current."""

    def __init__(self) -> None:
        self._lib = ctypes.CDLL("libcuda.so.1")
        size = ctypes.POINTER(ctypes.c_size_t)
        pointer = ctypes.POINTER(ctypes.c_uint64)
        self._range = self._lib.cuMemGetAddressRange_v2
        self._range.argtypes = [pointer, size, ctypes.c_uint64]
        self._export = self._lib.cuIpcGetMemHandle
        self._export.argtypes = [ctypes.POINTER(_IpcHandle), ctypes.c_uint64]
        self._open = self._lib.cuIpcOpenMemHandle_v2
        self._open.argtypes = [pointer, _IpcHandle, ctypes.c_uint]
        self._close = self._lib.cuIpcCloseMemHandle
        self._close.argtypes = [ctypes.c_uint64]
        for function in (self._range, self._export, self._open, self._close):
            function.restype = ctypes.c_int

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed (CUresult {code})")

    def allocation(self, address: int) -> tuple[int, int]:
        """(base, size) of the device allocation that holds ``address``."""
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        self._check(self._range(ctypes.byref(base), ctypes.byref(size), address), "cuMemGetAddressRange")
        return int(base.value), int(size.value)

    def export(self, base: int) -> str:
        """The interprocess handle of the allocation at ``base``, base64-encoded."""
        handle = _IpcHandle()
        self._check(self._export(ctypes.byref(handle), base), "cuIpcGetMemHandle")
        return base64.b64encode(bytes(handle.reserved)).decode()

    def open(self, handle: str) -> int:
        """Maps another process's allocation (its handle from ``export``); returns the address here."""
        raw = base64.b64decode(handle)
        if len(raw) != IPC_HANDLE_BYTES:
            raise ValueError("not an interprocess handle")
        address = ctypes.c_uint64()
        handle = _IpcHandle((ctypes.c_ubyte * IPC_HANDLE_BYTES).from_buffer_copy(raw))
        self._check(self._open(ctypes.byref(address), handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
        return int(address.value)

    def close(self, address: int) -> None:
        self._close(address)


TYPESTR = {
    "float64": "<f8",
    "float32": "<f4",
    "float16": "<f2",
    "int64": "<i8",
    "int32": "<i4",
    "int16": "<i2",
    "int8": "|i1",
    "uint8": "|u1",
    "bool": "|b1",
    "complex64": "<c8",
    "complex128": "<c16",
}
"""Element types that ``__cuda_array_interface__`` names; others (bfloat16) are built on bytes and viewed."""


class _DeviceBytes:
    """``nbytes`` of device memory at ``address``, as ``__cuda_array_interface__`` describes them."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
            "strides": None,
        }


def device_view(address: int, nbytes: int, dtype: Any, shape: list[int], stride: list[int]) -> Any:
    """A tensor over existing device memory (no copy): ``nbytes`` at ``address`` seen as ``dtype`` with ``shape`` and
    ``stride`` (in elements). The caller keeps the memory mapped while the tensor is used."""
    import torch

    raw = torch.as_tensor(_DeviceBytes(address, nbytes), device="cuda")
    element = torch.empty(0, dtype=dtype).element_size()
    typed = raw[: nbytes - nbytes % element].view(dtype)
    return typed.as_strided(tuple(shape), tuple(stride), 0)
