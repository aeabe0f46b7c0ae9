"""A single-file solution's CUDA source compiled against ``torch/types.h`` in place of ``torch/extension.h``, where
that cannot change what it means.

KernelBench's ``cuda_sources`` include ``torch/extension.h`` (all of torch's C++ frontend and its Python bindings),
which nvcc, having no precompiled headers, parses on every compile of the file: most of a kernel edit's rebuild.
``load_inline`` already puts ``torch/types.h`` (ATen, the tensor factories, ``TORCH_CHECK``, the dispatch macros) at
the top of every ``cuda.cu``, and a CUDA kernel's torch wrapper rarely needs more. So the builder first compiles a
*lighter* copy of the file: each line that includes ``torch/extension.h``, ``torch/torch.h`` or ``torch/all.h`` (the
heavy headers) replaced by ``#include <torch/types.h>``, nothing else changed (the same lines, so ``__LINE__`` and
diagnostics line numbers hold). A source that needs something only the heavy headers bring fails that compile and is
compiled as written (``cudagym.inline_build``); the agent sees only the original's result.

A lighter copy that compiles could still mean something else where the heavy headers would have changed what one of
its names refers to, so the copy is used only when none of these holds (:meth:`HeavyOnly.blocks`):

* the source names a macro that the heavy headers define, redefine or undefine (a macro expands whatever the source
  declares, and ``#ifdef`` tests it);
* the source uses a name that appears in the heavy headers' code but nowhere in the light headers' (a function,
  type, namespace, constant...), other than names the source itself declares as variables (a variable hides any
  such name; functions are not exempt, their overloads merge);
* the source names Python's or pybind11's API (``py::``, ``Py*``, ``THP*``, ``pybind11``): their type casters
  (specialisations that change what a conversion does) live in the heavy headers only;
* the source holds a raw string literal or a heavy include continued from a line before (the rewrite is a text
  edit, which must not reach into a literal).

The heavy-only macros and names are read from the preprocessor's output of ``torch/types.h`` followed by
``torch/extension.h`` (:func:`heavy_only`), with the compile's own flags, once per toolchain and flags. What is left
unguarded: an overload or specialisation the heavy headers add to a name the light ones declare too (torch's C++
frontend adds its own names in namespaces of its own: ``torch::nn``, ``torch::optim``, ...).

The same holds for a split file's host unit (``cudagym.kernel_split``), compiled by the C++ compiler against the light
header where its text passes the guard, and, with lighter headers of their own, for ``load_inline``'s ``main.cpp``
(the request's declarations and its pybind11 module): its copy includes pybind11 with torch's type casters
(``torch/csrc/utils/pybind.h``) and the error wrapper of its bindings (``torch/csrc/Exceptions.h``) before
``torch/types.h`` (:data:`BINDING_HEADERS`), leaving out torch's C++ frontend. Its guard reads the heavy part after
those headers, and lets the copy name Python's API only where the heavy part adds no pybind11 type caster (a caster
there would change what a binding converts).
"""

from __future__ import annotations

import dataclasses
import re

LIGHT_HEADER = "torch/types.h"
HEAVY_HEADERS = ("torch/extension.h", "torch/torch.h", "torch/all.h")
EXTENSION_LINE = f"#include <{HEAVY_HEADERS[0]}>\n"  # load_inline's implicit first line of main.cpp
# what a binding file's lighter copy includes: pybind11 with torch's type casters, torch::wrap_pybind_function
# (load_inline's bindings, with_pytorch_error_handling) and the light header
BINDING_HEADERS = ("torch/csrc/utils/pybind.h", "torch/csrc/Exceptions.h", LIGHT_HEADER)


@dataclasses.dataclass(frozen=True)
class Probe:
    """A file for the preprocessor that includes ``light`` headers, then ``torch/extension.h``: the line after the
    light ones starts the heavy part. ``bindings``: the light part holds Python's and pybind11's API."""

    light: tuple[str, ...]
    bindings: bool

    @property
    def text(self) -> str:
        return "".join(f"#include <{header}>\n" for header in self.light) + EXTENSION_LINE

    @property
    def heavy_line(self) -> int:
        return len(self.light) + 1


PROBE = Probe((LIGHT_HEADER,), bindings=False)  # a CUDA file's, or a split file's host unit's
BINDING_PROBE = Probe(BINDING_HEADERS, bindings=True)  # a binding file's (main.cpp)
PROBE_NAME = "heavy_probe.cu"
# the text a binding file's lighter copy begins with (its precompiled header), then the line that gives the file's
# own first line its number back
BINDING_INCLUDES = "".join(f"#include <{header}>\n" for header in BINDING_HEADERS)
BINDING_HEAD = f"{BINDING_INCLUDES}#line 1\n"

_HEAVY_LINE_RE = re.compile(
    r'^[ \t]*#[ \t]*include[ \t]*(?:<torch/(?:extension|torch|all)\.h>|"torch/(?:extension|torch|all)\.h")'
    r"[ \t]*(?://.*)?$",
    re.M,
)
# how a CUDA source's text is read here and by cudagym.kernel_split: where a raw string starts, a name, and
RAW_STRING_RE = re.compile(r'(?:^|[^A-Za-z0-9_])(?:u8|[uUL])?R"')
IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# comments, string literals and (single) character literals, which hold no names the compiler looks up
NOT_CODE_RE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\[^\n][^'\n]{0,8}|[^'\\\n])'", re.S)
_INCLUDE_LINE_RE = re.compile(r"^[ \t]*#[ \t]*include[^\n]*$|__has_include\s*\([^)\n]*\)", re.M)
_DIRECTIVE_WORD_RE = re.compile(r"^([ \t]*#[ \t]*)[A-Za-z_]+", re.M)
_DIRECTIVE_LINE_RE = re.compile(r"^[ \t]*#[^\n]*$", re.M)
_DEFINE_RE = re.compile(r"^#define ([A-Za-z_][A-Za-z0-9_]*)(.*)$|^#undef ([A-Za-z_][A-Za-z0-9_]*)", re.M)
_STRING_RE = re.compile(r"\"(?:\\.|[^\"\\\n])*\"")
# a variable the source declares: a name after a type (or * & > ]) and before = ; , ) [ { or :
_VARIABLE_RE = re.compile(r"(?:\b([A-Za-z_][A-Za-z0-9_]*)|[*&>])\s*[*&]*\s*\b([A-Za-z_][A-Za-z0-9_]*)\s*(?=[=;,)\[{])")
_NOT_A_TYPE = frozenset(
    "return case goto throw else delete new sizeof co_return co_yield co_await typedef using namespace operator "
    "and or not xor bitand bitor compl if while for switch do".split()
)
# the C++ compiler's own words (GNU keywords), which a header can change only as macros: a header that uses one is
# all the C++ compiler's probe may show of it, not a name of the header's own
_COMPILER_WORDS = frozenset(
    "__restrict__ __restrict __attribute__ __attribute __extension__ __typeof__ __typeof __inline__ __inline __asm__ "
    "__asm __volatile__ __const__ __signed__ __alignof__ __builtin_expect __builtin_unreachable".split()
)
# pybind11's points of customisation, whose specialisations change what a binding converts and how
_CONVERSION_HOOKS = frozenset(
    "type_caster polymorphic_type_hook holder_helper is_holder_type is_copy_constructible is_move_constructible "
    "move_always move_if_unreferenced".split()
)
_PYTHON_RE = re.compile(r"^(py|pybind11|PYBIND11_\w*|Py\w*|_Py\w*|THP\w*)$")


def lighter(source: str) -> str | None:
    """``source`` with each line that includes a heavy header replaced by ``#include <torch/types.h>``; None where
    no line does, or where the edit could reach into a literal (a raw string, or a line continued from the one
    before)."""
    matches = list(_HEAVY_LINE_RE.finditer(source))
    if not matches or RAW_STRING_RE.search(source):
        return None
    if any(source[: m.start()].rstrip("\n").endswith("\\") for m in matches if m.start() > 0):
        return None
    return _HEAVY_LINE_RE.sub(f"#include <{LIGHT_HEADER}>", source)


def lighter_binding(source: str) -> str | None:
    """A binding file's lighter copy: :data:`BINDING_HEAD`, then :func:`lighter`'s copy of ``source``; None where
    there is none, or where ``source`` does not begin with ``torch/extension.h`` (what it holds before the include
    could change what the binding headers mean, which the copy includes first)."""
    if not source.startswith(EXTENSION_LINE):
        return None
    light = lighter(source)
    return None if light is None else BINDING_HEAD + light


def code_of(source: str) -> str:
    """``source`` without its comments, string and character literals, header names and directive keywords: the
    text whose names the compiler looks up."""
    code = NOT_CODE_RE.sub(" ", source)
    code = _INCLUDE_LINE_RE.sub(" ", code)
    return _DIRECTIVE_WORD_RE.sub(r"\1", code)


def declared_variables(code: str) -> set[str]:
    """Names ``code`` declares as local variables, parameters or members (``float acc = 0``,
    ``__shared__ float s[32];``, ``int n)``): a name after a type-like word and before ``= ; , ) [ {``, inside braces
    or parentheses. A name at namespace scope is left out: it could clash with one of the heavy headers, and a clash
    is an error of the source as written that the lighter copy would not show."""
    names = set()
    braces = parens = position = 0
    for match in _VARIABLE_RE.finditer(code):
        between = code[position : match.start()]
        braces += between.count("{") - between.count("}")
        parens += between.count("(") - between.count(")")
        position = match.start()
        before, name = match.group(1), match.group(2)
        if (braces <= 0 and parens <= 0) or (before is not None and before in _NOT_A_TYPE):
            continue
        names.add(name)
    return names


@dataclasses.dataclass(frozen=True)
class HeavyOnly:
    """What the heavy headers add to the light ones, as a source sees it.

    ``macros``: macros whose definition after the heavy headers differs from that after the light ones (new,
    redefined or undefined). ``names``: identifiers in the heavy headers' code that the light headers' text never
    mentions. ``python_kept``: the light headers hold Python's and pybind11's API and the heavy ones add no pybind11
    type caster, so a source may name them (a binding file's probe, :data:`BINDING_PROBE`).
    """

    macros: frozenset[str]
    names: frozenset[str]
    python_kept: bool = False

    def blocks(self, source: str) -> str | None:
        """Why ``source`` must be compiled as written rather than against the light header (a line for the log),
        or None where the lighter copy means the same."""
        code = code_of(source)
        used = set(IDENTIFIER_RE.findall(code))
        if hit := sorted(used & self.macros):
            return f"it names {hit[0]!r}, a macro of the heavy headers"
        if not self.python_kept and (hit := sorted(n for n in used if _PYTHON_RE.match(n))):
            return f"it names {hit[0]!r}, of the Python bindings"
        if hit := sorted((used - declared_variables(code) - _COMPILER_WORDS) & self.names):
            return f"it uses {hit[0]!r}, which only the heavy headers declare"
        return None


def heavy_only(preprocessed: str, probe: Probe = PROBE, name: str = PROBE_NAME) -> HeavyOnly:
    """The heavy headers' additions, from the preprocessor's output (with ``-dD``: macro definitions kept) of
    ``probe`` written as the file ``name``, whose heavy include's line starts the heavy part."""
    line = probe.heavy_line
    marker = re.search(rf'^# {line} "[^"\n]*{re.escape(name)}"', preprocessed, re.M)
    if marker is None:
        raise ValueError(f"no line marker of {name}'s line {line} in the preprocessed probe")
    light, heavy = preprocessed[: marker.start()], preprocessed[marker.start() :]
    before = _macros(light, {})
    after = _macros(heavy, dict(before))
    changed = frozenset(n for n in set(before) | set(after) if before.get(n) != after.get(n))
    light_names = set(IDENTIFIER_RE.findall(_STRING_RE.sub(" ", light)))
    heavy_code = _DIRECTIVE_LINE_RE.sub(" ", _STRING_RE.sub(" ", heavy))
    heavy_names = set(IDENTIFIER_RE.findall(heavy_code))
    return HeavyOnly(
        macros=changed,
        names=frozenset(heavy_names - light_names),
        python_kept=probe.bindings and not heavy_names & _CONVERSION_HOOKS,
    )


def _macros(text: str, state: dict[str, str]) -> dict[str, str]:
    """``state`` updated by the ``#define``/``#undef`` lines of ``text`` (name -> definition)."""
    for match in _DEFINE_RE.finditer(text):
        if match.group(1) is not None:
            state[match.group(1)] = match.group(2).strip()
        else:
            state.pop(match.group(3), None)
    return state
