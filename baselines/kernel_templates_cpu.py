"""C++ (cpu backend) renderings of the kernel templates (see ``kernel_templates`` for families and knobs).

The SIMD width is explicit: a width above 1 uses GCC vector types (``vector_size``), so every load, the math
and every store work on that many floats; width 1 renders plain scalar code with auto-vectorisation turned
off. Work is split across OpenMP threads in dynamically scheduled chunks of the ``block`` knob's size.
"""

from __future__ import annotations

from cudagym.baselines.kernel_templates import CPU_ROW_CHUNKS, KNOBS, SPLIT_PARTS, Knobs, OpSpec, Stage, passes

_SCALAR_PRELUDE = """#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

static inline int32_t to_int(float v) { return static_cast<int32_t>(v); }
static inline float as_float(int32_t v) { return std::bit_cast<float>(v); }
template <typename T> static inline T load(const float* p);
template <> inline float load<float>(const float* p) { return *p; }
static inline void store(float* p, float v) { *p = v; }
static inline float hsum(float v) { return v; }
static inline float hmax(float v) { return v; }
"""

_VECTOR_PRELUDE = """
// W-wide GCC vector types: arithmetic, comparisons and selects work lane by lane.
typedef float vf __attribute__((vector_size(4 * $W)));
typedef int32_t vi __attribute__((vector_size(4 * $W)));
static inline vi to_int(vf v) { return __builtin_convertvector(v, vi); }
static inline vf as_float(vi v) { return (vf)v; }  // reinterprets the bits
template <> inline vf load<vf>(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(vf));
  return v;
}
static inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof(vf)); }
static inline float hsum(vf v) {
  float s = 0.0f;
  for (int k = 0; k < $W; ++k) s += v[k];
  return s;
}
static inline float hmax(vf v) {
  float m = v[0];
  for (int k = 1; k < $W; ++k) m = v[k] > m ? v[k] : m;
  return m;
}
"""

_MATH = """
template <typename T> static inline T splat(float a) { return T{} + a; }
template <typename T> static inline T vmax(T a, T b) { return a > b ? a : b; }
template <typename T> static inline T vmin(T a, T b) { return a < b ? a : b; }
$EXP
template <typename T> static inline T vsigmoid(T v) { return splat<T>(1.0f) / (vexp(-v) + 1.0f); }
template <typename T> static inline T vtanh(T v) { return splat<T>(1.0f) - splat<T>(2.0f) / (vexp(v * 2.0f) + 1.0f); }
"""

EXP_CPU = {
    "exact": """// exp: libm, one scalar call per lane (accurate; the calls keep the loop from vectorising).
static inline float vexp(float x) { return std::exp(x); }
$VEXACT""",
    "fast": """// exp: Cody-Waite range reduction + Cephes polynomial, ~2 ulp, written so that it vectorises.
template <typename T> static inline T vexp(T x) {
  x = vmin(vmax(x, splat<T>(-87.0f)), splat<T>(88.0f));
  T n = x * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f;  // round to the nearest integer
  T r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  T p = splat<T>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + r + 1.0f;
  return p * as_float((to_int(n) + 127) << 23);
}""",
    "approx": """// exp: Schraudolph's trick, 2^(x / ln 2) with a linear mantissa: one multiply-add, up to 6% too large.
template <typename T> static inline T vexp(T x) {
  x = vmin(vmax(x, splat<T>(-87.0f)), splat<T>(88.0f));
  return as_float(to_int(x * 12102203.0f + 1065353216.0f));
}""",
}
_VEXACT_VECTOR = """static inline vf vexp(vf x) {
  vf y;
  for (int k = 0; k < $W; ++k) y[k] = std::exp(x[k]);
  return y;
}"""


def _prelude(knobs: Knobs, *, needs_exp: bool) -> str:
    width = knobs.vector
    head = ""
    if width == 1:
        head = '#pragma GCC optimize("no-tree-vectorize")  // vector width 1: really scalar code\n'
    text = head + _SCALAR_PRELUDE
    if width > 1:
        text += _VECTOR_PRELUDE.replace("$W", str(width))
    exp = EXP_CPU[knobs.precision] if needs_exp else "template <typename T> static inline T vexp(T x);  // unused"
    exp = exp.replace("$VEXACT", _VEXACT_VECTOR if width > 1 else "").replace("$W", str(width))
    return text + _MATH.replace("$EXP", exp)


def _header(spec: OpSpec, knobs: Knobs) -> str:
    values = knobs.as_dict()
    del values["rows"]  # not a cpu knob
    if spec.family == "rowwise":
        values["block"] = f"{CPU_ROW_CHUNKS[KNOBS[0].cpu.index(knobs.block)]} rows"
    text = ", ".join(f"{k}={v}" for k, v in values.items())
    return f"// {spec.key} on the CPU, rendered by cudagym.baselines.kernel_templates ({text}).\n"


def render_kernel(spec: OpSpec, knobs: Knobs) -> str:
    """The ``kernels/<key>.cpp`` text for ``spec`` with ``knobs``."""
    body = _elementwise(spec, knobs) if spec.family != "rowwise" else _rowwise(spec, knobs)
    return _header(spec, knobs) + _prelude(knobs, needs_exp=spec.uses_exp) + body


def _stage_functions(spec: OpSpec) -> str:
    out = []
    for i, stage in enumerate(spec.stages):
        out.append(
            f"template <typename T>\nstatic inline T stage{i}(T v, [[maybe_unused]] T p0, [[maybe_unused]] T p1, "
            f"[[maybe_unused]] T r) {{\n  return {stage.expr};\n}}"
        )
    return "\n".join(out)


def _chain(spec: OpSpec, stages: tuple[Stage, ...], kind: str, at: str) -> str:
    """Loads the operands of ``stages`` as type ``kind`` at element ``at``, applies them to ``v``."""
    lines = []
    if any(s.params for s in stages):
        lines.append(f"const int64_t c = {at} % d;")
        lines.append(f"const {kind} a = load<{kind}>(p0 + c), b = load<{kind}>(p1 + c);")
    if any(s.residual for s in stages):
        lines.append(f"const {kind} r = load<{kind}>(res + {at});")
    for stage in stages:
        index = spec.stages.index(stage)
        a, b = ("a", "b") if stage.params else (f"splat<{kind}>(0.0f)",) * 2
        r = "r" if stage.residual else f"splat<{kind}>(0.0f)"
        lines.append(f"v = stage{index}<{kind}>(v, {a}, {b}, {r});")
    return "\n      ".join(lines)


def _elementwise(spec: OpSpec, knobs: Knobs) -> str:
    width, chunk = knobs.vector, max(knobs.block, knobs.vector)
    parts = [_stage_functions(spec)]
    chain_passes = passes(spec, knobs.fuse)
    for k, stages in enumerate(chain_passes):
        vec_kind = "vf" if width > 1 else "float"
        parts.append(f"""
// Pass {k}: out = stages {[spec.stages.index(s) for s in stages]} of in, in chunks of {chunk} elements.
template <bool VEC>
static void pass{k}(const float* __restrict in, [[maybe_unused]] const float* __restrict res,
                  [[maybe_unused]] const float* __restrict p0, [[maybe_unused]] const float* __restrict p1,
                  float* __restrict out, int64_t n, [[maybe_unused]] int64_t d) {{
  constexpr int64_t kChunk = {chunk};
  constexpr int W = VEC ? {width} : 1;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < chunks; ++k) {{
    const int64_t lo = k * kChunk, hi = lo + kChunk < n ? lo + kChunk : n;
    int64_t i = lo;
    if constexpr (VEC) {{
#pragma GCC unroll {knobs.unroll}
      for (; i + W <= hi; i += W) {{
      {vec_kind} v = load<{vec_kind}>(in + i);
      {_chain(spec, stages, vec_kind, "i")}
      store(out + i, v);
      }}
    }}
    for (; i < hi; ++i) {{
      float v = in[i];
      {_chain(spec, stages, "float", "i")}
      out[i] = v;
    }}
  }}
}}""")
    # with per-feature parameters a vector must stay inside one row: d % W == 0 (chunks are multiples of W)
    vec_ok = "d % " + str(width) + " == 0" if any(s.params for s in spec.stages) and width > 1 else "true"
    if width == 1:
        vec_ok = "false"
    calls = []
    for k in range(len(chain_passes)):
        src = "x" if k == 0 else f"tmp + {k - 1} * n"
        dst = "y" if k == len(chain_passes) - 1 else f"tmp + {k} * n"
        calls.append(f"pass{k}<VEC>({src}, res, p0, p1, {dst}, n, d);")
    joined = "\n    ".join(calls)
    parts.append(f"""
template <bool VEC>
static void run(const float* x, const float* res, const float* p0, const float* p1, float* y,
                [[maybe_unused]] float* tmp, int64_t n, int64_t d) {{
    {joined}
}}

// y = the chain applied to x ({len(chain_passes)} pass(es){"" if knobs.fuse else "; intermediates in tmp"}).
void launch_{spec.key}(const float* x, const float* res, const float* p0, const float* p1, float* y, float* tmp,
                       int64_t n, int64_t d) {{
  if ({vec_ok}) {{
    run<{"true" if width > 1 else "false"}>(x, res, p0, p1, y, tmp, n, d);
  }} else {{
    run<false>(x, res, p0, p1, y, tmp, n, d);
  }}
}}
""")
    return "\n".join(parts)


def _rowwise(spec: OpSpec, knobs: Knobs) -> str:
    width, unroll = knobs.vector, knobs.unroll
    chunk = CPU_ROW_CHUNKS[KNOBS[0].cpu.index(knobs.block)]
    kind = "vf" if width > 1 else "float"
    text = f"""
constexpr int W = {width};
constexpr int U = {unroll};
constexpr int64_t kRowsPerChunk = {chunk};
typedef {kind} V;

// Combines an accumulator with a pack of values. MODE 0: sum, 1: max, 2: sum of exp(v - off).
template <int MODE, typename T>
static inline T combine(T acc, T v, [[maybe_unused]] float off) {{
  if constexpr (MODE == 0) return acc + v;
  else if constexpr (MODE == 1) return vmax(acc, v);
  else return acc + vexp(v - off);
}}

// Reduces x[0:d] with U independent W-wide accumulators (MODE as in combine).
template <int MODE>
static inline float row_reduce(const float* __restrict x, int64_t d, float off) {{
  const float init = MODE == 1 ? -INFINITY : 0.0f;
  V acc[U];
  for (int u = 0; u < U; ++u) acc[u] = splat<V>(init);
  int64_t i = 0;
  for (; i + W * U <= d; i += W * U) {{
#pragma GCC unroll {unroll}
    for (int u = 0; u < U; ++u) acc[u] = combine<MODE>(acc[u], load<V>(x + i + u * W), off);
  }}
  for (; i + W <= d; i += W) acc[0] = combine<MODE>(acc[0], load<V>(x + i), off);
  for (int u = 1; u < U; ++u) acc[0] = MODE == 1 ? vmax(acc[0], acc[u]) : acc[0] + acc[u];
  float s = MODE == 1 ? hmax(acc[0]) : hsum(acc[0]);
  for (; i < d; ++i) s = combine<MODE>(s, x[i], off);
  return s;
}}
"""
    if spec.reduce in ("sum", "mean"):
        scale = "1.0f / static_cast<float>(d)" if spec.reduce == "mean" else "1.0f"
        if knobs.fuse:
            text += f"""
// y[r] = sum(x[r, :]){" / d" if spec.reduce == "mean" else ""}: rows in dynamic chunks of kRowsPerChunk.
void launch_{spec.key}(const float* x, float* y, [[maybe_unused]] float* tmp, int64_t rows, int64_t d) {{
  const float scale = {scale};
#pragma omp parallel for schedule(dynamic, kRowsPerChunk)
  for (int64_t r = 0; r < rows; ++r) y[r] = row_reduce<0>(x + r * d, d, 0.0f) * scale;
}}
"""
        else:
            text += f"""
// Split-row reduction: pass 1 sums each of P segments of every row into tmp, pass 2 sums the P partials.
void launch_{spec.key}(const float* x, float* y, float* tmp, int64_t rows, int64_t d) {{
  const int64_t parts = d % {SPLIT_PARTS} == 0 ? {SPLIT_PARTS} : 1, seg = d / parts;
#pragma omp parallel for schedule(dynamic, kRowsPerChunk)
  for (int64_t s = 0; s < rows * parts; ++s) tmp[s] = row_reduce<0>(x + s * seg, seg, 0.0f);
  const float scale = {scale};
#pragma omp parallel for schedule(dynamic, kRowsPerChunk)
  for (int64_t r = 0; r < rows; ++r) y[r] = row_reduce<0>(tmp + r * parts, parts, 0.0f) * scale;
}}
"""
        return text
    log = spec.reduce == "log_softmax"
    apply_vec = "v - c" if log else "vexp(v - m) * inv"
    text += f"""
// y = {"x - max - log(sum(exp(x - max)))" if log else "exp(x - max) / sum(exp(x - max))"} over one row.
static inline void row_apply(const float* __restrict x, float* __restrict y, int64_t d, float m, float s) {{
  [[maybe_unused]] const float inv = 1.0f / s;
  [[maybe_unused]] const float c = m + std::log(s);
  int64_t i = 0;
#pragma GCC unroll {unroll}
  for (; i + W <= d; i += W) {{
    const V v = load<V>(x + i);
    store(y + i, {apply_vec});
  }}
  for (; i < d; ++i) {{
    const float v = x[i];
    y[i] = {apply_vec};
  }}
}}
"""
    if knobs.fuse:
        text += f"""
// One sweep per row: max, sum of exp, normalise (the row stays in cache between the three loops).
void launch_{spec.key}(const float* x, float* y, [[maybe_unused]] float* tmp, int64_t rows, int64_t d) {{
#pragma omp parallel for schedule(dynamic, kRowsPerChunk)
  for (int64_t r = 0; r < rows; ++r) {{
    const float* xr = x + r * d;
    const float m = row_reduce<1>(xr, d, 0.0f);
    row_apply(xr, y + r * d, d, m, row_reduce<2>(xr, d, m));
  }}
}}
"""
    else:
        text += f"""
// Three passes over the whole tensor: row maxima into tmp[0:rows], sums of exp into tmp[rows:2 rows], normalise.
void launch_{spec.key}(const float* x, float* y, float* tmp, int64_t rows, int64_t d) {{
  float* m = tmp;
  float* s = tmp + rows;
#pragma omp parallel for schedule(dynamic, kRowsPerChunk)
  for (int64_t r = 0; r < rows; ++r) m[r] = row_reduce<1>(x + r * d, d, 0.0f);
#pragma omp parallel for schedule(dynamic, kRowsPerChunk)
  for (int64_t r = 0; r < rows; ++r) s[r] = row_reduce<2>(x + r * d, d, m[r]);
#pragma omp parallel for schedule(dynamic, kRowsPerChunk)
  for (int64_t r = 0; r < rows; ++r) row_apply(x + r * d, y + r * d, d, m[r], s[r]);
}}
"""
    return text
