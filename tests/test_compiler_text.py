"""Compiler output made short for the agent: the first error with its context (include chain, function), its excerpt,
and one line counting what was left out. The texts are what g++ 12, nvcc 12 and ld wrote on the CI machine; one test
runs g++ itself."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cudagym.compiler_text import condense, first_error_location, has_diagnostics, parse

GCC = """In file included from kernels/relu.cpp:2:
kernels/helpers.h: In function 'float scale(float)':
kernels/helpers.h:3:42: error: 'undefined_factor' was not declared in this scope
    3 | inline float scale(float v) { return v * undefined_factor; }
      |                                          ^~~~~~~~~~~~~~~~
kernels/relu.cpp: In function 'void relu_kernel(const float*, float*, int64_t)':
kernels/relu.cpp:6:5: error: expected ',' or ';' before 'y'
    6 |     y[i] = v > 0.0f ? scale(v) : 0.0f;
      |     ^
kernels/relu.cpp:8:34: error: no matching function for call to 'push_back(const char [2])'
    8 |   std::vector<int> a; a.push_back("x");
      |                       ~~~~~~~~~~~^~~~~
In file included from /usr/include/c++/12/vector:64,
                 from kernels/helpers.h:2:
/usr/include/c++/12/bits/stl_vector.h:1276:7: note: candidate: 'void std::vector<_Tp, _Alloc>::push_back(const value_type&) [with _Tp = int; _Alloc = std::allocator<int>; value_type = int]' (near match)
 1276 |       push_back(const value_type& __x)
      |       ^~~~~~~~~
/usr/include/c++/12/bits/stl_vector.h:1276:7: note:   conversion of argument 1 would be ill-formed:
kernels/relu.cpp:8:35: error: invalid conversion from 'const char*' to 'std::vector<int>::value_type' {aka 'int'} [-fpermissive]
    8 |   std::vector<int> a; a.push_back("x");
      |                                   ^~~
      |                                   |
      |                                   const char*
/usr/include/c++/12/bits/stl_vector.h:1293:7: note: candidate: 'void std::vector<_Tp, _Alloc>::push_back(value_type&&) [with _Tp = int; _Alloc = std::allocator<int>; value_type = int]' (near match)
 1293 |       push_back(value_type&& __x)
      |       ^~~~~~~~~
/usr/include/c++/12/bits/stl_vector.h:1293:7: note:   conversion of argument 1 would be ill-formed:
kernels/relu.cpp:8:35: error: invalid conversion from 'const char*' to 'std::vector<int>::value_type' {aka 'int'} [-fpermissive]
    8 |   std::vector<int> a; a.push_back("x");
      |                                   ^~~
      |                                   |
      |                                   const char*
kernels/relu.cpp:9:3: error: 'missing_call' was not declared in this scope
    9 |   missing_call(y);
      |   ^~~~~~~~~~~~
"""  # noqa: E501 (what the compiler wrote)
NVCC = """kernels/k.cu(2): error: identifier "undefined_factor" is undefined
  template <typename T> __attribute__((device)) T twice(T v) { return v * undefined_factor; }
                                                                          ^

kernels/k.cu(7): error: identifier "foo" is undefined
    foo(y);
    ^

2 errors detected in the compilation of "kernels/k.cu".
"""
LINKER = """/usr/bin/ld: <cache>/objects/3f2a.o: in function `run(float const*, float*, long)':
link.cpp:(.text+0x27): undefined reference to `relu_kernel(float const*, float*, long)'
collect2: error: ld returned 1 exit status
"""
WARNINGS = """kernels/warn.cpp: In function 'int f(int)':
kernels/warn.cpp:1:57: warning: comparison of integer expressions of different signedness: 'int' and 'unsigned int' [-Wsign-compare]
    1 | int f(int n) { int unused = 3; unsigned u = 2; return n < u ? 1 : 0; }
      |                                                       ~~^~~
kernels/warn.cpp:1:20: warning: unused variable 'unused' [-Wunused-variable]
    1 | int f(int n) { int unused = 3; unsigned u = 2; return n < u ? 1 : 0; }
      |                    ^~~~~~
"""  # noqa: E501 (what the compiler wrote)


def test_gcc_keeps_the_first_error_with_its_include_chain_and_counts_the_rest() -> None:
    out = condense(GCC)
    assert out.splitlines()[:5] == GCC.splitlines()[:5]  # include chain, function, error, excerpt
    assert "[4 more errors (in kernels/relu.cpp), 4 notes not shown: fix this one first" in out
    assert "note:" not in out and "stl_vector.h" not in out and "missing_call" not in out
    assert len(out.splitlines()) == 6
    assert first_error_location(GCC) == "kernels/helpers.h:3"


def test_nvcc_keeps_the_first_error_and_its_excerpt() -> None:
    out = condense(NVCC)
    assert out.splitlines() == [
        *NVCC.splitlines()[:3],
        "[1 more error (in kernels/k.cu) not shown: fix this one first, later errors often follow from it]",
    ]
    assert "detected in the compilation" not in out
    assert first_error_location(NVCC) == "kernels/k.cu:2"


def test_a_link_error_keeps_the_undefined_reference_and_its_function() -> None:
    out = condense(LINKER)
    assert "in function `run(float const*, float*, long)'" in out
    assert "undefined reference to `relu_kernel(float const*, float*, long)'" in out
    assert "collect2" not in out
    assert first_error_location(LINKER) == ""


def test_warnings_alone_show_the_first_and_count_the_others() -> None:
    out = condense(WARNINGS)
    assert out.splitlines()[:4] == WARNINGS.splitlines()[:4]
    assert out.splitlines()[-1] == "[1 more warning not shown]"


def test_a_long_include_chain_is_bounded_at_both_ends() -> None:
    chain = ["In file included from kernels/a.h:1,"] + [f"                 from kernels/h{i}.h:1," for i in range(20)]
    text = "\n".join([*chain, "                 from kernels/relu.cpp:1:", "kernels/a.h:3:1: error: boom"])
    out = condense(text).splitlines()
    assert out[0] == chain[0] and "kernels/relu.cpp:1:" in out[-2] and out[-1] == "kernels/a.h:3:1: error: boom"
    assert any("more lines of context" in line for line in out) and len(out) <= 10


def test_output_in_no_compiler_form_is_kept_with_repeats_collapsed() -> None:
    text = "Nothing to compile: write kernels/*.cu or kernels/*.cpp first.\n" + "retrying\n" * 10
    assert not has_diagnostics(text)
    out = condense(text)
    assert out.startswith("Nothing to compile") and out.count("retrying") == 2 and "8 more times" in out


def test_thousands_of_errors_stay_bounded() -> None:
    text = "".join(f"kernels/big.cpp:{i}:1: error: error number {i}\n    x\n    ^\n" for i in range(1, 5000))
    out = condense(text, limit=4000)
    assert len(out) < 400 and "4998 more errors" in out and "error number 1\n" in out + "\n"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_the_installed_gcc_output_is_understood(tmp_path: Path) -> None:
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "helpers.h").write_text("#pragma once\ninline float scale(float v) { return v * undefined_factor; }\n")
    (kernels / "relu.cpp").write_text('#include "helpers.h"\nvoid f() { missing_call(); missing_call(); }\n')
    run = subprocess.run(
        ["g++", "-fdiagnostics-color=never", "-c", "kernels/relu.cpp", "-o", "/dev/null"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert run.returncode != 0
    errors = [d for d in parse(run.stderr) if d.kind == "error"]
    assert len(errors) >= 2 and errors[0].context[0].startswith("In file included from kernels/relu.cpp:1")
    out = condense(run.stderr)
    assert (
        "undefined_factor" in out and "more error" in out and first_error_location(run.stderr) == "kernels/helpers.h:2"
    )
