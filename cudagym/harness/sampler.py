"""Where a CPU candidate's threads spend their time, seen from outside: the kernel samples them.

On the cpu backend nothing inside the candidate process can be trusted to say what computes its answer, and torch
compute (``at::relu`` called from the agent's C++, say) looks like any other call from the inside. The trusted clock
therefore asks the kernel (``perf_event_open``, one software event per candidate thread: a sample of the thread's
instruction pointer every ``PERIOD_NS`` of its CPU time, user space only) and attributes each sample to the file
mapped where the pointer was, read from the candidate's ``/proc/<pid>/maps``:

* **library**: torch's compute libraries (``libtorch_cpu``, MKL, oneDNN, OpenBLAS, ...);
* **runtime**: the interpreter, the C and C++ runtimes, the OpenMP runtime, ``libc10`` (the allocator), torch's
  Python bindings: glue any solution runs through;
* **own**: everything else, chiefly the candidate's extension.

Samples in ``libtorch_cpu`` that fall in functions that move data (copies, fills, allocation) or in the framework's
per-call glue (the dispatcher, operator wrappers, tensor metadata, TensorIterator's set-up: ``glue``) count as
runtime: a binding may allocate its output and make its input contiguous, and every call into torch passes through
that glue however little it computes. Torch's computation itself runs in kernels the glue reaches through function
pointers (vectorised loops, reductions, BLAS and oneDNN routines), so it is sampled there and stays *library*; a
thunk that forwards to a callable (``c10::function_ref``, ``std::function``) is judged by what it forwards to. Telling
these apart needs the library's symbols (``nm``, a few seconds once per library, cached under the cache folder); they
are read only when the library's share would otherwise fail the check.

The sampling happens while the candidate runs its calls (it is frozen otherwise), so the samples are of its calls.
Where ``perf_event_open`` is not permitted the sampler says so and observes nothing. Imports only the standard
library.
"""

from __future__ import annotations

import bisect
import ctypes
import hashlib
import json
import mmap
import os
import platform
import re
import subprocess
from pathlib import Path

from .protocol import Samples

PERIOD_NS = 100_000  # one sample per 0.1 ms of a thread's CPU time
SYMBOLS_ABOVE = 0.05  # the library's share (of own and library samples) above which its samples are symbolised
DATA_PAGES = 8  # ring buffer pages per thread (a few thousand samples between two drains)
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK = 1, 1
PERF_SAMPLE_IP, PERF_SAMPLE_TID = 1, 2
PERF_RECORD_SAMPLE = 9
PERF_FLAG_FD_CLOEXEC = 8
DISABLED, EXCLUDE_KERNEL, EXCLUDE_HV = 1, 1 << 5, 1 << 6
IOC_ENABLE = 0x2400
SYSCALL = {"x86_64": 298, "aarch64": 241}
LIBRARY = re.compile(r"/lib(torch_cpu|torch|mkl[^/]*|dnnl|mkldnn|openblas[^/]*|blas[^/]*|cblas|iomp5|xsmm)[.-]")
RUNTIME = re.compile(
    r"/(lib(c|m|dl|rt|pthread|stdc\+\+|gcc_s|gomp|c10|torch_python|torch_global_deps|python[0-9.]*|shm|util|z)"
    r"[.-][^/]*|ld-linux[^/]*|python[0-9.]*)$|^\[(vdso|vsyscall|stack|heap|anon)|^$"
)
BLAS = re.compile(r"gemm|gemv|blas|sgemm|dgemm|xsmm|matmul|addmm|baddbmm|\bmm_|bmm_|dnnl.*(conv|brg)", re.IGNORECASE)
DATA_MOVEMENT = re.compile(
    r"copy|fill|memcpy|memset|memmove|alloc|empty|contiguous|clone|zero_|resize|as_strided|view|Storage|TensorImpl"
    r"|expand|cat_|index_put|narrow|slice|select",
    re.IGNORECASE,
)
# Functions of libtorch_cpu that are per-call framework glue: the qualified name (template arguments and parameters
# taken off, see ``function_name``) starts with one of these
GLUE = re.compile(
    r"^(at::_ops::|at::TensorBase::|at::Tensor::|at::detail::|at::meta::|at::impl::|at::TensorIterator"
    r"|at::MetaBase::|at::Context::|at::globalContext|at::RecordFunction|at::ThreadLocalState|at::NoNamesGuard"
    r"|at::namedinference::|at::infer_size|at::native::resize|at::native::empty|at::(\{anon\}::)+wrapper_"
    r"|at::(compositeexplicitautograd|compositeimplicitautograd|cpu)::|c10::|torch::(jit|autograd|impl)::|std::)"
)
# Thunks that forward to a callable named in their template arguments: not glue by their own name
THUNK = re.compile(r"(^c10::function_ref::|^std::_Function_handler::|^std::function::|_omp_fn)")
# what a glue thunk forwards to: the boxed calling convention of operators
BOXED = re.compile(r"torch::jit::|createOperatorFromC10|c10::impl::(make_boxed|BoxedKernelWrapper|wrap_kernel)")
COMPUTE_HINT = re.compile(r"Loop|loop|kernel|AVX|SVE|vec::|VSX|ZVECTOR|DEFAULT::|reduce|gemm|dnnl", re.IGNORECASE)


def function_name(demangled: str) -> tuple[str, str]:
    """The qualified name of a demangled C++ function without its return type, template arguments and parameters
    (``(anonymous namespace)`` written ``{anon}``), and the text of its template arguments."""
    text = demangled.replace("(anonymous namespace)", "{anon}")
    name, arguments, depth = [], [], 0
    for char in text:
        if depth == 0 and char == "(":
            break
        if char == "<":
            depth += 1
            if depth == 1:
                continue
        elif char == ">" and depth:
            depth -= 1
            if depth == 0:
                continue
        (arguments if depth else name).append(char)
    qualified = "".join(name).strip()
    if " " in qualified:  # a template function's return type comes first
        qualified = qualified.rsplit(" ", 1)[1]
    return qualified, "".join(arguments)


def is_glue(demangled: str) -> bool:
    """Whether a libtorch_cpu function is per-call framework glue rather than computation (see the module
    docstring); unknown names are computation."""
    qualified, arguments = function_name(demangled)
    if THUNK.search(qualified):
        return bool(BOXED.search(arguments)) and not COMPUTE_HINT.search(arguments)
    return bool(GLUE.search(qualified))


class _Attr(ctypes.Structure):
    """``struct perf_event_attr``, its first 64 bytes (``PERF_ATTR_SIZE_VER0``)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)


def _open_event(tid: int) -> int:
    number = SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(0, f"perf_event_open: unknown syscall number on {platform.machine()}")
    attr = _Attr(
        type=PERF_TYPE_SOFTWARE,
        size=ctypes.sizeof(_Attr),
        config=PERF_COUNT_SW_TASK_CLOCK,
        sample_period=PERIOD_NS,
        sample_type=PERF_SAMPLE_IP | PERF_SAMPLE_TID,
        flags=DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV,
    )
    fd = _libc.syscall(
        ctypes.c_long(number),
        ctypes.byref(attr),
        ctypes.c_int(tid),
        ctypes.c_int(-1),
        ctypes.c_int(-1),
        ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"perf_event_open: {os.strerror(err)}")
    return int(fd)


class _Ring:
    """One thread's sample buffer."""

    def __init__(self, tid: int) -> None:
        self.fd = _open_event(tid)
        page = mmap.PAGESIZE
        self.size = DATA_PAGES * page
        try:
            self.map = mmap.mmap(self.fd, (1 + DATA_PAGES) * page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(self.fd)
            raise
        self.page = page
        if _libc.ioctl(self.fd, IOC_ENABLE, 0) != 0:
            self.close()
            raise OSError(ctypes.get_errno(), "enabling the sampling event failed")

    def drain(self) -> list[int]:
        """The instruction pointers sampled since the last drain."""
        head = int.from_bytes(self.map[1024:1032], "little")
        tail = int.from_bytes(self.map[1032:1040], "little")
        ips: list[int] = []
        data = self.map[self.page : self.page + self.size]
        while tail < head:
            at = tail % self.size
            header = bytes(data[at : at + 8]) if at + 8 <= self.size else bytes(data[at:] + data[: at + 8 - self.size])
            kind, size = int.from_bytes(header[0:4], "little"), int.from_bytes(header[6:8], "little")
            if size < 8:
                break
            if kind == PERF_RECORD_SAMPLE:
                start = (at + 8) % self.size
                raw = (
                    bytes(data[start : start + 8])
                    if start + 8 <= self.size
                    else bytes(data[start:] + data[: start + 8 - self.size])
                )
                ips.append(int.from_bytes(raw, "little"))
            tail += size
        self.map[1032:1040] = head.to_bytes(8, "little")
        return ips

    def close(self) -> None:
        try:
            self.map.close()
        except (AttributeError, ValueError):
            pass
        os.close(self.fd)


def _mappings(pid: int) -> list[tuple[int, int, int, str]]:
    """Executable mappings of ``pid``: (start, end, file offset, path), sorted."""
    found = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) < 5 or "x" not in fields[1]:
                    continue
                start, end = (int(x, 16) for x in fields[0].split("-"))
                found.append((start, end, int(fields[2], 16), fields[5].strip() if len(fields) > 5 else ""))
    except OSError:
        pass
    return sorted(found)


def category(path: str) -> str:
    """``library``, ``runtime`` or ``own`` for code mapped from ``path``."""
    if LIBRARY.search(path):
        return "library"
    if RUNTIME.search(path):
        return "runtime"
    return "own"


class Symbols:
    """Function names of a library by address (``nm``), cached in ``folder`` by the file's identity."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._loaded: dict[str, tuple[list[int], list[str]]] = {}

    def name(self, path: str, address: int) -> str:
        table = self._loaded.get(path)
        if table is None:
            table = self._loaded[path] = self._table(path)
        starts, names = table
        at = bisect.bisect_right(starts, address) - 1
        return names[at] if at >= 0 else ""

    def _table(self, path: str) -> tuple[list[int], list[str]]:
        stat = os.stat(path)
        key = hashlib.sha256(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
        cached = self.folder / f"{key}.json"
        try:
            data = json.loads(cached.read_text())
            return data["starts"], data["names"]
        except (OSError, ValueError, KeyError):
            pass
        out = subprocess.run(["nm", "-C", "--defined-only", path], capture_output=True, text=True, timeout=300).stdout
        rows = []
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1].lower() in "tw":
                try:
                    rows.append((int(parts[0], 16), parts[2][:200]))
                except ValueError:
                    continue
        rows.sort()
        starts, names = [r[0] for r in rows], [r[1] for r in rows]
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"starts": starts, "names": names}))
        os.replace(tmp, cached)
        return starts, names


class Sampler:
    """Samples the threads of the candidate's processes between ``attach`` and ``close``; ``counts`` sorts them."""

    def __init__(self, symbols_folder: Path) -> None:
        self.rings: dict[int, _Ring] = {}
        self.unavailable = ""
        self.samples: list[tuple[int, int]] = []  # (pid, ip)
        self.symbols = Symbols(symbols_folder)

    def watch(self, pids: list[int]) -> None:
        """Starts sampling every thread of ``pids`` not sampled yet (call while they are frozen)."""
        if self.unavailable:
            return
        for pid in pids:
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                if tid in self.rings:
                    continue
                try:
                    ring = _Ring(tid)
                except OSError as exc:
                    self.unavailable = str(exc)
                    self.close()
                    return
                ring.pid = pid  # type: ignore[attr-defined]
                self.rings[tid] = ring

    def drain(self) -> None:
        """Collects the samples taken so far (call while the candidate is frozen)."""
        for ring in self.rings.values():
            self.samples.extend((ring.pid, ip) for ip in ring.drain())  # type: ignore[attr-defined]

    def counts(self) -> Samples:
        """Samples by category (see the module docstring): ``library_compute`` are the library's samples outside
        data movement, ``library_blas`` those of them in GEMM/convolution routines (which a policy may allow)."""
        if self.unavailable:
            return Samples(observed=False, why=self.unavailable)
        by_pid: dict[int, list[tuple[int, int, int, str]]] = {}
        tally = {"own": 0, "library": 0, "runtime": 0}
        library_samples: list[tuple[str, int]] = []
        for pid, ip in self.samples:
            maps = by_pid.get(pid)
            if maps is None:
                maps = by_pid[pid] = _mappings(pid)
            index = bisect.bisect_right(maps, (ip, float("inf"))) - 1
            if index < 0 or not maps[index][0] <= ip < maps[index][1]:
                tally["runtime"] += 1  # anonymous code: the interpreter's trampolines
                continue
            start, _, offset, path = maps[index]
            kind = category(path)
            tally[kind] += 1
            if kind == "library":
                library_samples.append((path, ip - start + offset))
        compute, blas = len(library_samples), 0
        judged = tally["own"] + compute
        if judged and compute / judged > SYMBOLS_ABOVE and library_samples:  # worth telling copies from compute
            moving = 0
            for path, address in library_samples:
                try:
                    name = self.symbols.name(path, address)
                except (OSError, subprocess.SubprocessError):
                    name = ""
                if DATA_MOVEMENT.search(name) or (name and is_glue(name)):
                    moving += 1
                elif BLAS.search(name):
                    blas += 1
            compute -= moving
        return Samples(observed=True, **tally, library_compute=compute, library_blas=blas)

    def close(self) -> None:
        for ring in self.rings.values():
            ring.close()
        self.rings.clear()
