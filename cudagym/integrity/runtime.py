"""Run-time integrity checks: the parent's judgement of what the harness observed while ModelNew ran.

The candidate process reports what it saw (``harness/candidate.py``); the reference process reports
what it can establish itself (inputs unchanged, bitwise determinism, the timed outputs checked). Each function
here turns one observation into an :class:`~cudagym.results.IntegrityFinding`; a failed finding makes the stage's
status ``integrity`` and its detail is the rule the agent broke (never a reference value or a seed).

Observations made inside the candidate process are the candidate's own word: code that subverts the
harness itself could silence them. They decide no number: times come from the trusted clock and values are
read and compared by the reference process (``harness/clock.py``); the README says what remains.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from cudagym.harness.protocol import Samples
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.results import IntegrityFinding, KernelTime

# aten operators that create, view, move or copy data without computing anything from it.
DATA_OPS = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones ones_like full full_like
    new_zeros new_ones new_full fill_ zero_ arange scalar_tensor lift_fresh lift_fresh_copy
    view view_as reshape _reshape_alias _unsafe_view as_strided alias detach t transpose permute expand
    expand_as squeeze unsqueeze flatten unflatten select slice narrow split split_with_sizes chunk unbind
    contiguous clone copy_ _to_copy to resize_ set_ is_same_size size stride numel dim item _local_scalar_dense
    is_contiguous result_type _has_compatible_shallow_copy_type sym_size sym_stride sym_numel sym_storage_offset
    """.split()
)
GEMM_OPS = frozenset("mm bmm addmm baddbmm matmul addbmm linear _addmm_activation".split())
CONV_OPS = frozenset(
    "convolution _convolution conv1d conv2d conv3d cudnn_convolution conv_transpose1d conv_transpose2d "
    "conv_transpose3d mkldnn_convolution _convolution_mode cudnn_convolution_transpose".split()
)

MAX_LIBRARY_SHARE = 0.1  # of the GPU time, in torch/library kernels that compute (not fills or copies)

# Device kernels that belong to torch or vendor libraries, not to the candidate's extension.
LIBRARY_KERNEL = re.compile(
    r"(^|[\s<(:])(at::|c10::|cutlass|cublas|cudnn|sm\d+_xmma|ampere_|volta_|turing_|hopper_|nvjet|gemv|gemmk|"
    r"splitKreduce|triton_|Memcpy|Memset|void at_)",
    re.IGNORECASE,
)
DATA_KERNEL = re.compile(r"(fill|copy|Memcpy|Memset|FillFunctor|CopyFunctor|cat_|CatArray)", re.IGNORECASE)


def _name(op: str) -> str:
    """``aten::add.Tensor`` -> ``add``."""
    return op.partition("::")[2].split(".")[0] or op


def torch_compute(ops: Iterable[str] | None, policy: IntegrityPolicy) -> IntegrityFinding:
    """Catalogue #1: torch computing the answer. Aten operators dispatched during a forward call must
    be ones the policy allows (creation, views, copies), or GEMM/convolution where it allows cuBLAS/cuDNN."""
    if ops is None:
        return IntegrityFinding("no_torch_compute", True, "not observed in this stage")

    def allowed(op: str) -> bool:
        base = _name(op)
        if (policy.allow_cublas and base in GEMM_OPS) or (policy.allow_cudnn and base in CONV_OPS):
            return True
        if policy.allows_aten_op(op):
            return True
        # the decomposed forms of allocation and copies (zeros -> zero_, contiguous -> clone, ...)
        return base in DATA_OPS and not policy.denies(op, f"aten::{base}")

    compute = sorted({_name(op) for op in ops if op.startswith("aten::") and not allowed(op)})
    if not compute:
        return IntegrityFinding("no_torch_compute", True, "")
    return IntegrityFinding(
        "no_torch_compute",
        False,
        f"ModelNew.forward ran torch operators that compute ({', '.join(compute[:8])}); the forward may only "
        "allocate, view or copy tensors in torch and must do the computation in your own kernels",
    )


def inputs_unchanged(unchanged: bool | None, changed: list[int] | None) -> IntegrityFinding:
    """Catalogue #19: the forward must leave its inputs as they were."""
    if unchanged is False or changed:
        which = f" (input {', '.join(map(str, changed))})" if changed else ""
        return IntegrityFinding(
            "inputs_unchanged", False, f"ModelNew.forward modified its inputs{which}; write results to new tensors"
        )
    return IntegrityFinding("inputs_unchanged", True, "")


def no_aliasing(aliased: bool) -> IntegrityFinding:
    """Catalogue #19: an output must not share memory with an input."""
    if aliased:
        return IntegrityFinding(
            "outputs_do_not_alias_inputs",
            False,
            "an output shares memory with an input; return a newly allocated tensor",
        )
    return IntegrityFinding("outputs_do_not_alias_inputs", True, "")


def trusted_functions(replaced: list[str] | None) -> IntegrityFinding:
    """Catalogues #8 and #18: timers, synchronisation and comparisons must stay the harness's own."""
    if replaced:
        return IntegrityFinding(
            "harness_functions_untouched",
            False,
            f"the harness's functions were replaced ({', '.join(replaced[:5])}); do not patch torch or time",
        )
    return IntegrityFinding("harness_functions_untouched", True, "")


def no_threads(started: int | None) -> IntegrityFinding:
    """Catalogue #6: no Python threads left running by the candidate (work finishing after the timer)."""
    if started and started > 0:
        return IntegrityFinding(
            "no_background_threads",
            False,
            f"{started} Python thread(s) were started by model_new.py; do all work inside forward on the caller's "
            "thread",
        )
    return IntegrityFinding("no_background_threads", True, "")


def deterministic(same: bool | None) -> IntegrityFinding:
    """Catalogue #21: the same inputs twice give bitwise the same output."""
    if same is False:
        return IntegrityFinding(
            "deterministic",
            False,
            "the same inputs gave different outputs on two calls (a race, uninitialised memory or state "
            "kept between calls)",
        )
    return IntegrityFinding("deterministic", True, "" if same else "not observed in this stage")


def own_kernels(kernels: Sequence[KernelTime], device_is_cuda: bool, policy: IntegrityPolicy) -> IntegrityFinding:
    """Catalogues #1 and #4: on the GPU, the time must be spent in the candidate's own kernels.

    A profile with no kernel of the candidate's own (a decoy: defined, never launched) fails, and so
    does one where library kernels that compute (not fills or copies) take more than the policy's share."""
    if not device_is_cuda or not kernels:
        return IntegrityFinding("time_in_own_kernels", True, "" if kernels else "no kernel breakdown")
    own = [k for k in kernels if not LIBRARY_KERNEL.search(k.name)]
    library = [
        k
        for k in kernels
        if LIBRARY_KERNEL.search(k.name) and not DATA_KERNEL.search(k.name) and not _allowed_library(k, policy)
    ]
    library_share = sum(k.share for k in library)
    if not own:
        return IntegrityFinding(
            "time_in_own_kernels",
            False,
            "none of the GPU time was spent in kernels of your extension (only library kernels ran); "
            "your kernels must do the work",
        )
    if library_share > MAX_LIBRARY_SHARE:
        return IntegrityFinding(
            "time_in_own_kernels",
            False,
            f"{library_share:.0%} of the GPU time was spent in torch/library kernels ({library[0].name[:80]}); "
            "the computation must run in your own kernels",
        )
    return IntegrityFinding("time_in_own_kernels", True, f"{sum(k.share for k in own):.0%} in own kernels")


def _allowed_library(kernel: KernelTime, policy: IntegrityPolicy) -> bool:
    name = kernel.name.lower()
    gemm = any(s in name for s in ("gemm", "cublas", "xmma", "nvjet", "cutlass", "sgemm", "hgemm"))
    conv = any(s in name for s in ("cudnn", "conv", "implicit_gemm", "winograd"))
    return (gemm and policy.allow_cublas) or (conv and policy.allow_cudnn)


MIN_SAMPLES = 20  # cpu: samples of own and library code below which the sampled share decides nothing
# cpu: the sampled share is a sample: it fails only when even the lower end of its one-sided 99% (Wilson) interval
# lies above ``MAX_LIBRARY_SHARE``, so a few stray samples on a call that computes little decide nothing
SHARE_CONFIDENCE_Z = 2.326


def share_lower_bound(hits: int, total: int, z: float = SHARE_CONFIDENCE_Z) -> float:
    """The lower end of the Wilson score interval of the share ``hits / total`` (0 for no samples)."""
    if total <= 0:
        return 0.0
    p = hits / total
    centre = p + z * z / (2 * total)
    margin = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return max(0.0, (centre - margin) / (1 + z * z / total))


def sampled_own_code(sampled: Samples | None, policy: IntegrityPolicy) -> IntegrityFinding:
    """Catalogue #1 on the cpu backend, observed from outside the candidate: of the samples the kernel took of its
    threads during its calls in its own code or in torch's compute libraries, at most ``MAX_LIBRARY_SHARE`` may
    fall in the libraries' compute (copies and allocation excluded; GEMM/convolution routines where the policy
    allows cuBLAS/cuDNN, whose CPU counterparts are BLAS and oneDNN), judged with ``share_lower_bound``."""
    check = "cpu_time_in_own_code"
    if sampled is None or not sampled.observed:
        return IntegrityFinding(check, True, f"not observed ({sampled.why if sampled else 'not sampled'})")
    compute = sampled.library_compute
    if policy.allow_cublas or policy.allow_cudnn:
        compute -= sampled.library_blas
    judged = sampled.own + compute
    share = compute / judged if judged else 0.0
    clear = share_lower_bound(compute, judged) <= MAX_LIBRARY_SHARE
    if policy.allow_torch_compute or judged < MIN_SAMPLES or clear:
        return IntegrityFinding(check, True, f"{share:.0%} of {judged} samples in torch's compute libraries")
    return IntegrityFinding(
        check,
        False,
        f"{share:.0%} of the CPU time sampled during the calls was spent computing in torch's libraries "
        "(libtorch_cpu, MKL, oneDNN, ...); the computation must run in your own kernels",
    )


ROOFLINE_SLACK = 0.7  # writes that land in L2, clock and measurement effects: fail only well below the floor


def within_roofline(candidate_ms: float | None, bytes_moved: int, peak_bytes_per_s: float | None) -> IntegrityFinding:
    """Catalogue #23: a time below what the device's memory bandwidth allows for reading every input and
    writing every output once (with ``ROOFLINE_SLACK``) is not a real measurement of the computation."""
    if not candidate_ms or not peak_bytes_per_s or bytes_moved <= 0:
        return IntegrityFinding("within_roofline", True, "no bound for this device")
    floor_ms = bytes_moved / peak_bytes_per_s * 1e3
    achieved = bytes_moved / (candidate_ms / 1e3)
    if candidate_ms < ROOFLINE_SLACK * floor_ms:
        return IntegrityFinding(
            "within_roofline",
            False,
            f"{candidate_ms:.4g} ms would move {achieved / 1e9:.0f} GB/s, above the device's peak "
            f"{peak_bytes_per_s / 1e9:.0f} GB/s for the {bytes_moved / 1e6:.1f} MB every correct solution reads and "
            "writes; the timed calls did not do the work",
        )
    return IntegrityFinding(
        "within_roofline", True, f"{achieved / 1e9:.0f} GB/s of {peak_bytes_per_s / 1e9:.0f} GB/s peak"
    )


def first_failure(findings: Iterable[IntegrityFinding]) -> IntegrityFinding | None:
    return next((f for f in findings if not f.passed), None)
