"""A single-file solution's CUDA source split into a device file without torch and a host file for the C++ compiler.

KernelBench's ``cuda.cu`` holds the kernels and their torch wrappers in one file, so nvcc parses torch's headers on
every kernel edit (three times: its device pass, its host front end and the host compiler): tens of seconds, where
the workspace layout, whose kernels include no torch header, compiles an edit in one or two. This module cuts such
a file in two translation units that together mean what the file means:

* the *device* unit (compiled by nvcc with the file's own flags): the file's directives, types and constants, its
  kernels and device functions, torch's includes left out; after each kernel, a launcher
  (``cudagym_launch_<tag>_<kernel>``) that launches it with a given grid, block, dynamic shared memory and stream;
* the *host* unit (compiled by the C++ compiler against a precompiled header of its includes): the same directives,
  types and constants, the host functions, each ``kernel<<<grid, block[, shared[, stream]]>>>(args)`` replaced by the
  call of its launcher, and the launcher's declaration where the kernel was.

A template kernel's launcher is a template with the kernel's template parameters (a launch's template arguments,
given or deduced, become the call's); which of its instances the host unit uses is known once that unit is compiled:
:func:`instances` reads them from the host object's undefined symbols, and the device unit ends with their explicit
uses (``cudagym.inline_build`` compiles the host unit first for such a file).

Both units keep every line where it was (``__LINE__`` and diagnostics hold). A launch passes its arguments to the
kernel's parameters as a call to a function with those parameters does, so the launcher changes no conversion. The
launchers are hidden symbols of the extension (no other library can interpose them).

A source is split only where that cannot change what it means, else :func:`split` says why not and the file is
compiled whole (``cudagym.inline_build``, which also compiles it whole where a split unit fails to compile): it names
``__CUDACC__``, ``__NVCC__`` or ``__CUDA_ARCH__`` (the host unit is not compiled by nvcc); a kernel is overloaded,
an explicit specialisation or a template of a parameter pack or of a template, or has parameters the launcher cannot
forward (unnamed, arrays, defaults, packs, ``__grid_constant__``); a template kernel's instance names torch's types
(the device unit cannot name them) or a type the device unit cannot spell; a kernel or device symbol is named in
host code other than by a launch (its address, ``cudaMemcpyToSymbol``); a launch names a kernel the file does not
define, or gives a plain kernel template arguments; host code holds device code (a ``__device__`` lambda); device
code names torch's API (its headers are not in the device unit); a macro launches a kernel; a launch's configuration
or arguments change a variable (a launch evaluates its configuration first, a call its arguments in no set order); a
namespace or ``extern "C"`` block, a raw string, or a line continued outside a directive or a comment, carriage
returns.

What is left unguarded: a name the device code uses that torch's headers would have given another meaning (an overload
they add where the device code looks); the device unit sees the CUDA headers nvcc includes (``<cmath>`` with them),
so the usual math functions resolve alike.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from cudagym.errors import CudaGymError
from cudagym.light_headers import IDENTIFIER_RE, NOT_CODE_RE, RAW_STRING_RE

LAUNCHER_PREFIX = "cudagym_launch_"
MAX_CHARS = 1_000_000  # a longer source is compiled whole (the split reads it character by character, in Python)
HIDDEN = '__attribute__((visibility("hidden")))'
DEVICE_WORDS = frozenset({"__global__", "__device__", "__constant__", "__managed__", "__shared__"})
# headers whose declarations only the host unit gets
TORCH_INCLUDE_RE = re.compile(r"^\s*#\s*include\s*[<\"](torch/|ATen/|c10/|caffe2/|pybind11/|THC/|Python\.h)")
_TORCH_NAMES = frozenset({"torch", "at", "c10", "caffe2", "py", "pybind11"})
_TORCH_PREFIX_RE = re.compile(r"^(TORCH_|AT_|C10_|PYBIND11_|Py|THP)")
_COMPILER_MACRO_RE = re.compile(r"\b(__CUDACC\w*|__NVCC__|__CUDA_ARCH\w*)\b")
_CONTINUED_COMMENT_RE = re.compile(r"//[^\n]*\\\n")
_DIRECTIVE_AHEAD_RE = re.compile(r"[ \t]*#")
_SIDE_EFFECT_RE = re.compile(r"\+\+|--|<<=|>>=|(?<![=!<>])=(?!=)")  # ++, --, =, += and the like; not ==, !=, <=, >=
_LAUNCH_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)?(\s*(?:<[^<>;{}]*>)?\s*)<<<")
_TEMPLATE_RE = re.compile(r"\s*(template)\s*<")
_AGGREGATE = frozenset({"struct", "class", "union", "enum", "typedef"})
# a function with one of these may be defined in both units (no symbol of its own, or one per unit)
_ONE_DEFINITION = frozenset({"inline", "__inline__", "__forceinline__", "static", "constexpr", "template"})
_TYPE_WORDS = frozenset(
    "void bool char short int long float double signed unsigned const volatile auto size_t __restrict__".split()
)


@dataclasses.dataclass(frozen=True)
class Split:
    """The two translation units of a source (the same number of lines as it) and the kernels whose launches the
    host unit calls through a launcher."""

    device: str
    host: str
    kernels: tuple[str, ...]
    templates: tuple[str, ...] = ()  # the template kernels (the device unit needs the host unit's instances of them)


@dataclasses.dataclass
class _Item:
    """A top-level piece of the source: a directive line, or a declaration or definition (``start``:``end``)."""

    start: int
    end: int
    directive: bool
    role: str = ""  # "both", "host", "device", "kernel" (a definition) or "kernel_decl" (a declaration)
    name: str = ""  # a kernel's or a device symbol's name
    params: str = ""  # a kernel's parameters (one line)
    template: str = ""  # a template kernel's template head (one line), "" for a plain kernel
    template_args: str = ""  # the names of its template parameters, as the launcher passes them on ("T, BLOCK")


class Refused(CudaGymError, ValueError):
    """Why a source is compiled whole (a line for the log)."""


def mask(source: str) -> str:
    """``source`` with its comments and string and character literals blanked (newlines kept): the same length, so
    an offset into the mask is one into the source."""
    return NOT_CODE_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)


def split(source: str, tag: str) -> Split:
    """The device and host units of ``source``; ``tag`` (letters and digits) makes its launchers' names its own.
    Raises :class:`Refused` where a split could mean something else or cannot be made."""
    if len(source) > MAX_CHARS:
        raise Refused(f"it is longer than {MAX_CHARS} characters")
    if RAW_STRING_RE.search(source):
        raise Refused("it holds a raw string literal")
    if _CONTINUED_COMMENT_RE.search(source):  # the comment goes on over the next line, which the split reads as code
        raise Refused("a // comment continued on the next line")
    if "\r" in source:  # a line continued by "\" before "\r\n" would read as ended here, not to the preprocessor
        raise Refused("it has carriage returns")
    code = mask(source)
    if hit := _COMPILER_MACRO_RE.search(code):
        raise Refused(f"it names {hit.group(1)}, which the C++ compiler of the host part does not define")
    if LAUNCHER_PREFIX in code:
        raise Refused(f"it names {LAUNCHER_PREFIX}*, the launchers' names")
    items = _items(code)
    for item in items:
        _classify(item, code)
    kernels = _kernels(items)
    if not kernels:
        raise Refused("it defines no kernel")
    _check_host_uses(items, code, kernels)
    device, host = [], []
    position = 0
    for item in items:
        gap = source[position : item.start]
        device.append(gap)
        host.append(gap)
        text = source[item.start : item.end]
        blank = "\n" * text.count("\n")
        position = item.end
        if item.directive:
            device.append(blank if TORCH_INCLUDE_RE.match(text) else text)
            host.append(text)
        elif item.role == "both":
            device.append(text)
            host.append(text)
        elif item.role == "host":
            device.append(blank)
            host.append(_rewrite_launches(source, code, item, kernels, tag))
        elif item.role == "device":
            device.append(text)
            host.append(blank)
        else:  # a kernel: its launcher declared where it was in the host unit, defined after it in the device unit
            head = f"{item.template} " if item.template else ""
            launcher = _launcher(tag, item.name)
            declaration = f"{head}{HIDDEN} void {launcher}(dim3, dim3, size_t, cudaStream_t{_tail(item)});"
            host.append(declaration + blank)
            device.append(text + (_definition(item, tag) if item.role == "kernel" else ""))
    device.append(source[position:])
    host.append(source[position:])
    templates = tuple(sorted(name for name, item in kernels.items() if item.template))
    return Split(device="".join(device), host="".join(host), kernels=tuple(sorted(kernels)), templates=templates)


def _items(code: str) -> list[_Item]:
    """The top-level items of ``code`` (masked) in order."""
    items: list[_Item] = []
    i, n = 0, len(code)
    while i < n:
        if code[i].isspace():
            i += 1
            continue
        line_start = code.rfind("\n", 0, i) + 1
        if code[i] == "#" and not code[line_start:i].strip():
            end = i
            while True:
                end = code.find("\n", end)
                if end < 0:
                    end = n
                    break
                if code[end - 1] != "\\":
                    break
                end += 1
            items.append(_Item(i, end, directive=True))
            i = end
            continue
        items.append(_Item(i, _item_end(code, i), directive=False))
        i = items[-1].end
    return items


def _item_end(code: str, start: int) -> int:
    """Where the declaration or definition beginning at ``start`` ends (after its ``;`` or its body's ``}``)."""
    depth, i, n = 0, start, len(code)
    body = -1
    while i < n:
        c = code[i]
        if c == "\n" and depth == 0:
            if _DIRECTIVE_AHEAD_RE.match(code, i + 1):
                raise Refused("a directive inside a declaration")
        elif c == "\\" and code[i + 1 : i + 2] == "\n":
            raise Refused("a line continued outside a directive")
        elif c in "([{":
            if c == "{" and depth == 0 and body < 0:
                body = i
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                raise Refused("unbalanced brackets")
            if c == "}" and depth == 0:
                head = set(IDENTIFIER_RE.findall(code[start:body]))
                if not (head & _AGGREGATE or "=" in _after_template_head(code[start:body])):
                    return i + 1  # a function, namespace or linkage block ends with its body
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    raise Refused("a declaration without its end")


def _classify(item: _Item, code: str) -> None:
    """Sets ``item.role`` (and a kernel's or device symbol's name and parameters)."""
    text = code[item.start : item.end]
    if item.directive:
        if "<<<" in text:
            raise Refused("a macro launches a kernel")
        return
    brace = text.find("{")
    initialised = "=" in _after_template_head(text[:brace])  # a variable's initialiser, not a function's body
    head = text if brace < 0 or initialised else text[:brace]
    words = set(IDENTIFIER_RE.findall(head))
    everything = set(IDENTIFIER_RE.findall(text))
    has_body = brace >= 0 and not initialised and not words & _AGGREGATE
    if has_body and "namespace" in words:
        raise Refused("a namespace block")
    if has_body and "extern" in words and "(" not in head:
        raise Refused("an extern block")
    if words & DEVICE_WORDS:
        if _torchy(everything):
            raise Refused("device code names torch's API")
        if "__global__" in words:
            item.role = "kernel" if has_body else "kernel_decl"
            item.name, item.params = _signature(head, named=has_body)
            if "template" in words:
                item.template, item.template_args = _template_head(head, item.name)
        elif "__host__" in words and "__device__" in words:
            if not has_body or not words & _ONE_DEFINITION:
                raise Refused("a host-and-device function that is not inline (both units would define it)")
            item.role = "both"
        else:
            item.role = "device"
            item.name = _declared_name(head)
        return
    if everything & DEVICE_WORDS:
        raise Refused("device code inside host code")
    if has_body:
        item.role = "both" if "constexpr" in words and not _torchy(everything) else "host"
    elif _torchy(everything):
        item.role = "host"
    elif words & (_AGGREGATE | {"using", "template", "static_assert", "const", "constexpr"}) and "extern" not in words:
        item.role = "both"
    else:
        item.role = "host"  # a variable (one definition) or a function's declaration


def _template_head_span(text: str) -> tuple[int, int] | None:
    """Where the template head ``text`` (masked) begins with starts and ends (after its ``>``); None where it begins
    with none or the head does not end."""
    start = _TEMPLATE_RE.match(text)
    end = None if start is None else _angle_end(text, start.end() - 1)
    return None if start is None or end is None else (start.start(1), end)


def _angle_end(text: str, opening: int) -> int | None:
    """Where the ``<...>`` opened at ``opening`` ends (after its ``>``; parentheses nest inside), None where it
    does not."""
    depth = 0
    for i in range(opening, len(text)):
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return None


def _after_template_head(text: str) -> str:
    """``text`` (masked) after the template head it begins with (whose defaults hold ``=``), if any."""
    span = _template_head_span(text)
    return text if span is None else text[span[1] :]


def _torchy(words: set[str]) -> bool:
    return bool(words & _TORCH_NAMES) or any(_TORCH_PREFIX_RE.match(w) for w in words)


def _signature(head: str, *, named: bool) -> tuple[str, str]:
    """A kernel's (name, parameters on one line) from its head (masked); ``named``: its parameters must be named."""
    head = head.rstrip().rstrip(";")
    close = head.rfind(")")
    depth, i = 0, close
    while i >= 0:
        depth += {")": 1, "(": -1}.get(head[i], 0)
        if depth == 0:
            break
        i -= 1
    names = IDENTIFIER_RE.findall(head[:i])
    if i < 0 or not names or head[close + 1 :].strip():
        raise Refused("a kernel whose parameter list cannot be read")
    params = " ".join(head[i + 1 : close].split())
    for param in _top_level_split(params):
        if not param or param == "void":
            continue
        if any(bad in param for bad in ("=", "[", "...", "(", "__grid_constant__")):
            raise Refused(f"kernel {names[-1]} has a parameter its launcher cannot forward: {param!r}")
        if named and (param.endswith(("*", "&")) or IDENTIFIER_RE.findall(param)[-1] in _TYPE_WORDS):
            raise Refused(f"kernel {names[-1]} has an unnamed parameter")
    return names[-1], params


def _template_head(head: str, kernel: str) -> tuple[str, str]:
    """(a template kernel's template head on one line, the names of its parameters) from its head (masked)."""
    span = _template_head_span(head)
    inside = "" if span is None else head[head.index("<", span[0]) + 1 : span[1] - 1]
    if span is None or not inside.strip():
        raise Refused(f"kernel {kernel}: an explicit specialisation or a template head that cannot be read")
    names = []
    for param in _top_level_split(" ".join(inside.split())):
        declared = IDENTIFIER_RE.findall(param.split("=", 1)[0])
        if "..." in param or "template" in declared or len(declared) < 2:
            raise Refused(f"kernel {kernel}: a template parameter its launcher cannot pass on: {param!r}")
        names.append(declared[-1])
    return " ".join(head[span[0] : span[1]].split()), ", ".join(names)


def _declared_name(head: str) -> str:
    """The name a device function or variable declares (before its parameters, ``[``, ``=`` or ``;``)."""
    cut = len(head)
    for mark in ("(", "[", "=", ";"):
        found = head.find(mark)
        if 0 <= found < cut:
            cut = found
    names = IDENTIFIER_RE.findall(head[:cut])
    return names[-1] if names else ""


def _top_level_split(text: str) -> list[str]:
    """``text`` split at its commas outside brackets of any kind (``<>`` included)."""
    parts, depth, last = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[last:i].strip())
            last = i + 1
    parts.append(text[last:].strip())
    return parts


def _kernels(items: list[_Item]) -> dict[str, _Item]:
    """The kernels the source defines, by name (each defined once, never overloaded)."""
    kernels: dict[str, _Item] = {}
    declared: dict[str, str] = {}
    for item in items:
        if item.role == "kernel":
            if item.name in kernels:
                raise Refused(f"kernel {item.name} is defined twice or overloaded")
            kernels[item.name] = item
        elif item.role == "kernel_decl":
            declared[item.name] = item.params
    for name in declared:
        if name not in kernels:
            raise Refused(f"kernel {name} is declared but not defined here")
    return kernels


def _check_host_uses(items: list[_Item], code: str, kernels: dict[str, _Item]) -> None:
    """Refuses host code that names a kernel other than by launching it, or a device function or variable."""
    device_names = {item.name for item in items if item.role == "device" and item.name}
    for item in items:
        if item.directive or item.role not in ("host", "both"):
            continue
        text = code[item.start : item.end]
        launched = {m.start(1) for m in _LAUNCH_RE.finditer(text) if m.group(1)}
        for match in IDENTIFIER_RE.finditer(text):
            name = match.group(0)
            if name in kernels and match.start() not in launched:
                raise Refused(f"host code names kernel {name} other than by launching it")
            if name in device_names:
                raise Refused(f"host code names device symbol {name}")
        for match in _LAUNCH_RE.finditer(text):
            if item.role == "both":
                raise Refused("a launch in code both units compile")
            if match.group(1) not in kernels:
                raise Refused(f"a launch of {match.group(1) or 'an expression'}, which is not a kernel defined here")
            if match.group(2).strip() and not kernels[match.group(1)].template:
                raise Refused(f"a launch of {match.group(1)} with template arguments, which is no template")


def _rewrite_launches(source: str, code: str, item: _Item, kernels: dict[str, _Item], tag: str) -> str:
    """``item``'s source with each ``kernel<<<config>>>(args)`` made ``launcher(config, args)`` (its lines kept)."""
    out, position = [], item.start
    text = code[item.start : item.end]
    for match in _LAUNCH_RE.finditer(text):
        name_at, config_at = item.start + match.start(1), item.start + match.end()
        close = code.find(">>>", config_at)
        if close < 0 or close > item.end:
            raise Refused("a launch without its >>>")
        config = _top_level_split(code[config_at:close])
        if not 2 <= len(config) <= 4 or not all(config):
            raise Refused("a launch whose configuration cannot be read")
        opening = close + 3
        while opening < item.end and code[opening].isspace():
            opening += 1
        if opening >= item.end or code[opening] != "(":
            raise Refused("a launch without its arguments")
        arguments = code[opening + 1 : _closing(code, opening)].strip()
        if _SIDE_EFFECT_RE.search(code[config_at:close]) or _SIDE_EFFECT_RE.search(arguments):
            # a launch evaluates its configuration before its arguments; a call's arguments have no such order
            raise Refused("a launch whose configuration or arguments change a variable")
        defaults = ", 0" * (4 - len(config))
        out.append(source[position:name_at])
        # the launch's template arguments (and its line breaks) are the call's
        template_args = source[item.start + match.start(2) : item.start + match.end(2)]
        out.append(f"{_launcher(tag, match.group(1))}{template_args}(")
        out.append(source[config_at:close])
        out.append(defaults + (", " if arguments else "") + "\n" * source[close:opening].count("\n"))
        position = opening + 1
    out.append(source[position : item.end])
    return "".join(out)


def _closing(code: str, opening: int) -> int:
    """The offset of the parenthesis that closes the one at ``opening``."""
    depth = 0
    for i in range(opening, len(code)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return i
    raise Refused("a launch whose arguments do not end")


def _launcher(tag: str, kernel: str) -> str:
    return f"{LAUNCHER_PREFIX}{tag}_{kernel}"


def _tail(item: _Item) -> str:
    """The kernel's parameters after the launch configuration's (", float* x, int n"), or ""."""
    params = item.params.strip()
    return "" if params in ("", "void") else f", {params}"


def _definition(item: _Item, tag: str) -> str:
    """The launcher of a kernel, on the line where the kernel's definition ends."""
    names = [IDENTIFIER_RE.findall(p)[-1] for p in _top_level_split(item.params) if p and p != "void"]
    head, args = (f" {item.template}", f"<{item.template_args}>") if item.template else ("", "")
    return (
        f"{head} {HIDDEN} void {_launcher(tag, item.name)}(dim3 cudagym_grid, dim3 cudagym_block,"
        f" size_t cudagym_shared, cudaStream_t cudagym_stream{_tail(item)}) {{ {item.name}{args}<<<cudagym_grid,"
        f" cudagym_block, cudagym_shared, cudagym_stream>>>({', '.join(names)}); }}"
    )


# a launcher's definition as the device unit's line holds it, after its kernel's closing brace
LAUNCHER_DEFINITION_RE = re.compile(
    rf" (template <[^\n]*?> )?{re.escape(HIDDEN)} void {LAUNCHER_PREFIX}\w+\(.*?>>>\([^\n]*?\); \}}"
)
# an instance of a template launcher the host object leaves undefined, as ``nm -C`` writes it: its template arguments
_INSTANCE_RE = re.compile(rf"\b({LAUNCHER_PREFIX}[A-Za-z0-9_]+)<")
# template arguments the device unit can spell (types and constants of its own or the language's); torch's are not
_SPELLABLE_RE = re.compile(r"^[A-Za-z0-9_ :*&,<>()\-+.]+$")
_UNSPELLABLE_RE = re.compile(r"\b(c10|at|torch|caffe2|pybind11|anonymous|lambda|unnamed)\b|\bstd::(__|_[A-Z])")
# torch's scalar types (as AT_DISPATCH_..._AND_HALF/BFLOAT16 instantiate kernels with them) and the light headers that
# define them: a device unit whose instances name one includes its header first, not torch/extension.h
SCALAR_HEADERS = {"c10::Half": "c10/util/Half.h", "c10::BFloat16": "c10/util/BFloat16.h"}
_SCALAR_RE = re.compile(r"\bc10::(?:Half|BFloat16)\b")


@dataclasses.dataclass(frozen=True)
class Instances:
    """What a device unit with template kernels needs for the host unit's instances of them: ``text`` ends it
    (explicit uses that make its object define them; "" where there are none), ``headers`` it includes first (the
    light headers of torch's scalar types that the instances name, ``SCALAR_HEADERS``)."""

    text: str = ""
    headers: tuple[str, ...] = ()


def instances(symbols: Iterable[str], tag: str, templates: Iterable[str]) -> Instances:
    """The instances of a device unit's template kernels' launchers that ``symbols`` (the host object's undefined
    symbols, demangled) name (:class:`Instances`). Raises :class:`Refused` where an instance's arguments cannot be
    spelt in the device unit (a type of torch's other than its scalar types, an anonymous one)."""
    launchers = {_launcher(tag, name) for name in templates}
    uses, headers = [], set()
    for symbol in symbols:
        for match in _INSTANCE_RE.finditer(symbol):
            if match.group(1) not in launchers:
                continue
            end = _angle_end(symbol, match.end() - 1)
            arguments = symbol[match.end() : end - 1] if end is not None else symbol[match.end() :]
            scalars = _SCALAR_RE.findall(arguments)
            rest = _SCALAR_RE.sub("", arguments)
            if end is None or not _SPELLABLE_RE.match(arguments) or _UNSPELLABLE_RE.search(rest):
                raise Refused(f"{match.group(1)} is used with template arguments <{arguments}>")
            headers.update(SCALAR_HEADERS[name] for name in scalars)
            uses.append(f"reinterpret_cast<void (*)()>(&{match.group(1)}<{arguments}>)")
    if not uses:
        return Instances()
    listed = ", ".join(sorted(set(uses)))
    text = f"\n__attribute__((used)) static void (*const cudagym_instances_{tag}[])() = {{{listed}}};\n"
    return Instances(text, tuple(sorted(headers)))


_ANGLE_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<[^<>\n]+>[ \t]*$")


def leading_includes(host: str) -> str:
    """The ``#include <...>`` lines a host unit begins with (blank lines between them skipped), up to its first other
    line, where one of them is torch's: the text of the precompiled header the unit is compiled against (each header
    it names guards itself, so the unit including them again changes nothing); "" where torch's is not among them."""
    lines = []
    for line in host.splitlines():
        if not line.strip():
            continue
        if not _ANGLE_INCLUDE_RE.match(line):
            break
        lines.append(line.strip())
    if not any(TORCH_INCLUDE_RE.match(line) for line in lines):
        return ""
    return "".join(f"{line}\n" for line in lines)
