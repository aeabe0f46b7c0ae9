"""Static checks: no false positive on any reference solution or test fixture; each rule fires where it should.

Pure text and AST work: nothing here compiles or runs a solution.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from cudagym_testing import relu_solution

from cudagym.integrity import RULES, IntegrityPolicy, check_files, run_static_checks, violation_message
from cudagym.integrity.cpp_preprocess import MacroTable, Unexpandable, expand, finish
from cudagym.integrity.cpp_tokens import code, lex, splice, unescape
from cudagym.workspace import FIXED_FILES

TESTS = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted(Path(__file__).resolve().parents[2].glob("tasks/builtin/*/solutions/*"))


def solution_files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def constants(path: Path, names: set[str]) -> dict[str, object]:
    """Module-level constants and functions of a test module, evaluated without importing it (no GPU probing)."""
    tree = ast.parse(path.read_text())
    wanted = [
        n
        for n in tree.body
        if (isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) in names)
        or (isinstance(n, ast.FunctionDef) and n.name in names)
    ]
    namespace: dict[str, object] = {}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def rules(files: dict[str, str], policy: IntegrityPolicy | None = None) -> set[str]:
    return {v.rule for v in check_files(files, policy, known_files=FIXED_FILES)}


# -- zero false positives --------------------------------------------------------------------------


def test_every_builtin_solution_is_found() -> None:
    """Both backends' solutions are checked: every one of the 36 tasks has a cpu solution, 32 a cuda one."""
    cpu = [s for s in SOLUTIONS if s.name == "cpu"]
    cuda = [s for s in SOLUTIONS if s.name == "cuda"]
    assert (len(cpu), len(cuda)) == (36, 32)
    assert {s.parents[1].name for s in cpu} >= {s.parents[1].name for s in cuda}


@pytest.mark.parametrize("folder", SOLUTIONS, ids=lambda p: f"{p.parents[1].name}-{p.name}")
def test_builtin_solutions_pass_every_static_check(folder: Path) -> None:
    assert check_files(solution_files(folder), known_files=FIXED_FILES) == []


def test_solutions_of_other_tests_pass() -> None:
    """The ReLU solution the CPU tests use, and the GPU tests' single-file, side-stream and fault kernels (faults
    must reach the run time: they test containment, not rules)."""
    gpu = constants(TESTS / "gpu" / "test_cuda_backend.py", {"LAUNCHER", "KERNELS", "side_stream", "LOAD_INLINE"})
    side_stream = gpu["side_stream"]
    cases = [relu_solution(), {"model_new.py": gpu["LOAD_INLINE"]}]
    cases += [{"kernels/relu.cu": side_stream(joined)} for joined in (True, False)]  # type: ignore[operator]
    cases += [{"kernels/relu.cu": text} for text in gpu.get("KERNELS", {}).values()]  # type: ignore[union-attr]
    for files in cases:
        assert check_files(files, known_files=FIXED_FILES) == [], files  # type: ignore[arg-type]


KERNELBENCH_STYLE = '''"""A KernelBench-style single file: the CUDA source inline, built by load_inline."""
import os

import torch
import torch.nn as nn
import torch.utils.cpp_extension

os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#define CHECK_INPUT(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor")
__global__ void scale_kernel(const float* x, float* y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;  // torch::relu would be slower; so would at::matmul
  if (i < n) y[i] = x[i] * s;
}
torch::Tensor scale_cuda(const torch::Tensor& x, double s) {
  CHECK_INPUT(x);
  auto y = torch::zeros_like(x);
  int n = x.numel();
  scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""
cpp_src = "torch::Tensor scale_cuda(const torch::Tensor& x, double s);"
scale = torch.utils.cpp_extension.load_inline(
    "scale", cpp_sources=cpp_src, cuda_sources=source, functions=["scale_cuda"],
    extra_cuda_cflags=["-O3", "--use_fast_math"], extra_cflags=[""], extra_ldflags=[""], verbose=False,
)


def cdiv(a, b):
    return (a + b - 1) // b


class ModelNew(nn.Module):
    def __init__(self, features, factor=2.0) -> None:
        super().__init__()
        self.scale = scale
        self.factor = factor
        self.weight = nn.Parameter(torch.ones(features))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.weight)

    def forward(self, x):
        with torch.no_grad(), torch.set_grad_enabled(False):
            blocks = cdiv(x.numel(), 256) * 2
            out = self.scale.scale_cuda(x.contiguous().view(-1), self.factor * 0.5 + blocks * 0)
            return out.view(x.shape[0], -1).reshape(x.size())


def get_inputs():
    return [torch.randn(16, 32) * 2.0]


def get_init_inputs():
    return [32]
'''


def test_a_kernelbench_style_single_file_passes() -> None:
    assert check_files({"model_new.py": KERNELBENCH_STYLE}) == []


def test_environment_writes_other_than_build_settings_are_patching() -> None:
    source = "import os\nos.environ['MAX_JOBS'] = '4'\nos.environ['OMP_NUM_THREADS'] = '64'\n"
    (violation,) = check_files({"model_new.py": source})
    assert (violation.rule, violation.line) == ("patching", 3)


def test_comments_strings_and_docstrings_do_not_count() -> None:
    cpp = '// at::matmul and cublasSgemm in a comment\n/* std::thread */\nconst char* s = "torch::relu(x)";\n'
    python = '"""Uses no try: except: (a docstring); calls cuda_extension."""\nimport cuda_extension\n'
    assert check_files({"kernels/a.cpp": cpp, "model_new.py": python}) == []


# -- rules that fire ----------------------------------------------------------------------------

MODEL = "import torch\nimport torch.nn as nn\nimport cuda_extension\n{top}\nclass ModelNew(nn.Module):\n"
DEF = "    def forward(self, x):\n"
CALL = "        return cuda_extension.f(x)\n"
PY_CASES = {
    "exception_fallback": DEF + "        try:\n    " + CALL + "        except RuntimeError:\n    " + CALL,
    "reference_model": DEF + "        return Model()(x)\n",
    "extension_called": DEF + "        return torch.empty_like(x)\n",
    "concurrency": DEF + "        __import__('os').fork()\n" + CALL,
    "streams": DEF + "        with torch.cuda.stream(torch.cuda.Stream()):\n    " + CALL,
    "cuda_graphs": DEF + "        g = torch.cuda.CUDAGraph()\n" + CALL,
    "patching": DEF + "        torch.cuda.synchronize = lambda: None\n" + CALL,
    "introspection": DEF + "        import gc\n        return cuda_extension.f(gc.get_objects()[0])\n",
    "binary_loading": DEF + "        torch.ops.load_library('kernels.so')\n" + CALL,
    "tensor_subclass": DEF + "        return cuda_extension.f(x).as_subclass(torch.Tensor)\n",
}
TORCH_COMPUTE = {
    "functional": DEF + "        return cuda_extension.f(torch.nn.functional.relu(x))\n",
    "operator": DEF + "        return cuda_extension.f(x) * 2\n",
    "matmul": "    def forward(self, x, w):\n        return cuda_extension.f(x @ w)\n",
    "method": DEF + "        return cuda_extension.f(x).sum(dim=-1)\n",
    "in_place": DEF + "        y = torch.empty_like(x)\n        y.fill_(0)\n        return cuda_extension.f(y)\n",
    "cast": DEF + "        return cuda_extension.f(x.half())\n",
    "compare": DEF + "        return cuda_extension.f(x > 0)\n",
    "gather": "    def forward(self, x, idx):\n        return cuda_extension.f(x[idx])\n",
    "builtin": DEF + "        return cuda_extension.f(abs(x))\n",
    "module": "    def __init__(self):\n        super().__init__()\n        self.act = nn.GELU()\n"
    + DEF
    + "        return cuda_extension.f(self.act(x))\n",
    "alias": DEF + "        f = torch.tanh\n        return cuda_extension.f(f(x))\n",
    "helper": DEF + "        return cuda_extension.f(helper(x))\n",
    "getattr": DEF + "        return cuda_extension.f(getattr(x, 'exp')())\n",
    "numpy": DEF + "        import numpy\n        return cuda_extension.f(numpy.maximum(x, 0))\n",
}


@pytest.mark.parametrize("rule", list(PY_CASES))
def test_python_rules_fire(rule: str) -> None:
    source = MODEL.format(top="") + PY_CASES[rule]
    assert rule in rules({"model_new.py": source}), check_files({"model_new.py": source})


@pytest.mark.parametrize("case", list(TORCH_COMPUTE))
def test_torch_compute_in_the_forward_path_is_found(case: str) -> None:
    top = "def helper(t):\n    return t.clamp(min=0)\n" if case == "helper" else ""
    source = MODEL.format(top=top) + TORCH_COMPUTE[case]
    assert rules({"model_new.py": source}) == {"torch_compute"}, check_files({"model_new.py": source})


@pytest.mark.parametrize(
    "source",
    [
        "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(s):\n        super().__init__()\n"
        "        s.l = nn.Linear(4, 4)\n    def forward(s, x):\n        return s.l(x)\n",  # nn.Linear via an alias
        "import torch\nx = '#'\ntorch.cuda.Event.elapsed_time = lambda s, e: 0.001\n",  # a '#' in a string
        "n = 8 // 2\nimport threading\n",  # a '//' before the import
        "import torch\nsetattr(torch.cuda.Event, 'elapsed_time', lambda s, e: 0.0)\n",
        "import torch\ntorch.allclose = lambda *a, **k: True\n",
        "__import__('threading')\n",
        "from model import Model\nclass ModelNew(Model):\n" + DEF + "        return super().forward(x)\n",
        "from torch.utils.cpp_extension import load_inline\nsrc = 'void f() { cudaStream_t s; "
        "cudaStreamCreateWithFlags(&s, 1); }'\next = load_inline('e', cpp_sources='', cuda_sources=src)\n",
    ],
    ids=["nn-alias", "hash-in-string", "slash-slash", "setattr", "allclose", "dunder-import", "super", "cpp-stream"],
)
def test_kernelbench_checker_bypasses_are_caught(source: str) -> None:
    """The bypasses the KernelBench report found in its regex checker (kernelbench-harness.md section 4)."""
    assert check_files({"model_new.py": source}, IntegrityPolicy(allow_cpp_streams=False))


CPP_CASES = {
    "torch_compute": "torch::Tensor f(torch::Tensor x) { return at::native::relu(x.mm(x)); }",
    "vendor_libraries": "void f() { cublasSgemm_v2(0, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1); }",
    "concurrency": "#include <thread>\nvoid f() { std::thread([] {}).detach(); }",
    "cuda_graphs": "void f(cudaStream_t s) { cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal); }",
    "patching": 'extern "C" int clock_gettime(int c, void* t) { return 0; }',
    "binary_loading": 'void f() { cuModuleLoadData(0, ".version 8.0\\n.target sm_90\\n"); }',
    "outside_workspace": '#include "../../../etc/hostname"\n',
    "introspection": 'const char* p = "/proc/self/maps";',
}


@pytest.mark.parametrize("rule", list(CPP_CASES))
def test_cpp_rules_fire(rule: str) -> None:
    assert rule in rules({"kernels/k.cu": CPP_CASES[rule]}), check_files({"kernels/k.cu": CPP_CASES[rule]})


def test_cpp_in_load_inline_strings_is_checked_with_its_line() -> None:
    source = 'import cuda_extension\nfrom torch.utils.cpp_extension import load_inline\nsrc = """\n#include <x.h>\n'
    source += (
        'torch::Tensor f(torch::Tensor x) { return torch::matmul(x, x); }\n"""\nm = load_inline("m", cpp_sources=src)\n'
    )
    (violation,) = check_files({"model_new.py": source})
    assert (violation.rule, violation.path, violation.line) == ("torch_compute", "model_new.py", 5)
    assert "torch::matmul" in violation.what


def test_load_inline_flags_stay_inside_the_workspace() -> None:
    source = "from torch.utils.cpp_extension import load_inline\nm = load_inline('m', cpp_sources='', "
    source += "extra_ldflags=['-L/opt/evil', '-lcudnn'], extra_include_paths=['/usr/include/secret'])\n"
    found = [(v.rule, v.what) for v in check_files({"model_new.py": source})]
    assert ("outside_workspace", "extra_ldflags passes '-L/opt/evil' (links or loads from elsewhere)") in found
    assert ("outside_workspace", "extra_include_paths points at '/usr/include/secret', outside the workspace") in found
    assert ("vendor_libraries", "extra_ldflags links cudnn (not allowed here)") in found


def test_includes_resolve_like_the_compiler() -> None:
    fine = '#include "binding_registry.h"\n#include "../binding_registry.h"\n#include "relu.cuh"\n#include <cuda.h>\n'
    files = {"kernels/a.cu": fine, "kernels/relu.cuh": ""}
    assert check_files(files, known_files=FIXED_FILES) == []
    for bad in ('#include "../secret.h"', "#include </etc/passwd>", "#include <../x.h>", "#define P </x>\n#include P"):
        assert rules({"kernels/a.cu": bad}) == {"outside_workspace"}, bad


def test_embedded_binaries_are_found() -> None:
    blob = "QUJD" * 100
    assert rules({"model_new.py": f"import cuda_extension\nDATA = '{blob}'\n"}) == {"binary_loading"}
    assert rules({"model_new.py": "X = b'\\x7fELF' + b'0' * 80\n"}) == {"binary_loading"}
    table = "const unsigned char k[] = {" + ", ".join(["0x7f"] * 2000) + "};"  # xxd -i output
    assert rules({"kernels/t.h": table}) == {"binary_loading"}
    elf = "static const unsigned char k[] = {0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01};"  # small, but an ELF header
    assert rules({"kernels/t.h": elf}) == {"binary_loading"}
    pieces = "static const char* k[] = {" + ", ".join([f'"{blob[:200]}"'] * 8) + "};"  # a blob cut into strings
    assert rules({"kernels/t.h": pieces}) == {"binary_loading"}
    assert rules({"kernels/t.h": f'const char* k = "{blob[:200]}" "{blob[:200]}";'}) == {"binary_loading"}


def test_numeric_tables_are_not_binaries() -> None:
    floats = "static const float t[4096] = {" + ", ".join(f"{i / 7:.5f}f" for i in range(4096)) + "};"
    ints = "static const int t[8192] = {" + ", ".join(str(i * 37 % 100003) for i in range(8192)) + "};"
    nested = "static const float t[64][64] = {" + ", ".join("{" + ", ".join(["1.5f"] * 64) + "}" for _ in range(64))
    popcount = "static const unsigned char t[256] = {" + ", ".join(str(bin(i).count("1")) for i in range(256)) + "};"
    for table in (floats, ints, nested + "};", popcount):
        assert rules({"kernels/t.h": table}) == set(), table[:60]
    huge = "static const float t[] = {" + ", ".join(["0.5f"] * 70000) + "};"
    assert rules({"kernels/t.h": huge}) == {"binary_loading"}


# -- the translation phases before the rules (cpp_tokens, cpp_preprocess) ----------------------------------------


def expanded(source: str) -> list[str]:
    """The code (directives left out) of ``source`` after every phase, once per combination of macro
    definitions."""
    tokens = lex(source)
    table = MacroTable()
    table.add_source(tokens)
    combos = table.choices(tokens, 64)
    assert combos is not None
    return [" ".join(t.spelling() for _, t in code(finish(expand(tokens, table, c, 10_000)))) for c in combos]


def test_line_splices_join_identifiers_and_keep_line_numbers() -> None:
    assert splice("dl\\\nsym();\nx;") == "dlsym();\n\nx;"
    assert splice("a \\  \nb") == "a b\n"  # GCC also splices a backslash followed by blanks
    tokens = lex('int k;\nvoid* p = dl\\\nsym(h, "x");\nint after;\n')
    lines = {t.text: t.line for t in tokens if t.kind == "id"}
    assert (lines["dlsym"], lines["h"], lines["after"]) == (2, 2, 4)
    assert [t.text for t in lex("// a comment \\\ndlsym(h);\nok;")] == ["ok", ";"]  # the splice ends the comment late


def test_trigraphs_digraphs_and_universal_names_are_normalised() -> None:
    assert [t.text for t in lex("??=define X dl??=??=sym")][:2] == ["#", "define"]
    assert [t.text for t in lex("%:define P(a, b) a%:%:b")][:2] == ["#", "define"]
    assert "##" in [t.text for t in lex("%:define P(a, b) a%:%:b")]
    assert lex("dl\\u0073ym(h);")[0].text == "dlsym"
    assert lex("/**/ #define X 1")[0].kind == "hash"  # a directive after a comment


def test_string_literals_are_decoded_and_joined() -> None:
    assert unescape('\\x2eincbin \\056x \\n\\"') == '.incbin .x \n"'
    (joined,) = finish(lex('".inc" "bin" u8"x"'))
    assert joined.kind == "str" and joined.decoded() == ".incbinx"
    raw = finish(lex('R"(\\x2e)"'))[0]
    assert raw.decoded() == "\\x2e"  # a raw string's escapes are not escapes


def test_macros_expand_like_the_preprocessor() -> None:
    assert expanded("#define F(a, b) a##b\nF(dl, sym)(h);")[0].endswith("dlsym ( h ) ;")
    assert expanded('#define S(x) #x\nasm(S(.incbin "k"));')[0].endswith('asm ( ".incbin \\"k\\"" ) ;')
    assert expanded("#define NS at\nNS::relu(x);")[0].endswith("at :: relu ( x ) ;")
    assert expanded("#define V(...) f(__VA_ARGS__)\nV(1, 2);")[0].endswith("f ( 1 , 2 ) ;")
    assert expanded("#define O(a, ...) g(a __VA_OPT__(,) __VA_ARGS__)\nO(1); O(1, 2);")[0].endswith(
        "g ( 1 ) ; g ( 1 , 2 ) ;"
    )
    assert expanded("#define foo foo bar\n#define a b\n#define b a\nfoo; a b;")[0].endswith("foo bar ; a b ;")
    assert expanded("#define CAT(a, b) a ## b\n#define X CAT(dl, sym)\nX;")[0].endswith("dlsym ;")


def test_every_definition_of_a_conditional_macro_is_expanded() -> None:
    source = "#ifdef A\n#define F foo\n#else\n#define F dl##sym\n#endif\nF(h);"
    results = expanded(source)
    assert len(results) == 2 and any(r.endswith("foo ( h ) ;") for r in results)
    assert any(r.endswith("dlsym ( h ) ;") for r in results)


def test_pragma_operator_becomes_a_directive() -> None:
    tokens = finish(lex('_Pragma("omp parallel num_threads(4)")\nint x;'))
    assert [t.kind for t in tokens[:2]] == ["hash", "id"] and tokens[1].text == "pragma"
    assert "num_threads" in [t.text for t in tokens]
    with pytest.raises(Unexpandable):
        finish(lex("_Pragma(P)"))


def test_what_cannot_be_expanded_is_refused() -> None:
    for source in (
        "#define F(a) a\nint x = F(1;",  # unterminated arguments
        "#define F(a, b) a\nint x = F(1, 2, 3);",  # too many arguments
        "#define A(x) x x\n#define B(x) A(A(A(A(x))))\nB(B(B(B(B(z)))));",  # past the expansion budget
        "".join(f"#ifdef X{i}\n#define M{i} a\n#else\n#define M{i} b\n#endif\n" for i in range(6))
        + " ".join(f"M{i}" for i in range(6)),  # 64 combinations of definitions
        'asm(C10_STRINGIZE(.incbin "k"));',  # an asm text a toolkit macro would build
        "_Pragma(P)",
    ):
        assert rules({"kernels/k.cpp": source}) == {"checkable"}, source


def test_macros_of_one_source_expand_in_another() -> None:
    files = {
        "kernels/util.h": "#define CAT(a, b) a##b\n",
        "kernels/k.cpp": '#include "util.h"\nvoid* p = CAT(dl, sym);',
    }
    (violation,) = check_files(files, known_files=FIXED_FILES)
    assert (violation.rule, violation.path, violation.line) == ("binary_loading", "kernels/k.cpp", 2)
    assert "through macro CAT" in violation.what


def test_load_inline_define_flags_are_macros_of_its_sources() -> None:
    source = (
        "from torch.utils.cpp_extension import load_inline\n"
        'm = load_inline("m", cpp_sources="void* f(void* h) { return F(dl, sym)(h, \\"x\\"); }", '
        'extra_cflags=["-D", "F(a,b)=a##b"])\n'
    )
    assert rules({"model_new.py": source}) == {"binary_loading"}
    honest = source.replace("F(dl, sym)(h, ", "g(h, ").replace('"-D", "F(a,b)=a##b"', '"-DNDEBUG", "-DX=1"')
    assert rules({"model_new.py": honest}) == set()
    assert rules({"model_new.py": honest.replace("-DX=1", "-DG=dlopen")}) == {"binary_loading"}


def test_lexer_keeps_strings_and_lines() -> None:
    tokens = lex('a /* x\ny */ b\n#include <v.h>\nR"(raw "q" \n)" c "s\\"t" \'c\'\n')
    kinds = [(t.kind, t.text, t.line) for t in tokens]
    assert ("id", "b", 2) in kinds and ("header", "<v.h>", 3) in kinds
    assert ("str", 'raw "q" \n', 4) in kinds and ("id", "c", 5) in kinds and ("str", 's\\"t', 5) in kinds


# -- the policy ---------------------------------------------------------------------------------

CUBLAS = "void f() { cublasSgemm_v2(h); cublasGemmEx(h); cublasLtMatmul(h); cublasSaxpy_v2(h); }\n"
CUDNN = "void f() { cudnnConvolutionForward(h); cudnnCreateTensorDescriptor(&d); cudnnSoftmaxForward(h); }\n"


def test_cublas_and_cudnn_only_where_allowed_and_only_for_gemm_and_convolution() -> None:
    assert len(check_files({"kernels/k.cu": CUBLAS})) == 4
    allowed = check_files({"kernels/k.cu": CUBLAS}, IntegrityPolicy(allow_cublas=True))
    assert [v.what.split(" ")[0] for v in allowed] == ["cublasSaxpy_v2"]
    allowed = check_files({"kernels/k.cu": CUDNN}, IntegrityPolicy(allow_cudnn=True))
    assert [v.what.split(" ")[0] for v in allowed] == ["cudnnSoftmaxForward"]


def test_stream_policy_is_separate_for_python_and_cpp() -> None:
    cpp = {"kernels/k.cu": "void f() { cudaStream_t s; cudaStreamCreateWithFlags(&s, 1); }"}
    python = {"model_new.py": MODEL.format(top="") + PY_CASES["streams"]}
    assert rules(cpp) == set() and rules(python) == {"streams"}  # the default
    assert rules(cpp, IntegrityPolicy(allow_cpp_streams=False)) == {"streams"}
    assert rules(python, IntegrityPolicy(allow_python_streams=True)) == set()


def test_permissive_allows_compute_and_libraries_but_not_tampering() -> None:
    policy = IntegrityPolicy.permissive()
    for case in TORCH_COMPUTE:
        top = "def helper(t):\n    return t.clamp(min=0)\n" if case == "helper" else ""
        assert rules({"model_new.py": MODEL.format(top=top) + TORCH_COMPUTE[case]}, policy) == set(), case
    assert rules({"kernels/k.cu": CUBLAS + CUDNN}, policy) == {"vendor_libraries"}  # saxpy and softmax
    for rule in ("reference_model", "concurrency", "patching", "introspection", "binary_loading", "tensor_subclass"):
        assert rule in rules({"model_new.py": MODEL.format(top="") + PY_CASES[rule]}, policy), rule


def test_allow_and_deny_lists_and_disabled_checks() -> None:
    source = {"model_new.py": MODEL.format(top="") + TORCH_COMPUTE["functional"]}
    assert rules(source, IntegrityPolicy().extended(allow=["torch.nn.functional.relu"])) == set()
    assert rules(source, IntegrityPolicy(disabled_checks={"torch_compute"})) == set()
    assert rules(relu_solution(), IntegrityPolicy(deny={"Tensor.contiguous", "relu_kernel"})) == {"denied_name"}
    assert rules({"kernels/k.cu": CUBLAS}, IntegrityPolicy(allow={"cublasSaxpy_v2"}, allow_cublas=True)) == set()
    assert rules({"kernels/k.cu": CUBLAS}, IntegrityPolicy.without_static_checks()) == set()
    with pytest.raises(ValueError, match="Did you mean 'torch_compute'"):
        IntegrityPolicy(disabled_checks={"torch_compte"})


def test_task_hints_may_allow_libraries_only() -> None:
    policy = IntegrityPolicy().with_task_hints({"allow_cublas": True})
    assert policy.allow_cublas and not policy.allow_cudnn
    assert IntegrityPolicy(honor_task_hints=False).with_task_hints({"allow_cublas": True}).allow_cublas is False
    with pytest.raises(ValueError, match="may set only"):
        IntegrityPolicy().with_task_hints({"allow_torch_compute": True})


def test_aten_ops_for_run_time_recording() -> None:
    policy = IntegrityPolicy()
    assert policy.allows_aten_op("aten::empty_like") and policy.allows_aten_op("aten::view")
    assert not policy.allows_aten_op("aten::relu") and not policy.allows_aten_op("aten::add.Tensor")
    assert policy.extended(allow={"aten::relu"}).allows_aten_op("aten::relu")
    assert IntegrityPolicy.permissive().allows_aten_op("aten::mm")
    assert not IntegrityPolicy.permissive().extended(deny={"aten::mm"}).allows_aten_op("aten::mm")


# -- findings and messages ----------------------------------------------------------------------


def test_one_finding_per_check_naming_file_and_line() -> None:
    source = MODEL.format(top="") + TORCH_COMPUTE["functional"]
    findings, violations = run_static_checks({"model_new.py": source}, IntegrityPolicy())
    assert [f.check for f in findings] == [f"static_{rule}" for rule in RULES]
    failed = [f for f in findings if not f.passed]
    assert [f.check for f in failed] == ["static_torch_compute"]
    assert failed[0].detail.startswith("model_new.py:7: calls torch.nn.functional.relu")
    message = violation_message(violations, IntegrityPolicy())
    assert "static_torch_compute" in message and "model_new.py:7" in message
    assert "may only allocate tensors" in message  # what is allowed instead
    disabled = run_static_checks({}, IntegrityPolicy(disabled_checks={"streams"}))[0]
    assert next(f for f in disabled if f.check == "static_streams").detail.startswith("not run")


def test_a_syntax_error_is_left_to_the_loader_and_deep_nesting_is_refused() -> None:
    assert check_files({"model_new.py": "def broken(:\n"}) == []
    for terms in (1500, 20000):  # past Python's recursion limit: in the checks, then in the parser
        source = f"import cuda_extension\ndef forward(x):\n    return cuda_extension.f({'+'.join(['x'] * terms)})\n"
        assert rules({"model_new.py": source}) == {"checkable"}
