"""The integrity policy: what a candidate solution may do, and what the agent is told when it breaks a rule.

The default is CUDA Agent's rules (SKILL.md of BytedTsinghua-SIA/CUDA-Agent): in ``model_new.py`` the
forward path may only create tensors, change shapes and views, and call the compiled extension; the
kernels may not call ATen/torch compute; no third-party library, except cuBLAS for GEMM and cuDNN for
convolution where the task set allows them. On top of that, nothing may touch the harness: no fallback to
the reference, no threads or processes, no patched timers or comparisons, no loaded binaries, no tensor
subclasses. :meth:`IntegrityPolicy.permissive` relaxes the *style* rules (torch compute, libraries,
streams, graphs, exception handling) for research, and keeps every rule that guards the measurement.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from cudagym.errors import ConfigError
from cudagym.integrity.vocabulary import ALLOWED_ATEN_OPS


@dataclasses.dataclass(frozen=True)
class Rule:
    """One static check: its name (``static_<name>`` in ``info["integrity"]``) and what it forbids."""

    name: str
    forbids: str


RULES: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        Rule(
            "exception_fallback",
            "try/except (or contextlib.suppress) in model_new.py: a fallback hides a failing kernel",
        ),
        Rule("reference_model", "using the reference: importing model.py, or subclassing, building or calling Model"),
        Rule("extension_called", "a forward that returns without calling the compiled extension (a decoy kernel)"),
        Rule("torch_compute", "computing with torch (or another library) instead of the extension's kernels"),
        Rule("vendor_libraries", "calling a vendor library (cuBLAS, cuDNN, cuFFT, ...) the policy does not allow"),
        Rule("concurrency", "threads, processes, async tasks, signals or thread-count changes"),
        Rule("streams", "creating CUDA streams where the policy forbids them"),
        Rule("cuda_graphs", "capturing or replaying CUDA graphs"),
        Rule(
            "patching",
            "replacing or wrapping timers, comparisons, torch functions or global settings; hooks, dispatch-key "
            "guards, operator registrations or renamed symbols",
        ),
        Rule(
            "introspection",
            "reading frames, the garbage collector, sys.modules, builtins, running eval/exec, or calling back into "
            "Python from C++ (the Python C API, pybind11 objects)",
        ),
        Rule("binary_loading", "loading prebuilt code or data: ctypes, dlopen, module loaders, embedded binaries"),
        Rule("tensor_subclass", "tensor subclasses, __torch_function__/__torch_dispatch__, or changing __class__"),
        Rule("outside_workspace", "including, compiling or linking files from outside the workspace"),
        Rule("denied_name", "a name on the policy's deny list"),
        Rule(
            "checkable",
            "code the checks cannot read: nested too deeply, or built by macros or asm text they cannot expand "
            "(it could hide anything)",
        ),
    )
}
"""Every static check, in the order findings are reported."""


@dataclasses.dataclass(frozen=True)
class Violation:
    """One place where a file breaks a rule: the rule's name, the workspace path, the 1-based line, and what
    was found there (never anything about reference outputs or seeds)."""

    rule: str
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


TASK_HINT_FIELDS = ("allow_cublas", "allow_cudnn", "allow_tf32", "check_precision")
"""Fields a task set may set through ``task.metadata.extra["integrity_policy"]`` (a mapping)."""


PRECISION_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
"""Short names of the dtypes a task may compute in."""


def _names(value: Iterable[str]) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset({value})
    return frozenset(value)


@dataclasses.dataclass(frozen=True)
class IntegrityPolicy:
    """What a candidate may do. Frozen and hashable; build variants with :meth:`replace` or :meth:`extended`.

    Attributes:
        allow_torch_compute: torch/ATen (and other libraries') compute in the forward path and in the
            kernels' C++. CUDA Agent forbids it: only tensor creation, views and the extension's kernels.
        allow_cublas: cuBLAS/cuBLASLt (CBLAS on the CPU backend), GEMM calls only.
        allow_cudnn: cuDNN, convolution calls only.
        allow_python_streams: creating or switching CUDA streams in model_new.py.
        allow_cpp_streams: creating CUDA streams in the kernels. Allowed by default: the harness times with
            a full device synchronisation, so work on any stream is counted.
        allow_cuda_graphs: capturing and replaying CUDA graphs (Python or C++).
        allow_exception_handling: try/except in model_new.py.
        allow: names the checks accept although a rule would flag them: dotted Python names
            (``"torch.relu"``), tensor methods (``"Tensor.sum"``), C++ identifiers or qualified names
            (``"cublasSgemv"``, ``"at::matmul"``), or ATen ops for run-time checks (``"aten::relu"``).
        deny: names the checks reject although no rule flags them (same forms); deny wins over allow.
        disabled_checks: static checks not run at all (names from :data:`RULES`).
        allow_tf32: an fp32 task's outputs may be as imprecise as TF32 tensor-core arithmetic (inputs of a product
            rounded to 10 explicit mantissa bits): the float64 bound uses TF32's unit roundoff 2^-11 instead of fp32's
            2^-24 (``cudagym.harness.compare.precision_bound``). Off by default: an fp32 task wants fp32 arithmetic.
        check_precision: compare an fp32 task's outputs with a float64 twin of the reference as well as with its
            tolerance (on by default; tasks in bf16 or fp16 have only their tolerance).
        honor_task_hints: apply the task set's hints (``task.metadata.extra["integrity_policy"]``).
    """

    allow_torch_compute: bool = False
    allow_cublas: bool = False
    allow_cudnn: bool = False
    allow_python_streams: bool = False
    allow_cpp_streams: bool = True
    allow_cuda_graphs: bool = False
    allow_exception_handling: bool = False
    allow_tf32: bool = False
    check_precision: bool = True
    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()
    disabled_checks: frozenset[str] = frozenset()
    honor_task_hints: bool = True

    def __post_init__(self) -> None:
        for name in ("allow", "deny", "disabled_checks"):
            object.__setattr__(self, name, _names(getattr(self, name)))
        unknown = sorted(self.disabled_checks - set(RULES))
        if unknown:
            close = difflib.get_close_matches(unknown[0], RULES, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown static checks in disabled_checks: {unknown}.{hint} Known: {sorted(RULES)}")

    # -- constructors --------------------------------------------------------------------------------

    @classmethod
    def cuda_agent(cls) -> IntegrityPolicy:
        """CUDA Agent's rules (the default): kernels only, no torch compute, no vendor libraries."""
        return cls()

    @classmethod
    def permissive(cls) -> IntegrityPolicy:
        """For research: torch compute, cuBLAS, cuDNN, streams, graphs and try/except are allowed; the rules
        that guard the measurement (reference, threads, patching, introspection, binaries, subclasses,
        paths) stay on."""
        return cls(
            allow_torch_compute=True,
            allow_cublas=True,
            allow_cudnn=True,
            allow_python_streams=True,
            allow_cpp_streams=True,
            allow_cuda_graphs=True,
            allow_exception_handling=True,
            disabled_checks=frozenset({"extension_called"}),
        )

    @classmethod
    def without_static_checks(cls) -> IntegrityPolicy:
        """CUDA Agent's rules with no static check run: for testing the run-time checks on their own."""
        return cls(disabled_checks=frozenset(RULES))

    def replace(self, **changes: Any) -> IntegrityPolicy:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def extended(self, *, allow: Iterable[str] = (), deny: Iterable[str] = ()) -> IntegrityPolicy:
        """A copy whose allow and deny lists also hold the given names."""
        return self.replace(allow=self.allow | _names(allow), deny=self.deny | _names(deny))

    def with_task_hints(self, hints: Mapping[str, Any] | None) -> IntegrityPolicy:
        """This policy with a task set's hints applied (only :data:`TASK_HINT_FIELDS`; unknown keys raise)."""
        if not hints or not self.honor_task_hints:
            return self
        unknown = sorted(set(hints) - set(TASK_HINT_FIELDS))
        if unknown:
            raise ConfigError(f"a task's integrity_policy hint may set only {TASK_HINT_FIELDS}, got {unknown}")
        return self.replace(**{k: bool(v) for k, v in hints.items()})

    # -- queries -------------------------------------------------------------------------------------

    def precision_mode(self, dtype: str) -> str:
        """The precision check for a task computing in ``dtype``: "fp32" (float64 reference, fp32 bound), "tf32"
        (float64 reference, TF32 bound: ``allow_tf32``) or "off" (the task's tolerance alone: not a float32 task,
        or ``check_precision`` is off)."""
        if dtype != "float32" or not self.check_precision:
            return "off"
        return "tf32" if self.allow_tf32 else "fp32"

    def precision_detail(self, dtype: str, ratios: Iterable[float | None] = ()) -> str:
        """One line for the ``precision`` finding: the policy for ``dtype`` and, given the checks' precision ratios
        (error against the float64 reference over its bound), the largest one."""
        mode = self.precision_mode(dtype)
        if mode == "off":
            why = "check_precision is off" if dtype == "float32" else f"a {dtype} reference"
            return f"{PRECISION_NAMES.get(dtype, dtype)}: the task's tolerance alone ({why})"
        text = "fp32 (fp64 reference)" if mode == "fp32" else "tf32 allowed (fp64 reference, TF32 bound)"
        ratios = list(ratios)
        seen = [r for r in ratios if r is not None]
        if ratios and not seen:
            return f"{text} requested, but the float64 reference could not run this model: the task's tolerance alone"
        return f"{text}: largest error {max(seen):.2g} of the bound" if seen else text

    def enabled(self, check: str) -> bool:
        """Whether the static check ``check`` runs."""
        return check not in self.disabled_checks

    def allows(self, *names: str) -> bool:
        """True when the allow list names any of ``names`` and the deny list none of them."""
        return any(n in self.allow for n in names) and not any(n in self.deny for n in names)

    def denies(self, *names: str) -> bool:
        """True when the deny list names any of ``names``."""
        return any(n in self.deny for n in names)

    def allows_aten_op(self, op: str) -> bool:
        """Whether the forward may execute ATen op ``op`` (``"aten::relu"``), for run-time recording."""
        name = op if op.startswith("aten::") else f"aten::{op}"
        base = name.split(".", 1)[0]  # overloads: aten::add.Tensor -> aten::add
        if self.denies(name, base):
            return False
        return self.allow_torch_compute or base in ALLOWED_ATEN_OPS or self.allows(name, base)

    def allowed_text(self, rule: str) -> str:
        """What the agent may do instead, for the message of a broken ``rule``."""
        libraries = [name for name, on in (("cuBLAS for GEMM", self.allow_cublas), ("cuDNN for convolution",
                     self.allow_cudnn)) if on]  # fmt: skip
        texts = {
            "torch_compute": "In model_new.py the forward may only allocate tensors (torch.empty/empty_like/zeros/"
            "...), use shapes and views (.size(), .view(), .reshape(), .contiguous(), ...) and call your extension; "
            "in C++ only allocate (torch::empty/empty_like/zeros, and zero_()/fill_() what you allocated), read "
            "metadata and use your own types or ATen's header-only at::vec::Vectorized helpers. Do the math in your "
            "kernels.",
            "vendor_libraries": "Allowed libraries here: "
            + (", ".join(libraries) if libraries else "none (write the kernels yourself)")
            + "; block-level CUB and WMMA inside your own kernels are fine.",
            "streams": "Use the current stream (at::cuda::getCurrentCUDAStream / c10::cuda::getCurrentCUDAStream)"
            + ("; streams created in C++ are allowed." if self.allow_cpp_streams else "."),
            "exception_fallback": "Let errors propagate: the harness reports them to you.",
            "reference_model": "Write ModelNew from scratch (subclass nn.Module) and call your own kernels.",
            "extension_called": "The forward must compute its result with your extension's kernels.",
            "outside_workspace": "Include only the workspace's headers (kernels/*, binding_registry.h) and system "
            "or toolkit headers; compile and link nothing from elsewhere.",
            "binary_loading": "Build every kernel from the sources in the workspace; numeric lookup tables (floats, "
            "or integers of moderate size) are fine.",
            "introspection": "A binding may only m.def functions (with py::arg names and defaults) that take and "
            "return tensors, scalars and std::tuple/std::vector of them; nothing may call back into Python or read "
            "the interpreter's state.",
            "patching": "Remove it: timing, comparison, dispatch and hooks belong to the harness; call functions by "
            "their own names.",
            "tensor_subclass": "Return plain torch.Tensor outputs computed by your kernels.",
            "cuda_graphs": "Launch your kernels directly on the current stream.",
            "concurrency": "Parallelise inside your kernels (CUDA threads, or OpenMP on the cpu backend).",
            "denied_name": "This evaluation's policy forbids that name.",
            "checkable": "Write plainer code (split very long expressions; write out what a macro or an asm text "
            "would build).",
        }
        return texts.get(rule, "Remove it; the evaluation harness owns timing, comparison and process control.")
