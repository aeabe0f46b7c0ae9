"""Parameterised kernel templates for op families of the built-in task set.

A template turns a built-in task and a choice of discrete *knobs* into a complete solution in the layout
the built-in solutions use: ``kernels/<key>.cpp`` (cpu backend) or ``kernels/<key>.cu`` (cuda backend),
``kernels/<key>_binding.cpp`` (checks, allocation, ``REGISTER_BINDING``) and ``model_new.py``. Every
rendered kernel computes the whole forward itself (no torch compute in ``ModelNew.forward``) and is correct
for every knob choice, except where the ``precision`` knob trades accuracy for speed on purpose.

Families (``FAMILIES``) and the built-in tasks they cover (``TEMPLATE_TASKS``):

* ``unary``: elementwise ops over the flat tensor (relu, leaky_relu, elu, sigmoid, gelu_tanh, silu_clamp).
* ``affine``: chains of a per-feature affine or a residual add with activations over ``(B, D)``
  (scale_bias_tanh, affine_gelu_clamp, relu_residual).
* ``rowwise``: reductions over the last dimension (sum_last_dim, mean_last_dim, softmax, log_softmax).

Knobs (``KNOBS``; each is an index into backend-specific values, so one action space serves both):

* ``block``: cuda threads per block; cpu elements (elementwise) or rows (rowwise) per OpenMP chunk,
  scheduled dynamically (tiny chunks pay scheduling overhead, huge ones leave cores idle).
* ``vector``: elements per load/store: cuda scalar, ``float2`` or ``float4``; cpu SIMD width of GCC vector
  types (1 turns auto-vectorisation off, so the loop is really scalar).
* ``unroll``: cuda packs in flight per thread (elementwise) or independent accumulators (rowwise); cpu
  loop unrolling (elementwise) or independent accumulators (rowwise).
* ``rows``: cuda rows per block in reductions (each row is reduced by ``threads / rows`` threads); ignored
  by the elementwise families and on the cpu backend (the ``block`` knob sets the cpu row chunk).
* ``fuse``: one kernel for the whole chain, or one kernel per stage writing an intermediate tensor
  (softmax: max, sum-of-exp and normalise passes; sum/mean: a split-row partial-sum pass, then a final one).
* ``precision``: how ``exp`` (and so tanh, sigmoid, GELU, softmax) is computed: ``exact`` (libm ``exp``:
  accurate; on the cpu a scalar call per element that blocks vectorisation), ``fast`` (a vectorisable
  Cephes polynomial on the cpu, ``__expf`` on cuda; ~2 ulp) or ``approx`` (Schraudolph's exponent-bit trick:
  one multiply-add, up to 6% relative error, which fails the 1e-2 tolerance on most exp-based tasks).
  Ignored by ops without ``exp`` (relu, leaky_relu, relu_residual, sum, mean).

A knob that does not apply to a task does not change the rendered source, so caches keyed by a hash of the
source see those choices as one solution.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
from collections.abc import Iterator, Mapping
from typing import Any

from cudagym.tasks.task import Task

FAMILIES: tuple[str, ...] = ("unary", "affine", "rowwise")
BACKENDS: tuple[str, ...] = ("cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Knob:
    """One discrete knob: a name, what it means, and the values each backend maps its index to."""

    name: str
    description: str
    cpu: tuple[Any, ...]
    cuda: tuple[Any, ...]

    def __post_init__(self) -> None:
        if len(self.cpu) != len(self.cuda) or not self.cpu:
            raise ValueError(f"knob {self.name}: both backends need the same, non-zero number of values")

    @property
    def size(self) -> int:
        """How many choices the knob offers."""
        return len(self.cpu)

    def values(self, backend: str) -> tuple[Any, ...]:
        """The concrete values on ``backend`` ("cpu" or "cuda"), in index order."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        return self.cpu if backend == "cpu" else self.cuda


KNOBS: tuple[Knob, ...] = (
    Knob(
        "block",
        "cuda threads per block; cpu elements or rows per chunk",
        (1024, 16384, 262144, 4194304),
        (32, 128, 256, 512),
    ),
    Knob("vector", "elements per load: cuda float/float2/float4; cpu SIMD width", (1, 4, 8), (1, 2, 4)),
    Knob("unroll", "packs in flight (elementwise) or accumulators (rowwise) per thread", (1, 4), (1, 4)),
    Knob("rows", "cuda rows per block in reductions (ignored on cpu and by elementwise ops)", (1, 4), (1, 4)),
    Knob("fuse", "one kernel for the chain, or one per stage with intermediates", (True, False), (True, False)),
    Knob(
        "precision",
        "exp: libm, ~2-ulp, or the 6%-error bit trick",
        ("exact", "fast", "approx"),
        ("exact", "fast", "approx"),
    ),
)
KNOB_NAMES: tuple[str, ...] = tuple(k.name for k in KNOBS)
_KNOB_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
CPU_ROW_CHUNKS: tuple[int, ...] = (1, 16, 256, 4096)  # rows per OpenMP chunk for the rowwise family on cpu
DEFAULT_CHOICE: dict[str, int] = {"block": 2, "vector": 2, "unroll": 1, "rows": 0, "fuse": 0, "precision": 1}


@dataclasses.dataclass(frozen=True)
class Stage:
    """One step of an elementwise chain: an expression of ``v`` (the running value) and optionally ``p0``,
    ``p1`` (per-feature parameters at the element's column) and ``r`` (the residual at the element)."""

    expr: str
    params: bool = False
    residual: bool = False
    uses_exp: bool = False


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """How a built-in task maps onto a family.

    Attributes:
        key: the built-in task's folder name (also the extension's function prefix).
        family: one of ``FAMILIES``.
        stages: the elementwise chain (unary / affine families).
        reduce: the rowwise op: "sum", "mean", "softmax" or "log_softmax".
        params: names of the two per-feature ``nn.Parameter`` s of the model (affine family), in order.
        residual: the forward takes a second, same-shaped input added in the chain.
    """

    key: str
    family: str
    stages: tuple[Stage, ...] = ()
    reduce: str = ""
    params: tuple[str, ...] = ()
    residual: bool = False

    @property
    def uses_exp(self) -> bool:
        """Whether the ``precision`` knob changes this op's code."""
        return any(s.uses_exp for s in self.stages) or self.reduce in ("softmax", "log_softmax")

    @property
    def op_index(self) -> int:
        """Position in ``TEMPLATE_TASKS`` (for one-hot encodings)."""
        return list(TEMPLATE_TASKS).index(self.key)


_GELU = "v * vsigmoid((v + v * v * v * 0.044715f) * 1.5957691216057308f)"
TEMPLATE_TASKS: dict[str, OpSpec] = {
    "relu": OpSpec("relu", "unary", (Stage("vmax(v, splat<T>(0.0f))"),)),
    "leaky_relu": OpSpec("leaky_relu", "unary", (Stage("v > splat<T>(0.0f) ? v : v * 0.01f"),)),
    "elu": OpSpec("elu", "unary", (Stage("v > splat<T>(0.0f) ? v : vexp(v) - 1.0f", uses_exp=True),)),
    "sigmoid": OpSpec("sigmoid", "unary", (Stage("vsigmoid(v)", uses_exp=True),)),
    "gelu_tanh": OpSpec("gelu_tanh", "unary", (Stage(_GELU, uses_exp=True),)),
    "silu_clamp": OpSpec(
        "silu_clamp",
        "unary",
        (Stage("vsigmoid(v) * v", uses_exp=True), Stage("vmin(vmax(v, splat<T>(-0.2f)), splat<T>(2.0f))")),
    ),
    "scale_bias_tanh": OpSpec(
        "scale_bias_tanh",
        "affine",
        (Stage("v * p0 + p1", params=True), Stage("vtanh(v)", uses_exp=True)),
        params=("scale", "bias"),
    ),
    "affine_gelu_clamp": OpSpec(
        "affine_gelu_clamp",
        "affine",
        (Stage("v * p0 + p1", params=True), Stage(_GELU, uses_exp=True), Stage("vmin(v, splat<T>(1.5f))")),
        params=("w", "b"),
    ),
    "relu_residual": OpSpec(
        "relu_residual", "affine", (Stage("vmax(v, splat<T>(0.0f))"), Stage("v + r", residual=True)), residual=True
    ),
    "sum_last_dim": OpSpec("sum_last_dim", "rowwise", reduce="sum"),
    "mean_last_dim": OpSpec("mean_last_dim", "rowwise", reduce="mean"),
    "softmax": OpSpec("softmax", "rowwise", reduce="softmax"),
    "log_softmax": OpSpec("log_softmax", "rowwise", reduce="log_softmax"),
}
SPLIT_PARTS = 8  # segments per row of the unfused (split-row) sum / mean


def task_key(task: Task | str) -> str:
    """The built-in folder name of a task (``"builtin/relu"`` -> ``"relu"``)."""
    task_id = task if isinstance(task, str) else task.id
    return task_id.rsplit("/", 1)[-1]


def spec_for(task: Task | str) -> OpSpec:
    """The template spec of a built-in task; KeyError naming the supported ones when there is none."""
    key = task_key(task)
    if key not in TEMPLATE_TASKS:
        raise KeyError(f"no kernel template for task {key!r}; templates cover: {', '.join(TEMPLATE_TASKS)}")
    return TEMPLATE_TASKS[key]


def supports(task: Task | str) -> bool:
    """Whether a template covers this task (built-in tasks only; ids are matched on their last part)."""
    task_id = task if isinstance(task, str) else task.id
    return task_id.startswith("builtin/") and task_key(task_id) in TEMPLATE_TASKS


@dataclasses.dataclass(frozen=True)
class Knobs:
    """A full knob choice as concrete values on one backend (see the module doc for their meaning)."""

    block: int
    vector: int
    unroll: int
    rows: int
    fuse: bool
    precision: str

    @classmethod
    def from_indices(cls, indices: Mapping[str, int], backend: str) -> Knobs:
        """Knobs from per-knob indices (missing knobs take ``DEFAULT_CHOICE``)."""
        values = {}
        for knob in KNOBS:
            index = int(indices.get(knob.name, DEFAULT_CHOICE[knob.name]))
            if not 0 <= index < knob.size:
                raise ValueError(f"knob {knob.name}: index {index} out of range 0..{knob.size - 1}")
            values[knob.name] = knob.values(backend)[index]
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class KnobSpace:
    """The knob indices an agent may choose from (a subset of each knob's values; default: all).

    ``KnobSpace({"precision": (1, 2), "vector": (0, 2)})`` restricts those two knobs to those indices; the
    other knobs keep all their values. ``KnobSpace.fixed_except`` fixes the others at ``DEFAULT_CHOICE``.
    """

    choices: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.choices) - set(KNOB_NAMES))
        if unknown:
            raise ValueError(f"unknown knobs {unknown}; knobs are {KNOB_NAMES}")
        full: dict[str, tuple[int, ...]] = {}
        for knob in KNOBS:
            options = tuple(int(i) for i in self.choices.get(knob.name, tuple(range(knob.size))))
            if not options or any(not 0 <= i < knob.size for i in options) or len(set(options)) != len(options):
                raise ValueError(f"knob {knob.name}: choices {options} must be distinct indices in 0..{knob.size - 1}")
            full[knob.name] = options
        object.__setattr__(self, "choices", full)

    @classmethod
    def fixed_except(cls, **choices: tuple[int, ...]) -> KnobSpace:
        """Only the named knobs vary (over the given indices); the rest stay at their default."""
        return cls({**{k: (DEFAULT_CHOICE[k],) for k in KNOB_NAMES}, **choices})

    @property
    def nvec(self) -> tuple[int, ...]:
        """Choices per knob, in ``KNOB_NAMES`` order (a MultiDiscrete action's ``nvec``)."""
        return tuple(len(self.choices[name]) for name in KNOB_NAMES)

    def indices(self, action: Any) -> dict[str, int]:
        """Knob indices from a MultiDiscrete action (one position per knob in this space)."""
        return {name: self.choices[name][int(a)] for name, a in zip(KNOB_NAMES, action, strict=True)}

    def __iter__(self) -> Iterator[dict[str, int]]:
        """Every knob-index combination of the space."""
        for combo in itertools.product(*(self.choices[name] for name in KNOB_NAMES)):
            yield dict(zip(KNOB_NAMES, combo, strict=True))

    def __len__(self) -> int:
        return math.prod(self.nvec)


@dataclasses.dataclass(frozen=True)
class Solution:
    """A rendered solution: workspace path -> text, and a short hash of that content."""

    files: Mapping[str, str]

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for path in sorted(self.files):
            h.update(path.encode() + b"\0" + self.files[path].encode() + b"\0")
        return h.hexdigest()[:16]


def render(task: Task | str, knobs: Knobs, backend: str) -> Solution:
    """The complete solution of ``task`` for ``knobs`` on ``backend`` ("cpu" writes C++, "cuda" CUDA)."""
    import importlib

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    spec = spec_for(task)
    module = importlib.import_module(f"cudagym.baselines.kernel_templates_{backend}")
    knobs = canonical(spec, knobs, backend)
    kernel = module.render_kernel(spec, knobs)
    binding = render_binding(spec, knobs, backend)
    ext = "cpp" if backend == "cpu" else "cu"
    return Solution(
        {
            f"kernels/{spec.key}.{ext}": kernel,
            f"kernels/{spec.key}_binding.cpp": binding,
            "model_new.py": render_model_new(spec),
        }
    )


def canonical(spec: OpSpec, knobs: Knobs, backend: str) -> Knobs:
    """``knobs`` with the knobs that cannot matter for ``spec`` on ``backend`` set to one value, so that
    choices differing only there render the same source (and hash alike)."""
    changes: dict[str, Any] = {}
    if not spec.uses_exp:
        changes["precision"] = "fast"
    if spec.family != "rowwise" and len(spec.stages) == 1:
        changes["fuse"] = True
    if spec.family != "rowwise" or backend == "cpu":
        changes["rows"] = _KNOB_BY_NAME["rows"].values(backend)[0]
    return dataclasses.replace(knobs, **changes)


def passes(spec: OpSpec, fuse: bool) -> list[tuple[Stage, ...]]:
    """The elementwise chain split into kernels: one pass of all stages, or one pass per stage."""
    return [spec.stages] if fuse else [(s,) for s in spec.stages]


def temp_floats(spec: OpSpec, knobs: Knobs) -> str:
    """C++ expression (of ``n``, ``rows``) for the floats of intermediate storage the kernels need."""
    if knobs.fuse:
        return "0"
    if spec.family != "rowwise":
        return f"{len(spec.stages) - 1} * n"
    if spec.reduce in ("sum", "mean"):
        return f"{SPLIT_PARTS} * rows"
    return "2 * rows"


_CUDA_STREAM = """// The current PyTorch stream where the CUDA build of the headers is present; the legacy default
// stream otherwise (CPU-only PyTorch headers lack c10/cuda's generated config, so a syntax check compiles).
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#include <c10/cuda/CUDAStream.h>
static cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream(); }
#else
#include <cuda_runtime.h>
static cudaStream_t current_stream() { return nullptr; }
#endif
"""


def render_binding(spec: OpSpec, knobs: Knobs, backend: str) -> str:
    """The binding file: argument checks, output and intermediate allocation, the launch, registration."""
    cuda = backend == "cuda"
    device = "is_cuda()" if cuda else "device().is_cpu()"
    where = "CUDA" if cuda else "CPU"
    key = spec.key
    stream_decl = ", cudaStream_t stream" if cuda else ""
    stream_arg = ", current_stream()" if cuda else ""
    args = ["torch::Tensor x"]
    checks = [
        f'TORCH_CHECK(x.{device}, "x must be a {where} tensor");',
        'TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");',
        'TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");',
        "const int64_t d = x.size(-1);",
        "const int64_t n = x.numel();",
        "const int64_t rows = n / d;",
    ]
    if spec.residual:
        args.append("torch::Tensor residual")
        checks.append(
            f"TORCH_CHECK(residual.{device} && residual.is_contiguous() && residual.sizes() == x.sizes() && "
            'residual.scalar_type() == torch::kFloat32, "residual must be a contiguous float32 tensor shaped like x");'
        )
    for name in spec.params:
        args.append(f"torch::Tensor {name}")
        checks.append(
            f"TORCH_CHECK({name}.{device} && {name}.is_contiguous() && {name}.numel() == d && "
            f'{name}.scalar_type() == torch::kFloat32, "{name} must be {where} float32 with one value per feature");'
        )
    if spec.family == "rowwise":
        decl = f"void launch_{key}(const float* x, float* y, float* tmp, int64_t rows, int64_t d{stream_decl});"
        call = f"launch_{key}(x.data_ptr<float>(), y.data_ptr<float>(), tmp_ptr, rows, d{stream_arg});"
        if spec.reduce in ("sum", "mean"):
            alloc = (
                "auto out_sizes = x.sizes().vec();\n  out_sizes.pop_back();\n"
                "  auto y = torch::empty(out_sizes, x.options());"
            )
        else:
            alloc = "auto y = torch::empty_like(x);"
    else:
        decl = (
            f"void launch_{key}(const float* x, const float* res, const float* p0, const float* p1, float* y, "
            f"float* tmp, int64_t n, int64_t d{stream_decl});"
        )
        res = "residual.data_ptr<float>()" if spec.residual else "nullptr"
        p0, p1 = (f"{p}.data_ptr<float>()" for p in spec.params) if spec.params else ("nullptr", "nullptr")
        call = f"launch_{key}(x.data_ptr<float>(), {res}, {p0}, {p1}, y.data_ptr<float>(), tmp_ptr, n, d{stream_arg});"
        alloc = "auto y = torch::empty_like(x);"
    temp = temp_floats(spec, knobs)
    if temp == "0":
        temp_code = "float* tmp_ptr = nullptr;"
    else:
        temp_code = f"auto tmp = torch::empty({{{temp}}}, x.options());  // intermediates of the unfused passes\n"
        temp_code += "  float* tmp_ptr = tmp.data_ptr<float>();"
    error_check = (
        f"\n    const cudaError_t err = cudaGetLastError();\n"
        f'    TORCH_CHECK(err == cudaSuccess, "{key} kernel failed: ", cudaGetErrorString(err));'
        if cuda
        else ""
    )
    check_lines = "\n  ".join(checks)
    return f"""#include "binding_registry.h"
{_CUDA_STREAM if cuda else ""}
{decl}  // kernels/{key}.{"cu" if cuda else "cpp"}

// Checks the inputs, allocates the output (and intermediates) and runs the templated kernels.
torch::Tensor {key}_forward({", ".join(args)}) {{
  {check_lines}
  {alloc}
  {temp_code}
  if (n > 0) {{
    {call}{error_check}
  }}
  return y;
}}

static void bind(pybind11::module_& m) {{ m.def("{key}_forward", &{key}_forward, "{key} ({where}, template)"); }}
REGISTER_BINDING({key}, bind);
"""


def render_model_new(spec: OpSpec) -> str:
    """``model_new.py``: the reference's constructor and parameter names, forward through the extension."""
    init_args = ", features" if spec.params else ""
    params = "".join(f"\n        self.{p} = nn.Parameter(torch.zeros(features))" for p in spec.params)
    fwd_args = "x, residual" if spec.residual else "x"
    call = ["x.contiguous()"] + (["residual.contiguous()"] if spec.residual else [])
    call += [f"self.{p}.contiguous()" for p in spec.params]
    imports = "import cuda_extension\n" + ("import torch\n" if spec.params else "") + "import torch.nn as nn\n"
    return f'''{imports}

class ModelNew(nn.Module):
    """{spec.key} through a templated kernel (cudagym.baselines.kernel_templates)."""

    def __init__(self{init_args}):
        super().__init__(){params}

    def forward(self, {fwd_args}):
        return cuda_extension.{spec.key}_forward({", ".join(call)})
'''
