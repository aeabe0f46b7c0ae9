"""Static checks on C++/CUDA sources: a small lexer, then token-level rules.

Comments are dropped and string literals become single tokens, so a rule never fires on a comment or a
message string and never misses code hidden behind one (``x = "#"; at::matmul(...)``). The checks see
identifiers, ``::``-qualified names, member calls, preprocessor directives and literal contents. They
cannot know types, so tensor arithmetic through C++ operators (``a + b`` on ``at::Tensor``) is left to
the run-time recording of ATen ops.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import PurePosixPath

from cudagym.integrity import vocabulary as V
from cudagym.integrity.policy import IntegrityPolicy, Violation


@dataclasses.dataclass(frozen=True)
class Token:
    """One lexical token. ``kind``: id, num, str, char, punct, header (an #include's target), hash (the
    ``#`` that opens a directive), eol (the end of a directive). ``text`` of a string is its content."""

    kind: str
    text: str
    line: int


_HEADER_DIRECTIVES = frozenset({"include", "include_next", "import", "embed"})
_TOKEN_RE = re.compile(
    r"""(?P<include>^[ \t]*\#[ \t]*(?P<directive>include_next|include|import|embed)\b
        [ \t]*(?P<header><[^>\n]*>|"[^"\n]*")?)
    |(?P<hash>^[ \t]*\#)|(?P<nl>\n)|(?P<ws>[ \t\r\f\v]+|\\\n)
    |(?P<comment>//(?:[^\n\\]|\\.)*|/\*.*?(?:\*/|\Z))
    |(?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\ \n]{0,16})\((?P<rawbody>.*?)(?:\)(?P=delim)"|\Z))
    |(?P<str>(?:u8|u|U|L)?"(?P<strbody>(?:[^"\\\n]|\\.)*)"?)|(?P<char>(?:u8|u|U|L)?'(?P<charbody>(?:[^'\\\n]|\\.)*)'?)
    |(?P<id>[A-Za-z_][A-Za-z0-9_]*)|(?P<num>\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z]|[0-9A-Za-z_.])*)
    |(?P<punct>::|->|<<<|>>>|.)""",
    re.S | re.X | re.M,
)
_MULTILINE = frozenset({"ws", "comment", "raw", "str", "char"})


def lex(text: str) -> list[Token]:
    """Tokens of a C/C++/CUDA source: comments dropped, literals whole, directives framed by hash/eol."""
    tokens: list[Token] = []
    add = tokens.append
    line, in_directive = 1, False
    for match in _TOKEN_RE.finditer(text):
        kind = match.lastgroup
        if kind == "nl":
            if in_directive:
                add(Token("eol", "", line))
                in_directive = False
            line += 1
            continue
        if kind == "include":
            in_directive = True
            add(Token("hash", "#", line))
            add(Token("id", match.group("directive"), line))
            if match.group("header"):
                add(Token("header", match.group("header"), line))
        elif kind == "hash":
            in_directive = True
            add(Token("hash", "#", line))
        elif kind in ("str", "char", "raw"):
            add(Token("str" if kind == "raw" else kind, match.group(f"{kind}body"), line))
        elif kind in ("id", "num", "punct"):
            add(Token(kind, match.group(), line))
        if kind in _MULTILINE:
            line += match.group().count("\n")
    if in_directive:
        add(Token("eol", "", line))
    return tokens


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
_PTX_RE = re.compile(r"\.version\s+\d|\.target\s+sm_|\.entry\s|\.visible\s")
_BLOB_RE = re.compile(r"[A-Za-z0-9+/=]{256,}|(?:[0-9a-fA-F]{2}){128,}|(?:\\x[0-9a-fA-F]{2}){64,}|(?:\\[0-7]{3}){64,}")
_BINARY_PATH_RE = re.compile(r"\.(so(\.\d+)*|cubin|fatbin|ptx|o|a|dll|dylib)$")
_VENDOR_HEADERS = (("cublas", "cuBLAS", "allow_cublas"), ("cblas", "CBLAS", "allow_cublas"),
                   ("cudnn", "cuDNN", "allow_cudnn"), ("cufft", "cuFFT", ""), ("cusparse", "cuSPARSE", ""),
                   ("cusolver", "cuSOLVER", ""), ("curand", "cuRAND", ""), ("cutensor", "cuTENSOR", ""),
                   ("nccl", "NCCL", ""), ("mkl", "MKL", ""), ("dnnl", "oneDNN", ""),
                   ("oneapi/dnnl", "oneDNN", ""))  # fmt: skip
_CHAIN_HEADS = V.ATEN_NAMESPACES | {"std", "thrust", "cub"}
_WATCHED = V.CPP_CONCURRENCY | V.CPP_INTERPOSED | V.CPP_STREAM_CREATION | V.CPP_LOADERS | V.CPP_TAMPERING
_WATCHED_PREFIXES = ("cu", *V.CPP_GRAPH_PREFIXES, *V.CPP_LOADER_PREFIXES, *V.CPP_TAMPERING_PREFIXES,
                     *(prefix for prefix, _, _ in V.VENDOR_LIBRARIES))  # fmt: skip
"""Identifiers worth a closer look; every other one (``x``, ``float``, ``int64_t``) is skipped quickly."""
_THRUST_OK = frozenset({"raw_pointer_cast", "device_pointer_cast", "make_pair", "make_tuple", "get", "tie"})
_NOT_A_RETURN_TYPE = frozenset({"return", "else", "new", "delete", "case", "do", "throw", "sizeof", "co_return"})


def vendor_allowed(identifier: str, library: str, field: str, policy: IntegrityPolicy) -> bool:
    """Whether ``identifier`` of a vendor library may be used: cuBLAS for GEMM, cuDNN for convolution."""
    if policy.allows(identifier):
        return True
    if not field or not getattr(policy, field):
        return False
    if identifier.endswith("_t") or identifier.isupper() or identifier.startswith(("CUBLAS_", "CUDNN_")):
        return True  # types and enum constants
    if library in ("cuBLAS", "cuBLASLt", "CBLAS"):
        lowered = identifier.lower()
        return library == "cuBLASLt" or identifier in V.CUBLAS_SUPPORT or "gemm" in lowered or "matmul" in lowered
    return any(word in identifier for word in V.CUDNN_SUPPORT_WORDS)


class _CppChecker:
    """Walks one source's tokens and collects violations."""

    def __init__(self, path: str, policy: IntegrityPolicy, line_offset: int, known_files: frozenset[str]) -> None:
        self.path = path
        self.policy = policy
        self.offset = line_offset
        self.known = known_files
        self.found: list[Violation] = []
        self.aten_namespace = False  # after `using namespace at` / `torch`

    def flag(self, rule: str, token: Token, what: str) -> None:
        if self.policy.enabled(rule):
            self.found.append(Violation(rule, self.path, token.line + self.offset, what))

    def run(self, tokens: list[Token]) -> list[Violation]:
        for i, tok in enumerate(tokens):
            if tok.kind == "hash":
                self.directive(tokens, i)
            elif tok.kind == "id":
                self.identifier(tokens, i)
            elif tok.kind == "str":
                self.literal(tok)
            elif tok.kind == "punct" and tok.text == "{":
                self.initializer(tokens, i)
        return self.found

    # -- directives --------------------------------------------------------------------------------

    def directive(self, tokens: list[Token], i: int) -> None:
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
        if name in _HEADER_DIRECTIVES - {"embed"}:
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

    def identifier(self, tokens: list[Token], i: int) -> None:
        tok, word = tokens[i], tokens[i].text
        prev = tokens[i - 1].text if i > 0 else ""
        if prev in (".", "->"):  # a member: only tensor compute methods matter
            if word in V.CPP_TENSOR_COMPUTE_METHODS and self.is_call(tokens, i + 1):
                if not self.compute_ok(word, f"Tensor.{word}"):
                    self.flag(
                        "torch_compute", tok, f"calls the tensor method .{word}() (torch computes it, not your kernel)"
                    )
            return
        if self.policy.deny and self.policy.denies(word):
            self.flag("denied_name", tok, f"{word} is on the policy's deny list")
        global_scope = prev == "::" and (i < 2 or tokens[i - 2].kind != "id")  # ::name, not ns::name
        if prev == "::" and not global_scope:
            return  # judged with its chain
        if word in _CHAIN_HEADS:
            self.qualified(tokens, i)
        elif word == "namespace" and prev == "using":
            self.aten_namespace |= tokens[i + 1].text in V.ATEN_NAMESPACES if i + 1 < len(tokens) else False
        elif word in _WATCHED or word.startswith(_WATCHED_PREFIXES) or self.aten_namespace:
            self.watched(tokens, i)

    def watched(self, tokens: list[Token], i: int) -> None:
        """Rules on a bare identifier that a rule's vocabulary names."""
        tok, word = tokens[i], tokens[i].text
        called = self.is_call(tokens, i + 1)
        if called and self.aten_namespace and word in V.ATEN_BARE_COMPUTE and not self.compute_ok(word):
            self.flag("torch_compute", tok, f"calls {word}() from the at/torch namespace")
        if called and word in V.CPP_CONCURRENCY:
            self.flag(
                "concurrency", tok, f"calls {word}() (threads, processes and thread counts belong to the harness)"
            )
        if called and (word in V.CPP_INTERPOSED or _CUDA_API_RE.match(word)) and self.defines(tokens, i):
            self.flag("patching", tok, f"defines {word}(), replacing the runtime's own")
        policy = self.policy
        if word in V.CPP_STREAM_CREATION and not policy.allow_cpp_streams and not policy.allows(word):
            self.flag("streams", tok, f"{word} creates or uses a stream of its own")
        if word.startswith(V.CPP_GRAPH_PREFIXES) and not policy.allow_cuda_graphs and not policy.allows(word):
            self.flag("cuda_graphs", tok, f"{word} captures or replays a CUDA graph")
        if (word in V.CPP_LOADERS or word.startswith(V.CPP_LOADER_PREFIXES)) and not policy.allows(word):
            self.flag("binary_loading", tok, f"{word} loads code at run time instead of building it from source")
        if (word in V.CPP_TAMPERING or word.startswith(V.CPP_TAMPERING_PREFIXES)) and not policy.allows(word):
            self.flag("patching", tok, f"{word} changes device, cache, profiler or process state the harness relies on")
        library = next(((lib, field) for prefix, lib, field in V.VENDOR_LIBRARIES if word.startswith(prefix)), None)
        if library is not None and not vendor_allowed(word, library[0], library[1], policy):
            allowed = bool(library[1]) and getattr(policy, library[1])
            why = (
                ("only for GEMM" if "BLAS" in library[0] else "only for convolution")
                if allowed
                else "is not allowed here"
            )
            self.flag("vendor_libraries", tok, f"{word} ({library[0]} {why})")

    def qualified(self, tokens: list[Token], i: int) -> None:
        """Rules on ``ns::...::name`` chains starting at token ``i``."""
        parts, j = [tokens[i].text], i
        while j + 2 < len(tokens) and tokens[j + 1].text == "::" and tokens[j + 2].kind == "id":
            parts.append(tokens[j + 2].text)
            j += 2
        if len(parts) < 2:
            return
        head, last, tok = parts[0], parts[-1], tokens[i]
        called = self.is_call(tokens, j + 1)
        text = "::".join(parts)
        if head in V.ATEN_NAMESPACES:
            forbidden = next((p for p in parts[1:-1] if p in V.ATEN_FORBIDDEN_NAMESPACES), None)
            if forbidden is not None and not self.compute_ok(text):
                self.flag("torch_compute", tok, f"uses {text} ({head}::{forbidden} computes with torch)")
            elif called and not self.aten_call_ok(last) and not self.compute_ok(text, last):
                self.flag("torch_compute", tok, f"calls {text} (ATen/torch compute)")
            elif (
                not called and last in V.CPP_TENSOR_COMPUTE_METHODS | V.ATEN_BARE_COMPUTE and not self.compute_ok(text)
            ):
                self.flag("torch_compute", tok, f"takes {text} (ATen/torch compute) as a value")
        elif head == "std" and len(parts) == 2 and last in V.CPP_STD_CONCURRENCY and not self.policy.allows(text):
            self.flag("concurrency", tok, f"uses {text} (threads and processes belong to the harness)")
        elif head == "thrust" and called and last not in _THRUST_OK and not self.policy.allows(text, "thrust"):
            self.flag("vendor_libraries", tok, f"calls {text} (a Thrust library algorithm, not your kernel)")
        elif head == "cub" and parts[1].startswith("Device") and not self.policy.allows(text, "cub::Device"):
            self.flag("vendor_libraries", tok, f"uses {text} (a device-wide CUB algorithm; block-level CUB is fine)")

    @staticmethod
    def aten_call_ok(name: str) -> bool:
        """Allocation and queries, types and constants (``TensorOptions()``, ``kFloat``), and names other
        rules judge (``getCurrentCUDABlasHandle``, ``getStreamFromPool``, ``globalContext``)."""
        constant = len(name) > 1 and name[0] == "k" and name[1].isupper()
        other_rule = (
            name in V.CPP_STREAM_CREATION
            or name in V.CPP_TAMPERING
            or any(name.startswith(prefix) for prefix, _, _ in V.VENDOR_LIBRARIES)
        )
        return name in V.ATEN_ALLOWED_CALLS or name[:1].isupper() or constant or other_rule

    def compute_ok(self, *names: str) -> bool:
        return self.policy.allow_torch_compute or self.policy.allows(*names)

    @staticmethod
    def is_call(tokens: list[Token], j: int) -> bool:
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

    @staticmethod
    def defines(tokens: list[Token], i: int) -> bool:
        """Whether the name at ``i`` starts a function definition (a return type before, a body after)."""
        before = tokens[i - 1] if i > 0 else None
        if (
            before is None
            or not (before.kind == "id" or before.text in ("*", "&"))
            or before.text in _NOT_A_RETURN_TYPE
        ):
            return False
        depth = 0
        for k in range(i + 1, len(tokens)):
            depth += {"(": 1, ")": -1}.get(tokens[k].text, 0)
            if depth == 0:
                rest = [t.text for t in tokens[k + 1 : k + 6]]
                while rest and rest[0] in ("const", "noexcept", "override", "final", "throw"):
                    rest.pop(0)
                return bool(rest) and rest[0] == "{"
        return False

    # -- literals ----------------------------------------------------------------------------------

    def literal(self, tok: Token) -> None:
        text = tok.text
        if _PTX_RE.search(text) or ".incbin" in text:
            self.flag("binary_loading", tok, "a string holds PTX or an .incbin directive (build kernels from source)")
        elif "\\x7fELF" in text or "\\177ELF" in text or _BLOB_RE.search(text):
            self.flag("binary_loading", tok, "a string holds an embedded binary blob")
        elif _BINARY_PATH_RE.search(text.strip()) and " " not in text.strip():
            self.flag("binary_loading", tok, f'the path "{text[:80]}" names a prebuilt binary')
        if text.startswith(("/proc/", "/dev/shm")):
            self.flag("introspection", tok, f'the path "{text[:80]}" reads process or shared-memory state')

    def initializer(self, tokens: list[Token], i: int) -> None:
        numbers = 0
        for tok in tokens[i + 1 :]:
            if tok.kind == "num":
                numbers += 1
            elif tok.text == "}":
                break
            elif tok.kind != "punct" or tok.text not in ",-+":
                return
        if numbers >= 512:
            self.flag("binary_loading", tokens[i], f"an initializer of {numbers} numbers (an embedded binary?)")


def check_cpp(
    text: str,
    path: str,
    policy: IntegrityPolicy,
    *,
    line_offset: int = 0,
    known_files: Iterable[str] = (),
) -> list[Violation]:
    """Violations of the C/C++/CUDA source ``text`` (workspace path ``path``; lines shifted by
    ``line_offset`` when the source is a string inside model_new.py)."""
    checker = _CppChecker(path, policy, line_offset, frozenset(known_files))
    return checker.run(lex(text))
