"""Static checks on C++/CUDA sources: token rules over what the compiler would see.

Every source of a solution is preprocessed first (:mod:`cudagym.integrity.cpp_tokens` and
:mod:`cudagym.integrity.cpp_preprocess`: trigraphs and line splices, comments dropped, the macros of all
the sources expanded, ``_Pragma`` as a directive, adjacent string literals joined) and read for its
declarations (:mod:`cudagym.integrity.cpp_scope`: namespace aliases, using-declarations, the solution's
own types, the declared type of each variable). The rules here see identifiers, qualified names with
their aliases resolved, member calls with what is known of the receiver, and directives;
:mod:`cudagym.integrity.cpp_literals` judges literal data, asm statements and attributes. They cannot know
every type, so tensor arithmetic through C++ operators (``a + b`` on ``at::Tensor``) is left to the
run-time recording of ATen ops; what they cannot expand or read (a malformed macro, an asm text that is
not a literal) is refused.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath

from cudagym.integrity import vocabulary as V
from cudagym.integrity.cpp_literals import ASM_KEYWORDS, LiteralChecks
from cudagym.integrity.cpp_preprocess import CppSource, prepare
from cudagym.integrity.cpp_scope import Scope, is_definition
from cudagym.integrity.cpp_tokens import Token, chain_after, closing, lex
from cudagym.integrity.policy import IntegrityPolicy, Violation

__all__ = ["CppSource", "check_cpp", "check_cpp_sources", "escapes", "lex", "vendor_allowed"]


def escapes(base: PurePosixPath, target: str) -> bool:
    """Whether ``target`` (relative to ``base`` inside the workspace) leaves the workspace."""
    if target.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", target):
        return True
    depth = 0
    for part in (*base.parts, *re.split(r"[/\\]", target)):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _normalized(base: PurePosixPath, target: str) -> str:
    parts: list[str] = []
    for part in (*base.parts, *target.split("/")):
        if part == "..":
            parts.pop() if parts else None
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


_CUDA_API_RE = re.compile(
    r"^cu(da)?(Event[A-Za-z]*|DeviceSynchronize|StreamSynchronize|StreamWaitEvent|StreamQuery|CtxSynchronize"
    r"|LaunchKernel[A-Za-z]*|Memcpy[A-Za-z0-9]*|Memset[A-Za-z0-9]*|Malloc[A-Za-z]*|Free[A-Za-z]*|MemAlloc[A-Za-z]*"
    r"|MemFree[A-Za-z]*|GetLastError|PeekAtLastError|GraphLaunch|ProfilerStart|ProfilerStop)(_v\d)?$"
)
"""Runtime and driver functions whose timing, synchronisation, launch or memory behaviour a definition
of the same name would replace."""
_BLAS_RE = re.compile(V.BLAS_RE, re.I)
_VML_RE = re.compile(V.VML_RE)
_PYTHON_API_RE = re.compile(V.PYTHON_API_RE)
_VENDOR_HEADERS = (("cublas", "cuBLAS", "allow_cublas"), ("cblas", "CBLAS", "allow_cublas"),
                   ("cudnn", "cuDNN", "allow_cudnn"), ("cufft", "cuFFT", ""), ("cusparse", "cuSPARSE", ""),
                   ("cusolver", "cuSOLVER", ""), ("curand", "cuRAND", ""), ("cutensor", "cuTENSOR", ""),
                   ("nccl", "NCCL", ""), ("mkl", "MKL", ""), ("dnnl", "oneDNN", ""), ("oneapi/dnnl", "oneDNN", ""),
                   ("openblas", "OpenBLAS", ""), ("lapack", "LAPACK", ""), ("eigen", "Eigen", ""),
                   ("blis", "BLIS", ""), ("f77blas", "BLAS", "allow_cublas"))  # fmt: skip
_WATCHED = (V.CPP_CONCURRENCY | V.CPP_INTERPOSED | V.CPP_STREAM_CREATION | V.CPP_LOADERS | V.CPP_TAMPERING
            | V.CPP_SIGNALS | V.CPP_SYSCALLS | V.CPP_INTROSPECTION)  # fmt: skip
_WATCHED_PREFIXES = ("cu", "Py", "_Py", "THP", "TORCH_", "REGISTER_", "ALSO_", "C10_", "PYBIND11_", V.AOTI_PREFIX,
                     *V.CPP_GRAPH_PREFIXES, *V.CPP_LOADER_PREFIXES, *V.CPP_TAMPERING_PREFIXES, *V.CPP_SYSCALL_PREFIXES,
                     *(prefix for prefix, _, _ in V.VENDOR_LIBRARIES))  # fmt: skip
"""Identifiers worth a closer look besides BLAS names; every other one (``x``, ``float``) is skipped quickly."""
_THRUST_OK = frozenset({"raw_pointer_cast", "device_pointer_cast", "make_pair", "make_tuple", "get", "tie"})


def vendor_allowed(identifier: str, library: str, field: str, policy: IntegrityPolicy) -> bool:
    """Whether ``identifier`` of a vendor library may be used: cuBLAS (or BLAS) for GEMM, cuDNN for convolution."""
    if policy.allows(identifier):
        return True
    if not field or not getattr(policy, field):
        return False
    if identifier.endswith("_t") or identifier.isupper() or identifier.startswith(("CUBLAS_", "CUDNN_")):
        return "gemm" in identifier.lower() or library not in ("BLAS",)  # types and enum constants
    if library in ("cuBLAS", "cuBLASLt", "CBLAS", "BLAS"):
        lowered = identifier.lower()
        return library == "cuBLASLt" or identifier in V.CUBLAS_SUPPORT or "gemm" in lowered or "matmul" in lowered
    return any(word in identifier for word in V.CUDNN_SUPPORT_WORDS)


class _CppChecker:
    """Walks one preprocessed source's tokens and collects violations."""

    def __init__(self, source: CppSource, policy: IntegrityPolicy, known_files: frozenset[str], scope: Scope) -> None:
        self.path = source.path
        self.policy = policy
        self.offset = source.line_offset
        self.known = known_files
        self.scope = scope
        self.found: list[Violation] = []
        self.literals = LiteralChecks(self.flag, self.symbol)

    def flag(self, rule: str, token: Token, what: str) -> None:
        if self.policy.enabled(rule):
            via = f" (through macro {token.via})" if token.via else ""
            self.found.append(Violation(rule, self.path, token.line + self.offset, what + via))

    def run(self, tokens: Sequence[Token]) -> list[Violation]:
        scanned = -1  # the end of the last initializer read (its nested braces are not read again)
        for i, tok in enumerate(tokens):
            if tok.kind == "hash":
                self.directive(tokens, i)
            elif tok.kind == "id":
                self.identifier(tokens, i)
            elif tok.kind == "str":
                self.literals.literal(tok)
            elif tok.kind == "punct" and tok.text == "{" and i > scanned:
                scanned = self.literals.initializer(tokens, i)
        return self.found

    # -- directives --------------------------------------------------------------------------------

    def directive(self, tokens: Sequence[Token], i: int) -> None:
        name = tokens[i + 1].text if i + 1 < len(tokens) and tokens[i + 1].kind == "id" else ""
        rest = []
        for tok in tokens[i + 2 :]:
            if tok.kind == "eol":
                break
            rest.append(tok)
        if name == "embed":
            self.flag("binary_loading", tokens[i], "#embed pulls a binary file into the source")
        if name == "pragma" and {"omp", "num_threads"} <= {t.text for t in rest}:
            self.flag("concurrency", tokens[i], "an OpenMP num_threads clause (the harness sets the thread count)")
        if name in ("include", "include_next", "import"):
            header = rest[0] if rest and rest[0].kind == "header" else None
            if header is None:
                self.flag("outside_workspace", tokens[i], f"a computed #{name} (name the header literally)")
            else:
                self.include(tokens[i], header.text)

    def include(self, at: Token, header: str) -> None:
        target, quoted = header[1:-1].strip(), header.startswith('"')
        here = PurePosixPath(self.path).parent
        bases = [here, PurePosixPath("."), PurePosixPath("kernels")] if quoted else [PurePosixPath(".")]
        if quoted and _normalized(here, target) in self.known and not escapes(here, target):
            bases = [here]  # found next to the including file: the compiler looks no further
        if any(escapes(base, target) for base in bases):
            self.flag("outside_workspace", at, f"#include {header} reaches outside the workspace")
        for prefix, library, field in _VENDOR_HEADERS:
            if PurePosixPath(target).name.lower().startswith(prefix) or target.lower().startswith(prefix + "/"):
                if not (field and getattr(self.policy, field)) and not self.policy.allows(target):
                    self.flag("vendor_libraries", at, f"#include {header} ({library} is not allowed here)")
                break

    # -- identifiers -------------------------------------------------------------------------------

    def identifier(self, tokens: Sequence[Token], i: int) -> None:
        tok, word = tokens[i], tokens[i].text
        prev = tokens[i - 1].text if i > 0 else ""
        if prev in (".", "->") or (word == "template" and prev in (".", "->", "::")):
            if word != "template":
                self.member(tokens, i)
            return
        if self.policy.deny and self.policy.denies(word):
            self.flag("denied_name", tok, f"{word} is on the policy's deny list")
        global_scope = prev == "::" and (i < 2 or tokens[i - 2].kind != "id")  # ::name, not ns::name
        if prev == "::" and not global_scope:
            return  # judged with its chain
        nxt = tokens[i + 1].text if i + 1 < len(tokens) else ""
        if nxt == "::" and i + 2 < len(tokens) and tokens[i + 2].kind == "id":
            self.chain(tokens, i)
        elif word in ASM_KEYWORDS:
            self.literals.asm(tokens, i)
        elif word in ("__attribute__", "__attribute"):
            self.literals.attribute(tokens, i)
        else:
            self.bare(tokens, i)

    def bare(self, tokens: Sequence[Token], i: int) -> None:
        """An unqualified name: what a using-declaration or using-directive makes of it, then the rules
        on its own spelling."""
        tok, word = tokens[i], tokens[i].text
        called = self.is_call(tokens, i + 1)
        scope = self.scope
        if word in scope.using and not scope.defined(word):
            self.judge(scope.resolve((word,)), tokens, i, called=called, value=not called)
        elif scope.imported and not scope.defined(word) and word not in scope.variables:
            taken = called or (i > 0 and tokens[i - 1].text == "&")
            for namespace in self.imported():
                if self.bare_forbidden(namespace[0], word, taken):
                    self.judge((*namespace, word), tokens, i, called=called, value=not called)
                    break
        self.watched(tok, word, called=called, defines=called and is_definition(tokens, i))
        if called and not scope.defined(word) and tokens[i + 1].text == "(":
            self.pasted(tokens, i)

    def pasted(self, tokens: Sequence[Token], i: int) -> None:
        """A call of something the sources do not define (a toolkit macro such as ``C10_CONCATENATE``, whose
        definition the checks do not have): arguments it could paste together are judged as the name they
        would make (``C10_CONCATENATE(dl, sym)`` is ``dlsym``)."""
        end = closing(tokens, i + 1)
        args: list[list[Token]] = [[]]
        depth = 0
        for tok in tokens[i + 2 : end]:
            depth += {"(": 1, ")": -1, "[": 1, "]": -1, "{": 1, "}": -1}.get(tok.text, 0)
            if tok.text == "," and depth == 0:
                args.append([])
            else:
                args[-1].append(tok)
        single = [a[0] if len(a) == 1 and a[0].kind in ("id", "num") else None for a in args]
        for start in range(len(single)):
            for stop in range(start + 2, min(len(single), start + 4) + 1):
                pieces = single[start:stop]
                if any(p is None for p in pieces):
                    break
                name = "".join(p.text for p in pieces if p is not None)
                if not name[:1].isalpha() and name[:1] != "_":
                    continue
                site = dataclasses.replace(tokens[i], via=f"{tokens[i].text}, pasting its arguments")
                followed = end + 1 < len(tokens) and tokens[end + 1].text == "::"
                if name in (*V.ATEN_NAMESPACES, "pybind11", "py") and followed:
                    what = f"{tokens[i].text}(...) could paste its arguments into {name}::...; the checks cannot"
                    self.flag("checkable", tokens[i], what + " expand a macro defined outside the workspace")
                self.watched(site, name, called=True, defines=False)

    def imported(self) -> list[tuple[str, ...]]:
        return [self.scope.resolve(n) for n in sorted(self.scope.imported)]

    @staticmethod
    def bare_forbidden(head: str, word: str, taken: bool) -> bool:
        """Whether ``word``, unqualified under ``using namespace <head>``, names something a rule refuses."""
        if head in V.ATEN_NAMESPACES:
            compute = word in V.ATEN_BARE_COMPUTE or (word in V.CPP_TENSOR_COMPUTE_METHODS - V.C_MATH_NAMES)
            return (taken and compute) or word in V.ATEN_PATCHING_NAMES or word in V.ATEN_FORBIDDEN_NAMESPACES
        if head == "pybind11":
            return word in V.PYBIND_BARE
        return head == "std" and word in V.CPP_STD_CONCURRENCY

    def chain(self, tokens: Sequence[Token], i: int) -> None:
        """A qualified name ``a::b::c`` starting at ``i``: aliases resolved, then judged by its head."""
        names, end = chain_after(tokens, i)
        parts = self.scope.resolve(tuple(names))
        if parts[0] not in (*V.ATEN_NAMESPACES, "pybind11") and not self.scope.defined(parts[0]):
            for namespace in self.imported():
                if self.bare_forbidden(namespace[0], parts[0], True) or parts[0] in ("cuda", "vec"):
                    parts = (*namespace, *parts)
                    break
        called = self.is_call(tokens, end)
        before = tokens[i - 1].text if i > 0 else ""
        if before == "::" and i > 1:
            before = tokens[i - 2].text
        namespace_only = before == "namespace" or (before == "=" and i > 2 and tokens[i - 3].text == "namespace")
        self.judge(parts, tokens, i, called=called, value=not called and not namespace_only)
        for k, part in enumerate(names):
            self.watched(tokens[i], part, called=called and k == len(names) - 1, defines=False)

    def judge(self, parts: tuple[str, ...], tokens: Sequence[Token], i: int, *, called: bool, value: bool) -> None:
        """Rules on a resolved qualified name, by its head."""
        tok, text, head = tokens[i], "::".join(parts), parts[0]
        if head in V.ATEN_NAMESPACES and len(parts) > 1:
            self.aten(parts, tok, called=called, value=value)
        elif head == "pybind11" and len(parts) > 1:
            self.pybind(parts, tok)
        elif head == "std" and len(parts) == 2 and parts[1] in V.CPP_STD_CONCURRENCY and not self.policy.allows(text):
            self.flag("concurrency", tok, f"uses {text} (threads and processes belong to the harness)")
        elif head == "thrust" and called and parts[-1] not in _THRUST_OK and not self.policy.allows(text, "thrust"):
            self.flag("vendor_libraries", tok, f"calls {text} (a Thrust library algorithm, not your kernel)")
        elif head == "cub" and len(parts) > 1 and parts[1].startswith("Device"):
            if not self.policy.allows(text, "cub::Device"):
                what = f"uses {text} (a device-wide CUB algorithm; block-level CUB is fine)"
                self.flag("vendor_libraries", tok, what)
        elif head in ("gnu", "__gnu__") and len(parts) == 2:
            self.literals.attribute_name(tokens, i + 2, parts[1])

    def aten(self, parts: tuple[str, ...], tok: Token, *, called: bool, value: bool) -> None:
        """``at::``/``torch::``/``c10::`` names: allocation, options, metadata and stream queries only."""
        text, head = "::".join(parts), parts[0]
        for part in parts[1:]:
            if part in V.ATEN_PATCHING_NAMES and not self.policy.allows(text):
                what = f"uses {text} (it changes dispatch, profiling, allocation or torch's global state"
                self.flag("patching", tok, what + ", which the harness relies on)")
                return
            if part in V.ATEN_CONCURRENCY_NAMES and not self.policy.allows(text):
                self.flag("concurrency", tok, f"uses {text} (ATen's thread pools belong to the harness)")
                return
            if part in V.ATEN_LOADER_NAMES and head == "torch" and not self.policy.allows(text):
                self.flag("binary_loading", tok, f"uses {text} (loads serialized code or data)")
                return
            if part in V.ATEN_PYTHON_NAMES and not self.policy.allows(text):
                self.flag("introspection", tok, f"uses {text} (reaches the Python interpreter)")
                return
            if part in V.ATEN_FORBIDDEN_NAMESPACES:
                if not self.compute_ok(text):
                    self.flag("torch_compute", tok, f"uses {text} ({head}::{part} computes with torch)")
                return
        if parts[1:2] == ("vec",) and head == "at":
            return  # ATen's header-only SIMD helpers (Vectorized, map, reduce_all) compute nothing by themselves
        last = parts[-1]
        if parts[1] == "cuda" and len(parts) > 2:
            name = parts[2]
            if name not in V.AT_CUDA_ALLOWED and not name[:1].isupper() and not self.compute_ok(text):
                self.flag("torch_compute", tok, f"uses {text} (ATen's CUDA kernels compute it, not yours)")
            return
        if called and not self.aten_call_ok(last) and not self.compute_ok(text, last):
            self.flag("torch_compute", tok, f"calls {text} (ATen/torch compute)")
        elif value and not called and not self.aten_value_ok(parts) and not self.compute_ok(text):
            self.flag("torch_compute", tok, f"takes {text} as a value (a function pointer reaches ATen/torch compute)")

    def pybind(self, parts: tuple[str, ...], tok: Token) -> None:
        text = "::".join(parts)
        for part in parts[1:]:
            if part == "return_value_policy":
                return
            if part not in V.PYBIND_ALLOWED and not self.policy.allows(text):
                self.flag("introspection", tok, f"uses {text} (pybind11 objects and calls reach Python)")
                return

    @staticmethod
    def aten_call_ok(name: str) -> bool:
        """Allocation and queries, types and constants (``TensorOptions()``, ``kFloat``), and names other
        rules judge (``getCurrentCUDABlasHandle``, ``getStreamFromPool``)."""
        constant = len(name) > 1 and name[0] == "k" and name[1].isupper()
        other_rule = (
            name in V.CPP_STREAM_CREATION
            or name in V.CPP_TAMPERING
            or any(name.startswith(prefix) for prefix, _, _ in V.VENDOR_LIBRARIES)
        )
        allowed = name in V.ATEN_ALLOWED_CALLS or name in V.ATEN_ALLOWED_VALUES
        return allowed or name[:1].isupper() or constant or other_rule

    def aten_value_ok(self, parts: tuple[str, ...]) -> bool:
        """Whether naming ``parts`` without calling it is harmless: types, constants, allowed functions, and
        a tensor's metadata methods as member pointers."""
        last = parts[-1]
        if self.aten_call_ok(last) or last in V.ATEN_ALLOWED_VALUES or last.endswith(("_t", "_type", "_traits")):
            return not (last in V.CPP_TENSOR_COMPUTE_METHODS and "Tensor" in parts)
        if "Tensor" in parts[1:-1] or "TensorBase" in parts[1:-1]:
            return last in V.TENSOR_METADATA_METHODS or last in V.TENSOR_VIEW_METHODS or last in ("sizes", "strides")
        return False

    def compute_ok(self, *names: str) -> bool:
        return self.policy.allow_torch_compute or self.policy.allows(*names)

    def member(self, tokens: Sequence[Token], i: int) -> None:
        """``x.name(...)``/``x->name(...)``: tensor compute methods, pybind11 and dispatcher members, unless
        the receiver is known to be the solution's own object (or, for zero_/fill_, its own buffer)."""
        tok, word = tokens[i], tokens[i].text
        if not self.is_call(tokens, i + 1):
            return
        in_place = word.endswith("_") and not word.startswith("_") and word not in V.CPP_NON_COMPUTE_IN_PLACE
        compute = word in V.CPP_TENSOR_COMPUTE_METHODS or (in_place and word not in V.TENSOR_VIEW_METHODS)
        if not (compute or word in V.PYBIND_MEMBERS or word in V.DISPATCH_MEMBERS):
            return
        receiver = self.scope.receiver(tokens, i - 1)
        if receiver == "object":
            return
        if word in ("zero_", "fill_") and receiver == "buffer" and self.plain_arguments(tokens, i + 1):
            return
        if word in V.PYBIND_MEMBERS:
            self.flag("introspection", tok, f"calls .{word}() (reaches Python objects through pybind11)")
        elif word in V.DISPATCH_MEMBERS:
            if not self.compute_ok(word):
                self.flag("torch_compute", tok, f"calls .{word}() (runs an ATen operator through the dispatcher)")
        elif not self.compute_ok(word, f"Tensor.{word}"):
            self.flag("torch_compute", tok, f"calls the tensor method .{word}() (torch computes it, not your kernel)")

    def plain_arguments(self, tokens: Sequence[Token], j: int) -> bool:
        """Whether the call's arguments at ``j`` read no tensor: no member access or indexing, and no
        variable that may hold a tensor (``fill_(0.0f)``, ``fill_(-INFINITY)``, ``fill_(value)``)."""
        for tok in tokens[j + 1 : closing(tokens, j)]:
            if tok.text in (".", "->", "["):
                return False
            if tok.kind == "id" and tok.text in self.scope.variables and self.scope.kind(tok.text) != "object":
                return False
        return True

    def watched(self, tok: Token, word: str, *, called: bool, defines: bool) -> None:
        """Rules on an identifier's own spelling: loaders, threads, processes, syscalls, interposed runtime
        functions, streams, graphs, tampering, Python's C API, registrations and vendor libraries."""
        policy = self.policy
        if (word in _WATCHED or word.startswith(_WATCHED_PREFIXES)) and not policy.allows(word):
            self.named(tok, word, called=called, defines=defines)
        if (_BLAS_RE.match(word) or _VML_RE.match(word)) and not self.scope.defined(word):
            library, field = ("MKL", "") if _VML_RE.match(word) else ("BLAS", "allow_cublas")
            if not vendor_allowed(word, library, field, policy):
                self.flag("vendor_libraries", tok, f"{word} ({library} {self.vendor_why(library, field)})")

    def named(self, tok: Token, word: str, *, called: bool, defines: bool) -> None:
        """The rules on a name the vocabulary watches (see :meth:`watched`)."""
        policy = self.policy
        if called and (word in V.CPP_CONCURRENCY or word in V.CPP_SIGNALS):
            what = f"calls {word}() (threads, processes, signals and thread counts belong to the harness)"
            self.flag("concurrency", tok, what)
        if word in V.CPP_SYSCALLS or word.startswith(V.CPP_SYSCALL_PREFIXES):
            what = f"{word} reaches the kernel through syscall() (processes, threads and clocks belong to the harness)"
            self.flag("concurrency", tok, what)
        if word in V.CPP_INTROSPECTION:
            self.flag("introspection", tok, f"{word} reads or writes another process's memory")
        if defines and (word in V.CPP_INTERPOSED or _CUDA_API_RE.match(word)):
            self.flag("patching", tok, f"defines {word}(), replacing the runtime's own")
        if word in V.CPP_STREAM_CREATION and not policy.allow_cpp_streams:
            self.flag("streams", tok, f"{word} creates or uses a stream of its own")
        if word.startswith(V.CPP_GRAPH_PREFIXES) and not policy.allow_cuda_graphs:
            self.flag("cuda_graphs", tok, f"{word} captures or replays a CUDA graph")
        if word in V.CPP_LOADERS or word.startswith(V.CPP_LOADER_PREFIXES):
            self.flag("binary_loading", tok, f"{word} loads code at run time instead of building it from source")
        if word in V.CPP_TAMPERING or word.startswith(V.CPP_TAMPERING_PREFIXES):
            self.flag("patching", tok, f"{word} changes device, cache, profiler or process state the harness relies on")
        if word.startswith(V.CPP_REGISTRATION_PREFIXES):
            self.flag("patching", tok, f"{word} registers kernels or allocators with torch (changing what it runs)")
        if word.startswith(V.AOTI_PREFIX) and not self.compute_ok(word):
            self.flag("torch_compute", tok, f"{word} calls ATen through torch's C shim")
        own = self.scope.defined(word)
        if (_PYTHON_API_RE.match(word) or word.startswith(V.PYBIND_MACRO_PREFIXES)) and not own:
            self.flag("introspection", tok, f"{word} calls back into Python (the Python C API)")
        library = next(((lib, field) for prefix, lib, field in V.VENDOR_LIBRARIES if word.startswith(prefix)), None)
        if library is not None and not own and not vendor_allowed(word, library[0], library[1], policy):
            self.flag("vendor_libraries", tok, f"{word} ({library[0]} {self.vendor_why(*library)})")

    def vendor_why(self, library: str, field: str) -> str:
        if field and getattr(self.policy, field):
            return "only for GEMM" if "BLAS" in library else "only for convolution"
        return "is not allowed here"

    def symbol(self, tok: Token, name: str) -> bool:
        """Rules on a symbol an asm label or an alias/weakref attribute names; whether one fired."""
        before = len(self.found)
        self.watched(tok, name, called=True, defines=False)
        if name.startswith("_Z") and re.search(r"(?:^_ZN?|[0-9])(?:2at|5torch|3c10)\d", name):
            if not self.compute_ok(name):
                self.flag("torch_compute", tok, f'binds a declaration to the ATen symbol "{name[:60]}"')
        return len(self.found) > before

    # -- helpers -----------------------------------------------------------------------------------

    @staticmethod
    def is_call(tokens: Sequence[Token], j: int) -> bool:
        """Whether a call's ``(`` (optionally after ``<...>`` template arguments) starts at token ``j``."""
        if j < len(tokens) and tokens[j].text == "<":
            depth = 0
            for k in range(j, min(len(tokens), j + 64)):
                depth += {"<": 1, ">": -1, ">>": -2}.get(tokens[k].text, 0)
                if tokens[k].text in (";", "{", "}"):
                    return False
                if depth <= 0:
                    j = k + 1
                    break
            else:
                return False
        return j < len(tokens) and tokens[j].text == "("


def check_cpp_sources(
    sources: Iterable[CppSource], policy: IntegrityPolicy, *, known_files: Iterable[str] = ()
) -> list[Violation]:
    """Violations of a solution's C/C++/CUDA sources, checked together: the macros and declarations of
    each hold in all of them (a header's macro is expanded where it is used)."""
    streams, refusals = prepare(sources)
    found = []
    if policy.enabled("checkable"):
        for source, error in refusals:
            what = f"{error.what}; the checks cannot expand it (write the code out)"
            found.append(Violation("checkable", source.path, error.line + source.line_offset, what))
    scope = Scope()
    for _, stream in streams:
        scope.add_names(stream)
    for _, stream in streams:
        scope.add_declarations(stream)
    frozen = frozenset(known_files)
    for source, stream in streams:
        found += _CppChecker(source, policy, frozen, scope).run(stream)
    unique = {(v.rule, v.path, v.line, v.what): v for v in found}
    return list(unique.values())


def check_cpp(
    text: str,
    path: str,
    policy: IntegrityPolicy,
    *,
    line_offset: int = 0,
    known_files: Iterable[str] = (),
) -> list[Violation]:
    """Violations of one C/C++/CUDA source ``text`` (workspace path ``path``; lines shifted by
    ``line_offset`` when the source is a string inside model_new.py)."""
    return check_cpp_sources([CppSource(path, text, line_offset)], policy, known_files=known_files)
