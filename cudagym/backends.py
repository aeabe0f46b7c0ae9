"""Backends: where kernels run and how they are compiled.

``cpu``: the agent's kernels are C++ (g++, OpenMP) and everything runs on the CPU, so the whole loop is
real without a GPU. ``cuda``: ``.cu`` files go through nvcc for the device's own architecture and run
on the GPU. ``auto`` picks cuda where a GPU and nvcc are present. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from cudagym.errors import BackendUnavailable, ConfigError

BACKEND_NAMES = ("auto", "cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """Compilers and the torch installation the extension is built against."""

    cxx: str
    nvcc: str | None
    torch_dir: Path
    torch_version: str
    python_include: str
    cuda_home: str | None

    @property
    def torch_includes(self) -> tuple[str, ...]:
        base = self.torch_dir / "include"
        return (str(base), str(base / "torch" / "csrc" / "api" / "include"))

    @property
    def torch_lib(self) -> str:
        return str(self.torch_dir / "lib")


@functools.lru_cache(maxsize=1)
def find_toolchain() -> Toolchain:
    """Locates g++, nvcc and torch (without importing torch)."""
    import sysconfig

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailable("torch is not installed; `pip install torch` first")
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    version_file = (torch_dir / "version.py").read_text() if (torch_dir / "version.py").exists() else ""
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", version_file)
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise BackendUnavailable("no C++ compiler found (g++); install build-essential or set CXX")
    nvcc = os.environ.get("CUDAGYM_NVCC") or shutil.which("nvcc")
    cuda_home = os.environ.get("CUDA_HOME") or (_cuda_home_of(nvcc) if nvcc else None)
    return Toolchain(
        cxx=cxx,
        nvcc=nvcc,
        torch_dir=torch_dir,
        torch_version=match.group(1) if match else "unknown",
        python_include=sysconfig.get_path("include", scheme="posix_prefix"),
        cuda_home=cuda_home,
    )


@dataclasses.dataclass(frozen=True)
class Backend:
    """One backend's identity and build settings."""

    name: str  # "cpu" or "cuda"
    device: str  # torch device string for evaluation
    device_name: str  # human-readable (GPU model or CPU model), part of cache keys
    arch: str = ""  # e.g. "sm_90" (cuda only)
    threads: int = 0  # torch/OpenMP threads in evaluation children (0: library default)

    @property
    def is_cuda(self) -> bool:
        return self.name == "cuda"


def _cuda_home_of(nvcc: str) -> str:
    """The CUDA installation ``nvcc`` belongs to: the folder above its ``bin``, or where that holds no CUDA headers
    (``nvcc`` is a wrapper script elsewhere), the one nvcc itself names (``_HERE_`` of its dry run)."""
    home = Path(nvcc).resolve().parent.parent
    if (home / "include" / "cuda_runtime.h").exists():
        return str(home)
    try:
        done = subprocess.run(
            [nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return str(home)
    match = re.search(r"^#\$ _HERE_=(.+)$", done.stdout + done.stderr, re.M)
    return str(Path(match.group(1).strip()).parent) if match else str(home)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


@functools.lru_cache(maxsize=4)
def query_gpu(index: int = 0) -> tuple[str, str] | None:
    """(name, "sm_XY") of the visible GPU ``index`` via nvidia-smi, or None when there is none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    rows = [r.split(",") for r in out.strip().splitlines() if "," in r]
    if visible:
        first = visible.split(",")[0].strip()
        index = int(first) if first.isdigit() else index
    if not rows or index >= len(rows):
        return None
    name, cap = rows[index][0].strip(), rows[index][1].strip()
    return name, "sm_" + cap.replace(".", "")


def resolve_backend(name: str = "auto", *, arch: str | None = None, threads: int | None = None) -> Backend:
    """Turns "auto" / "cpu" / "cuda" into a :class:`Backend`; raises BackendUnavailable with the reason."""
    if name not in BACKEND_NAMES:
        raise ConfigError(f"backend must be one of {BACKEND_NAMES}, got {name!r}")
    gpu = query_gpu() if name in ("auto", "cuda") else None
    if name == "cuda" or (name == "auto" and gpu is not None and find_toolchain().nvcc):
        if gpu is None:
            raise BackendUnavailable("backend='cuda' needs a visible NVIDIA GPU (nvidia-smi found none)")
        if not find_toolchain().nvcc:
            raise BackendUnavailable("backend='cuda' needs nvcc on PATH (or CUDAGYM_NVCC)")
        chosen_arch = arch or os.environ.get("CUDAGYM_CUDA_ARCH") or gpu[1]
        return Backend("cuda", "cuda", gpu[0], chosen_arch, threads or 0)
    cpu_threads = threads if threads is not None else (os.cpu_count() or 1)
    return Backend("cpu", "cpu", _cpu_name(), "", cpu_threads)
