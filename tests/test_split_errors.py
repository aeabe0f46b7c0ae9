"""The errors of a split file's failed device unit stand for the file's only where the file as written has them too
(``cudagym.split_errors``): typos on its own lines, names that neither torch's headers nor the host code hold."""

from __future__ import annotations

from cudagym.kernel_split import LAUNCHER_PREFIX, split
from cudagym.split_errors import directives, errors_of_the_file, torch_words

KERNEL = "__global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }  // EDIT\n"
HOST = "const int kThreads = 32;\nint host_value(float* y) { k<<<1, kThreads>>>(y, 4); return 0; }\n"
SOURCE = f"#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n{KERNEL}{HOST}"
PARTS = split(SOURCE, "t")
KERNEL_LINE = PARTS.device.splitlines()[2]  # its launcher inserted
LAUNCHER = KERNEL_LINE.index(" __attribute__")
COUNT = '1 error detected in the compilation of "split/cuda.cu".'
TORCH = frozenset({"at", "torch", "CUDA_KERNEL_LOOP", "i"})


def said(what: str, *, line: int = 3, caret: int = LAUNCHER - 3) -> str:
    return f"split/cuda.cu({line}): error: {what}\n{KERNEL_LINE}\n{' ' * caret}^\n\n{COUNT}\n"


def told(diagnostics: str, torch: frozenset[str] | None = TORCH) -> str | None:
    return errors_of_the_file(
        diagnostics, "cuda.cu", device=PARTS.device, host=PARTS.host, source=SOURCE, torch_names=lambda: torch
    )


def test_a_typo_on_the_file_s_own_text_is_told_in_the_file_s_name_without_the_launcher() -> None:
    text = told(said('expected a ";"'))
    assert text is not None and "split/" not in text and LAUNCHER_PREFIX not in text
    lines = text.splitlines()
    assert lines[0] == 'cuda.cu(3): error: expected a ";"'
    assert lines[1] == KERNEL_LINE[:LAUNCHER] + KERNEL_LINE[LAUNCHER:].split("); }", 1)[1]
    assert lines[-1] == '1 error detected in the compilation of "cuda.cu".'


def test_a_name_nothing_declares_is_the_file_s_error_and_one_torch_or_the_host_could_declare_is_not() -> None:
    assert told(said('identifier "undeclared_thing" is undefined')) is not None
    for name in ("CUDA_KERNEL_LOOP", "kThreads", "host_value"):  # torch's words; the host unit's
        assert told(said(f'identifier "{name}" is undefined')) is None, name
    assert told(said('identifier "undeclared_thing" is undefined'), torch=None) is None  # torch's words unread


def test_the_torch_words_are_asked_for_only_where_a_name_is_undefined() -> None:
    def unasked() -> frozenset[str]:
        raise AssertionError("asked")

    diagnostics = said("too few arguments in function call")
    assert errors_of_the_file(
        diagnostics, "cuda.cu", device=PARTS.device, host=PARTS.host, source=SOURCE, torch_names=unasked
    )


def test_anything_else_compiles_the_file_whole() -> None:
    own = said('expected a ";"')
    refused = {
        "a caret in the launcher": said('expected a ";"', caret=LAUNCHER + 5),
        "an error of another kind": said('explicit type is missing ("int" assumed)'),
        "undefined in device code": said('identifier "kThreads" is undefined in device code'),
        "a header's error": own.replace("split/cuda.cu(3)", "fake/helpers.cuh(3)", 1),
        "the host compiler's": own + "split/cuda.cu:3:1: error: expected ';' before '}' token\n",
        "a later stage's": own + "ptxas error   : Entry function uses too much shared data\n",
        "no line under the error": own.split("\n", 1)[0],
        "a line the device unit blanked": said('expected a ";"', line=5),  # the host function's
        "a line past the end": said('expected a ";"', line=99),
        "no error at all": f"{COUNT}\n",
        "nothing": "",
    }
    for why, diagnostics in refused.items():
        assert told(diagnostics) is None, why


def test_warnings_beside_the_errors_change_nothing() -> None:
    warning = 'split/cuda.cu(3): warning #177-D: variable "error_count" was declared but never referenced\n'
    assert told(warning + said('expected a ";"')) is not None


def test_the_directives_torch_s_words_are_read_from_and_the_words_of_their_preprocessed_text() -> None:
    guarded = "#if __has_include(<c10/cuda/CUDAStream.h>)\n#include <c10/cuda/CUDAStream.h>\n#endif\n"
    macro = '#define CHECK(x) \\\n  do_check(x, "#not a directive")\n'
    source = f"#include <torch/extension.h>\n{guarded}{macro}/*\n#include <not_included.h>\n*/\n{KERNEL}"
    lines = directives(source).splitlines()
    assert lines[:6] == ["#include <torch/extension.h>", *guarded.splitlines(), *macro.splitlines()]
    assert lines[6:] == ["", "", "", ""] and directives(KERNEL + HOST) == ""
    words = torch_words('# 1 "x.h"\n#define CUDA_KERNEL_LOOP(i, n) for (int i = 0; i < n; ++i)\nint at_value;\n')
    assert {"CUDA_KERNEL_LOOP", "i", "n", "at_value", "define"} <= words and "0" not in words
