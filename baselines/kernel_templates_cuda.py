"""CUDA (cuda backend) renderings of the kernel templates (see ``kernel_templates`` for families and knobs).

Elementwise chains: a grid-stride kernel per pass; each thread keeps ``unroll`` packs of ``vector`` floats
in flight (``float4``/``float2`` loads and stores) and applies the stages in registers. Reductions: each block
takes ``rows`` rows and each row is reduced by ``threads / rows`` threads (warp shuffles, then shared memory
when a row group spans several warps). A launcher falls back to the scalar (``vector`` 1) instantiation when
a pointer is not aligned to the pack or a row length is not a multiple of it, so every knob is correct for
any size.
"""

from __future__ import annotations

from cudagym.baselines.kernel_templates import SPLIT_PARTS, Knobs, OpSpec, Stage, passes

MAX_BLOCKS = 1 << 20  # grid-stride loops cover the rest

_PRELUDE = """#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = $THREADS;
constexpr int kUnroll = $UNROLL;

template <typename T> __device__ __forceinline__ T splat(float a) { return T(a); }
$EXP$HELPERS

// V consecutive floats, moved with one 16-, 8- or 4-byte access (the pointer must be aligned to 4 V bytes).
template <int V>
struct Pack {
  float v[V];
};

template <int V>
__device__ __forceinline__ Pack<V> ld(const float* __restrict__ p) {
  Pack<V> o;
  if constexpr (V == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    o.v[0] = t.x;
    o.v[1] = t.y;
    o.v[2] = t.z;
    o.v[3] = t.w;
  } else if constexpr (V == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    o.v[0] = t.x;
    o.v[1] = t.y;
  } else {
    o.v[0] = *p;
  }
  return o;
}

template <int V>
__device__ __forceinline__ void st(float* __restrict__ p, const Pack<V>& o) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(o.v[0], o.v[1], o.v[2], o.v[3]);
  } else if constexpr (V == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(o.v[0], o.v[1]);
  } else {
    *p = o.v[0];
  }
}

unsigned grid_for(int64_t work, int64_t per_block) {
  int64_t blocks = (work + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < $MAX_BLOCKS ? blocks : $MAX_BLOCKS);
}
"""

EXP_CUDA = {
    "exact": "// exp: expf (accurate; --use_fast_math, which the build uses, maps it to the hardware __expf).\n"
    "__device__ __forceinline__ float vexp(float x) { return expf(x); }",
    "fast": "// exp: the hardware ex2.approx path, ~2 ulp.\n"
    "__device__ __forceinline__ float vexp(float x) { return __expf(x); }",
    "approx": "// exp: Schraudolph's trick, 2^(x / ln 2) with a linear mantissa: one FMA, up to 6% too large.\n"
    "__device__ __forceinline__ float vexp(float x) {\n"
    "  x = fminf(fmaxf(x, -87.0f), 88.0f);\n"
    "  return __int_as_float(static_cast<int>(fmaf(x, 12102203.0f, 1065353216.0f)));\n"
    "}",
}


_HELPERS = {
    "vmax": "__device__ __forceinline__ float vmax(float a, float b) { return fmaxf(a, b); }",
    "vmin": "__device__ __forceinline__ float vmin(float a, float b) { return fminf(a, b); }",
    "vsigmoid": "// exp's argument is capped at 80: 1 / (e + 1) never meets a divisor the fast division flushes.\n"
    "__device__ __forceinline__ float vsigmoid(float v) { return 1.0f / (vexp(fminf(-v, 80.0f)) + 1.0f); }",
    "vtanh": "// exp's argument is capped at 80: 2 / (e + 1) never meets a divisor the fast division flushes.\n"
    "__device__ __forceinline__ float vtanh(float v) { return 1.0f - 2.0f / (vexp(fminf(2.0f * v, 80.0f)) + 1.0f); }",
}


def _helpers(spec: OpSpec) -> str:
    """The math helpers the stage expressions call (unused device functions would draw nvcc warnings)."""
    exprs = " ".join(s.expr for s in spec.stages)
    return "".join("\n" + text for name, text in _HELPERS.items() if name + "(" in exprs)


def render_kernel(spec: OpSpec, knobs: Knobs) -> str:
    """The ``kernels/<key>.cu`` text for ``spec`` with ``knobs``."""
    values = ", ".join(f"{k}={v}" for k, v in knobs.as_dict().items())
    header = f"// {spec.key} on the GPU, rendered by cudagym.baselines.kernel_templates ({values}).\n"
    prelude = (
        _PRELUDE.replace("$THREADS", str(knobs.block))
        .replace("$UNROLL", str(knobs.unroll))
        .replace("$EXP", EXP_CUDA[knobs.precision] if spec.uses_exp else "")
        .replace("$HELPERS", _helpers(spec))
        .replace("$MAX_BLOCKS", str(MAX_BLOCKS))
    )
    body = _elementwise(spec, knobs) if spec.family != "rowwise" else _rowwise(spec, knobs)
    return header + prelude + body


def _stage_body(spec: OpSpec, stages: tuple[Stage, ...], lane: str) -> str:
    """Applies ``stages`` to the float ``e``; ``lane`` indexes the operand packs ``a``, ``b``, ``r``."""
    lines = []
    for stage in stages:
        index = spec.stages.index(stage)
        a, b = (f"a.v[{lane}]", f"b.v[{lane}]") if stage.params else ("0.0f", "0.0f")
        r = f"r.v[{lane}]" if stage.residual else "0.0f"
        lines.append(f"e = stage{index}<float>(e, {a}, {b}, {r});")
    return " ".join(lines)


def _elementwise(spec: OpSpec, knobs: Knobs) -> str:
    parts = []
    for i, stage in enumerate(spec.stages):
        parts.append(
            f"template <typename T>\n__device__ __forceinline__ T stage{i}(T v, [[maybe_unused]] T p0, "
            f"[[maybe_unused]] T p1, [[maybe_unused]] T r) {{\n  return {stage.expr};\n}}\n"
        )
    chain = passes(spec, knobs.fuse)
    for k, stages in enumerate(chain):
        params = any(s.params for s in stages)
        residual = any(s.residual for s in stages)
        operands = ""
        if params:
            operands += "const int64_t c = (j * V) % d;\n        const Pack<V> a = ld<V>(p0 + c), b = ld<V>(p1 + c);\n"
        if residual:
            operands += "        const Pack<V> r = ld<V>(res + j * V);\n"
        tail_operands = ""
        if params:
            tail_operands += "const int64_t c = i % d;\n      "
            tail_operands += "const Pack<1> a = ld<1>(p0 + c), b = ld<1>(p1 + c);\n      "
        if residual:
            tail_operands += "const Pack<1> r = ld<1>(res + i);\n      "
        numbers = [spec.stages.index(s) for s in stages]
        parts.append(f"""// Pass {k}: out = stages {numbers} of in; packs of V floats, kUnroll per thread.
template <int V>
__global__ void __launch_bounds__(kThreads)
    pass{k}(const float* __restrict__ in, [[maybe_unused]] const float* __restrict__ res,
           [[maybe_unused]] const float* __restrict__ p0, [[maybe_unused]] const float* __restrict__ p1,
           float* __restrict__ out, int64_t n, [[maybe_unused]] int64_t d) {{
  const int64_t packs = n / V;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x; base < packs;
       base += step) {{
    Pack<V> v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {{
      const int64_t j = base + u * kThreads;
      if (j < packs) v[u] = ld<V>(in + j * V);
    }}
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {{
      const int64_t j = base + u * kThreads;
      if (j < packs) {{
        {operands}#pragma unroll
        for (int k = 0; k < V; ++k) {{
          float e = v[u].v[k];
          {_stage_body(spec, stages, "k")}
          v[u].v[k] = e;
        }}
        st<V>(out + j * V, v[u]);
      }}
    }}
  }}
  if (blockIdx.x == 0) {{  // the last n % V elements
    for (int64_t i = packs * V + threadIdx.x; i < n; i += kThreads) {{
      {tail_operands}float e = in[i];
      {_stage_body(spec, stages, "0")}
      out[i] = e;
    }}
  }}
}}
""")
    calls, pointers = [], ["x", "y"]
    for k in range(len(chain)):
        src = "x" if k == 0 else f"tmp + {k - 1} * n"
        dst = "y" if k == len(chain) - 1 else f"tmp + {k} * n"
        if k < len(chain) - 1:
            pointers.append(dst)
        calls.append(f"pass{k}<V><<<grid, kThreads, 0, stream>>>({src}, res, p0, p1, {dst}, n, d);")
    if spec.residual:
        pointers.append("res")
    if spec.params:
        pointers += ["p0", "p1"]
    aligned = " | ".join(f"reinterpret_cast<uintptr_t>({p})" for p in pointers)
    rows_ok = " && d % kVec == 0" if spec.params else ""
    joined = "\n  ".join(calls)
    parts.append(f"""template <int V>
void run(const float* x, const float* res, const float* p0, const float* p1, float* y, [[maybe_unused]] float* tmp,
         int64_t n, int64_t d, cudaStream_t stream) {{
  const unsigned grid = grid_for(n / V, static_cast<int64_t>(kThreads) * kUnroll);
  {joined}
}}

}}  // namespace

// y = the chain applied to x ({len(chain)} kernel(s){"" if knobs.fuse else ", intermediates in tmp"}); the vector
// instantiation where every pointer is aligned to the pack{" and rows hold whole packs" if spec.params else ""}.
void launch_{spec.key}(const float* x, const float* res, const float* p0, const float* p1, float* y, float* tmp,
                       int64_t n, int64_t d, cudaStream_t stream) {{
  constexpr int kVec = {knobs.vector};
  const uintptr_t addr = {aligned};
  if (kVec > 1 && addr % (4 * kVec) == 0 && n % kVec == 0{rows_ok}) {{
    run<kVec>(x, res, p0, p1, y, tmp, n, d, stream);
  }} else {{
    run<1>(x, res, p0, p1, y, tmp, n, d, stream);
  }}
}}
""")
    return "\n".join(parts)


_REDUCE = """
constexpr int kRows = $ROWS;                // rows per block
constexpr int kGroup = kThreads / kRows;  // threads per row
static_assert(kGroup >= 8 && (kGroup & (kGroup - 1)) == 0, "a row group is a power of two of at least 8 threads");

// MODE 0: sum, 1: max$MODE2_DOC.
template <int MODE>
__device__ __forceinline__ float combine(float acc, float v, [[maybe_unused]] float off) {
  if constexpr (MODE == 1) return fmaxf(acc, v);$MODE2
  else return acc + v;
}

template <int MODE>
__device__ __forceinline__ float merge(float a, float b) {
  return MODE == 1 ? fmaxf(a, b) : a + b;
}

// Reduces v over the kGroup threads of a row group; each of them gets the result. Every thread of the block
// must call it (warp shuffles over full warps, barriers when a group spans warps). red: kThreads / 32 floats.
template <int MODE>
__device__ __forceinline__ float group_reduce(float v, [[maybe_unused]] float* red) {
  constexpr int kWidth = kGroup < 32 ? kGroup : 32;
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) v = merge<MODE>(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (kGroup > 32) {
    __syncthreads();  // the previous call may still be reading red
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    const int first = (threadIdx.x / kGroup) * (kGroup / 32);
    v = red[first];
    for (int k = 1; k < kGroup / 32; ++k) v = merge<MODE>(v, red[first + k]);
  }
  return v;
}

// One thread's share of a row of `packs` packs: packs g, g + kGroup, ..., with kUnroll loads in flight.
template <int V, int MODE>
__device__ __forceinline__ float thread_reduce(const float* __restrict__ xr, int64_t packs, int g, float off) {
  float acc[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) acc[u] = MODE == 1 ? -INFINITY : 0.0f;
  int64_t j = g;
  for (; j + (kUnroll - 1) * kGroup < packs; j += kUnroll * kGroup) {
    Pack<V> p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) p[u] = ld<V>(xr + (j + u * kGroup) * V);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < V; ++k) acc[u] = combine<MODE>(acc[u], p[u].v[k], off);
    }
  }
  for (; j < packs; j += kGroup) {
    const Pack<V> p = ld<V>(xr + j * V);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[0] = combine<MODE>(acc[0], p.v[k], off);
  }
#pragma unroll
  for (int u = 1; u < kUnroll; ++u) acc[0] = merge<MODE>(acc[0], acc[u]);
  return acc[0];
}

// out[row] = scale * reduce(x[row, 0:d]) (MODE as in combine; offs[row] is the offset of MODE 2).
template <int V, int MODE>
__global__ void __launch_bounds__(kThreads)
    reduce_rows(const float* __restrict__ x, [[maybe_unused]] const float* __restrict__ offs,
                float* __restrict__ out, int64_t rows, int64_t d, float scale) {
  __shared__ float red[kThreads / 32];
  const int g = threadIdx.x % kGroup;
  const int64_t packs = d / V;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows; row0 < rows;
       row0 += static_cast<int64_t>(gridDim.x) * kRows) {
    const int64_t row = row0 + threadIdx.x / kGroup;
    const bool valid = row < rows;
    float off = 0.0f;
    if constexpr (MODE == 2) off = valid ? offs[row] : 0.0f;
    float v = valid ? thread_reduce<V, MODE>(x + row * d, packs, g, off) : (MODE == 1 ? -INFINITY : 0.0f);
    v = group_reduce<MODE>(v, red);
    if (valid && g == 0) out[row] = v * scale;
  }
}
"""

_SOFTMAX = """
template <int V, bool LOG>
__device__ __forceinline__ Pack<V> normalise(Pack<V> p, float m, float s) {
  const float inv = 1.0f / s, c = m + logf(s);
#pragma unroll
  for (int k = 0; k < V; ++k) p.v[k] = LOG ? p.v[k] - c : vexp(p.v[k] - m) * inv;
  return p;
}

// Fused: per row group, the max, the sum of exp and the normalised row, in one kernel.
template <int V, bool LOG>
__global__ void __launch_bounds__(kThreads)
    softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t d) {
  __shared__ float red[kThreads / 32];
  const int g = threadIdx.x % kGroup;
  const int64_t packs = d / V;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows; row0 < rows;
       row0 += static_cast<int64_t>(gridDim.x) * kRows) {
    const int64_t row = row0 + threadIdx.x / kGroup;
    const bool valid = row < rows;
    const float* xr = x + (valid ? row : 0) * d;
    const float m = group_reduce<1>(valid ? thread_reduce<V, 1>(xr, packs, g, 0.0f) : -INFINITY, red);
    const float s = group_reduce<0>(valid ? thread_reduce<V, 2>(xr, packs, g, m) : 0.0f, red);
    if (valid) {
      float* yr = y + row * d;
      for (int64_t j = g; j < packs; j += kGroup) st<V>(yr + j * V, normalise<V, LOG>(ld<V>(xr + j * V), m, s));
    }
  }
}

// Unfused last pass: y = normalise(x) with the row's max m[row] and sum s[row] read from the intermediates.
template <int V, bool LOG>
__global__ void __launch_bounds__(kThreads)
    softmax_apply(const float* __restrict__ x, const float* __restrict__ m, const float* __restrict__ s,
                  float* __restrict__ y, int64_t n, int64_t d) {
  const int64_t packs = n / V;  // rows hold whole packs here, so a pack never straddles two rows
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; j < packs;
       j += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = j * V / d;
    st<V>(y + j * V, normalise<V, LOG>(ld<V>(x + j * V), m[row], s[row]));
  }
}
"""


def _rowwise(spec: OpSpec, knobs: Knobs) -> str:
    text = _REDUCE.replace("$ROWS", str(knobs.rows))
    exp_mode = spec.reduce in ("softmax", "log_softmax")
    text = text.replace("$MODE2_DOC", ", 2: sum of exp(v - off)" if exp_mode else "")
    text = text.replace("$MODE2", "\n  else if constexpr (MODE == 2) return acc + vexp(v - off);" if exp_mode else "")
    key = spec.key
    if spec.reduce in ("sum", "mean"):
        scale = "1.0f / static_cast<float>(d)" if spec.reduce == "mean" else "1.0f"
        if knobs.fuse:
            run = """  const unsigned grid = grid_for(rows, kRows);
  reduce_rows<V, 0><<<grid, kThreads, 0, stream>>>(x, nullptr, y, rows, d, scale);"""
            vec_ok = "d % kVec == 0"
            comment = "one kernel, a row group per row"
        else:
            run = f"""  // split-row: rows * parts segments of d / parts floats into tmp, then the parts of each row
  const int64_t parts = d % {SPLIT_PARTS} == 0 ? {SPLIT_PARTS} : 1;
  reduce_rows<V, 0><<<grid_for(rows * parts, kRows), kThreads, 0, stream>>>(x, nullptr, tmp, rows * parts,
                                                                             d / parts, 1.0f);
  reduce_rows<1, 0><<<grid_for(rows, kRows), kThreads, 0, stream>>>(tmp, nullptr, y, rows, parts, scale);"""
            vec_ok = f"(d % {SPLIT_PARTS} == 0 ? d / {SPLIT_PARTS} : d) % kVec == 0"
            comment = "two kernels: per-segment partial sums, then their sum"
        text += f"""
template <int V>
void run(const float* x, float* y, [[maybe_unused]] float* tmp, int64_t rows, int64_t d, float scale,
         cudaStream_t stream) {{
{run}
}}

}}  // namespace

// y[r] = {"mean" if spec.reduce == "mean" else "sum"}(x[r, :]): {comment}.
void launch_{key}(const float* x, float* y, float* tmp, int64_t rows, int64_t d, cudaStream_t stream) {{
  constexpr int kVec = {knobs.vector};
  const float scale = {scale};
  if (kVec > 1 && reinterpret_cast<uintptr_t>(x) % (4 * kVec) == 0 && {vec_ok}) {{
    run<kVec>(x, y, tmp, rows, d, scale, stream);
  }} else {{
    run<1>(x, y, tmp, rows, d, scale, stream);
  }}
}}
"""
        return text
    log = "true" if spec.reduce == "log_softmax" else "false"
    text += _SOFTMAX
    if knobs.fuse:
        run = f"  softmax_rows<V, {log}><<<grid_for(rows, kRows), kThreads, 0, stream>>>(x, y, rows, d);"
        comment = "one kernel"
    else:
        run = f"""  // three kernels: row maxima into tmp[0:rows], sums of exp into tmp[rows:2 rows], then normalise
  reduce_rows<V, 1><<<grid_for(rows, kRows), kThreads, 0, stream>>>(x, nullptr, tmp, rows, d, 1.0f);
  reduce_rows<V, 2><<<grid_for(rows, kRows), kThreads, 0, stream>>>(x, tmp, tmp + rows, rows, d, 1.0f);
  softmax_apply<V, {log}><<<grid_for(rows * d / V, kThreads), kThreads, 0, stream>>>(x, tmp, tmp + rows, y,
                                                                                    rows * d, d);"""
        comment = "three kernels with intermediates"
    text += f"""
template <int V>
void run(const float* x, float* y, [[maybe_unused]] float* tmp, int64_t rows, int64_t d, cudaStream_t stream) {{
{run}
}}

}}  // namespace

// y[r, :] = {spec.reduce}(x[r, :]): {comment}.
void launch_{key}(const float* x, float* y, float* tmp, int64_t rows, int64_t d, cudaStream_t stream) {{
  constexpr int kVec = {knobs.vector};
  const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
  if (kVec > 1 && addr % (4 * kVec) == 0 && d % kVec == 0) {{
    run<kVec>(x, y, tmp, rows, d, stream);
  }} else {{
    run<1>(x, y, tmp, rows, d, stream);
  }}
}}
"""
    return text
