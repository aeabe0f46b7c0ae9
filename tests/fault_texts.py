"""Failure texts in the shapes torch, CPython (tracebacks, faulthandler, warnings), Kineto and the CUDA runtime write
them, for the tests of what the agent is shown."""

from __future__ import annotations

SITE = "/usr/local/lib/python3.11/site-packages"


def cpp_frames(count: int, own_at: int | None = None) -> str:
    """``count`` frames as c10::Error writes them, with the agent's extension at ``own_at``."""
    lines = []
    for n in range(count):
        if n == 0:
            lines.append(
                "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 "
                f"(0x7f3a1 in {SITE}/torch/lib/libc10.so)"
            )
        elif n == 1:
            lines.append(
                "frame #1: c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool) + 0x3c3 "
                f"(0x7f3a2 in {SITE}/torch/lib/libc10_cuda.so)"
            )
        elif n == own_at:
            lines.append(
                f"frame #{n}: relu_forward(at::Tensor) + 0x5c "
                "(0x7f3b0 in /root/.cache/cudagym/builds/ab12/cuda_extension.so)"
            )
        elif n % 3 == 0:
            lines.append(f"frame #{n}: <unknown function> + 0x2a1ca (0x7f4c{n:02x} in /lib/x86_64-linux-gnu/libc.so.6)")
        else:
            lines.append(
                f"frame #{n}: at::native::copy_(at::Tensor&, at::Tensor const&, bool) + 0x{n}f "
                f"(0x7f3c in {SITE}/torch/lib/libtorch_cpu.so)"
            )
    return "\n".join(lines)


ILLEGAL_ACCESS = (
    "Traceback (most recent call last):\n"
    '  File "<harness>/candidate.py", line 315, in serve\n'
    "    out = run_call(values, k)\n"
    "          ^^^^^^^^^^^^^^^^^^^\n"
    '  File "<harness>/candidate.py", line 431, in call\n'
    "    return model(*values)\n"
    f'  File "{SITE}/torch/nn/modules/module.py", line 1778, in _wrapped_call_impl\n'
    "    return self._call_impl(*args, **kwargs)\n"
    f'  File "{SITE}/torch/nn/modules/module.py", line 1789, in _call_impl\n'
    "    return forward_call(*args, **kwargs)\n"
    '  File "model_new.py", line 12, in forward\n'
    "    return cuda_extension.relu_forward(x)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    "\n"
    "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:44 "
    "(most recent call first):\n" + cpp_frames(27, own_at=4) + "\n"
)
TERMINATE = (
    "terminate called after throwing an instance of 'c10::Error'\n"
    "  what():  CUDA error: misaligned address\n"
    "Search for `cudaErrorMisalignedAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
    " for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n\n"
    "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:44 "
    "(most recent call first):\n" + cpp_frames(25) + "\n"
    "Fatal Python error: Aborted\n\n"
    "Stack (most recent call first):\n"
    '  File "model_new.py", line 9 in forward\n'
    f'  File "{SITE}/torch/nn/modules/module.py", line 1789 in _call_impl\n'
    '  File "<harness>/candidate.py", line 431 in call\n'
    "\n"
    "Extension modules: numpy.core._multiarray_umath, torch._C, torch._C._fft (total: 20)\n"
)
# torch 2.13's form with TORCH_SHOW_CPP_STACKTRACES=1 (the first frames as this machine's CPU build wrote them)
CAPTURED = (
    "[W1203 10:45:51.062068583 Module.cpp:206] symbolizing C++ stack trace for exception; if this hangs, rerun with "
    "TORCH_DISABLE_ADDR2LINE=1...\n\n"
    "RuntimeError: x must have 7 dims, got 1\n"
    "Exception raised from relu_forward at /tmp/ws/kernels/relu_binding.cpp:7 (most recent call first):\n"
    "C++ CapturedTraceback:\n"
    "#4 std::_Function_handler<std::shared_ptr<c10::LazyValue<std::string> const> ()>::_M_invoke(std::_Any_data "
    "const&) from Logging.cpp:0\n"
    "#5 c10::Error::Error(c10::SourceLocation, std::string) from ??:0\n"
    "#6 c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::string const&) from ??:0\n"
    "#7 relu_forward(at::Tensor) from /tmp/ws/kernels/relu_binding.cpp:7\n"
    "#8 at::_ops::view::redispatch(c10::DispatchKeySet, at::Tensor const&, c10::ArrayRef<c10::SymInt>) from ??:0\n"
)
PROFILER_WARNING = (
    f"{SITE}/torch/profiler/profiler.py:300: UserWarning: Warning: Profiler clears events at the end of each cycle. "
    "Only events from the current cycle will be reported. To keep events across cycles, set acc_events=True.\n"
    "  _warn_once(\n"
)
KINETO_LOGS = (
    "STAGE:2026-12-03 10:53:59 19942:19942 ActivityProfilerController.cpp:314] Completed Stage: Warm Up\n"
    "USDT:2026-12-03 10:53:59 19942:19942 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
)
OWN_OUTPUT = (
    "model_new.py:7: UserWarning: falling back to the slow path for odd sizes\n"
    "  warnings.warn('falling back to the slow path for odd sizes')\n"
    "block size 256, grid 4096\n"
)
