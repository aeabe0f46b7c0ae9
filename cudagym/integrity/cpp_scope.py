"""What the C++ sources declare: the context the token rules need to tell one name from another.

Collected over every source of a solution at once (a header's declarations hold in the files that
include it): namespace aliases (``namespace X = at;``), using-declarations (``using at::relu;``) and
using-directives (``using namespace at::native;``), type aliases, the solution's own structs and classes,
the functions and macros it defines, and the declared type of every variable. With these a rule can
resolve ``X::relu`` to ``at::relu``, see that ``relu(x)`` after ``using at::relu;`` is ATen's, and decide
whether the receiver of ``acc.max(a, b)`` is an object of the solution's own type (its own method) or
possibly a tensor. Declarations are read from tokens, not parsed: a name counts as an object only when
every declaration of it, in every source, names a type known to hold no tensor; anything else (``auto``
from an unknown call, a template parameter, ``decltype``) leaves it possibly a tensor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from cudagym.integrity.cpp_tokens import Token, chain_after, chain_before, closing, code, opening

_VECTOR_NAMESPACE = ("at", "vec")

PREDEFINED_ALIASES: dict[str, tuple[str, ...]] = {"py": ("pybind11",)}
"""Aliases the toolkit's headers declare (``namespace py = pybind11;`` in torch/extension.h)."""

TENSOR_WORDS = frozenset(
    "Tensor TensorBase TensorList ITensorListRef IValue Variable TensorImpl OptionalTensorRef TensorRef "
    "MaybeOwned IntrusivePtr intrusive_ptr".split()
)
"""Type names that hold (or may hold) a tensor."""

OBJECT_HEADS = frozenset("std cg cooperative_groups cub nvcuda wmma cuda".split())
"""Namespaces of library types that are not tensors (their template arguments are judged on their own)."""

VECTOR_WORDS = frozenset("Vectorized VectorizedN VecMask".split())
"""ATen's header-only SIMD types (``at::vec::Vectorized<float>``)."""

SCALAR_WORDS = frozenset(
    """
    void bool char short int long float double signed unsigned wchar_t char8_t char16_t char32_t size_t ssize_t
    ptrdiff_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t half __half
    __half2 __nv_bfloat16 __nv_bfloat162 float2 float3 float4 double2 double3 double4 int2 int3 int4 uint2 uint3
    uint4 char2 char4 uchar2 uchar4 short2 short4 longlong2 dim3 __m128 __m256 __m512 __m128i __m256i __m512i
    const volatile constexpr static extern inline mutable register thread_local struct class union enum
    typename __device__ __host__ __shared__ __constant__ __managed__ __forceinline__ __restrict__ __restrict
    restrict alignas
    """.split()
)
"""Built-in types and the qualifiers that may stand in a declaration's type."""

ALLOCATIONS = frozenset("empty empty_like empty_strided zeros zeros_like ones ones_like full full_like".split())
"""``at::``/``torch::`` functions that return a new tensor of the binding's own."""

_NOT_A_TYPE = frozenset(
    """
    return case else new delete throw sizeof alignof typeid co_return co_yield co_await goto using namespace
    operator template public private protected if while for switch do asm __asm__ __asm typedef friend
    static_assert default break continue and or not decltype __typeof__ typeof struct class union enum
    """.split()
)
_DECLARATOR = frozenset({"*", "&", "&&", "const", "volatile", "__restrict__", "__restrict", "restrict"})
_FOLLOWS_A_DECLARATION = frozenset({"=", ";", ",", ")", "{", "[", ":", "("})
_FUNCTION_QUALIFIERS = frozenset({"const", "noexcept", "override", "final", "throw", "volatile", "&", "&&"})


def is_definition(tokens: Sequence[Token], i: int) -> bool:
    """Whether the name at ``i`` starts a function definition (a type or scope before it, a body after)."""
    before = tokens[i - 1] if i > 0 else None
    if before is None or not (before.kind == "id" or before.text in ("*", "&", "&&", ">", "::", "~")):
        return False
    if before.text in _NOT_A_TYPE - {"operator"}:
        return False
    if i + 1 >= len(tokens) or tokens[i + 1].text != "(":
        return False
    k = closing(tokens, i + 1) + 1
    while k < len(tokens) and (tokens[k].text in _FUNCTION_QUALIFIERS or tokens[k].text in ("(", "__attribute__")):
        k = closing(tokens, k) + 1 if tokens[k].text == "(" else k + 1
    if k < len(tokens) and tokens[k].text == "->":  # a trailing return type
        while k < len(tokens) and tokens[k].text not in ("{", ";"):
            k += 1
    if k < len(tokens) and tokens[k].text == ":":  # a constructor's initialiser list
        while k < len(tokens) and tokens[k].text not in ("{", ";"):
            k = closing(tokens, k) + 1 if tokens[k].text == "(" else k + 1
            if k < len(tokens) and tokens[k].text == "{" and tokens[k - 1].kind == "id":
                k = closing(tokens, k) + 1  # a member initialised with braces
    return k < len(tokens) and tokens[k].text == "{"


@dataclasses.dataclass(frozen=True)
class _TypeInfo:
    """One definition of an own struct or class: its base classes' tokens, and whether its body mentions a
    tensor type or defines ``operator->`` (then its objects may stand for tensors)."""

    bases: tuple[tuple[Token, ...], ...]
    opaque: bool


@dataclasses.dataclass(frozen=True)
class Declared:
    """One declaration of a variable: the tokens of its type (or, for ``auto``, of its initialiser's
    callee chain) and whether an ``at::``/``torch::`` allocation initialises it."""

    span: tuple[Token, ...]
    allocated: bool


class Scope:
    """The declarations of a solution's sources (see the module docstring)."""

    def __init__(self) -> None:
        self.aliases: dict[str, tuple[str, ...]] = dict(PREDEFINED_ALIASES)
        self.using: dict[str, tuple[str, ...]] = {}
        self.imported: set[tuple[str, ...]] = set()
        self.types: dict[str, tuple[Token, ...]] = {}
        self.own_types: dict[str, list[_TypeInfo]] = {}
        self.functions: set[str] = set()
        self.macros: set[str] = set()
        self.namespaces: set[str] = set()
        self.variables: dict[str, list[Declared]] = {}
        self.reassigned: set[str] = set()
        self._kinds: dict[tuple[str, bool], str] = {}

    # -- collecting --------------------------------------------------------------------------------------

    def add_names(self, tokens: Sequence[Token]) -> None:
        """First pass over one expanded source: aliases, using, types, own types, functions, macros."""
        for start, tok in enumerate(tokens):
            if tok.kind == "hash" and start + 2 < len(tokens) and tokens[start + 1].text == "define":
                self.macros.add(tokens[start + 2].text)
        for i, tok in code(tokens):
            if tok.kind != "id":
                continue
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if tok.text == "namespace" and nxt is not None and nxt.kind == "id" and _text(tokens, i + 2) == "=":
                names, _ = chain_after(tokens, i + 3)
                if names:
                    self.aliases[nxt.text] = tuple(names)
            elif tok.text == "namespace" and nxt is not None and nxt.kind == "id":
                self.namespaces.add(nxt.text)  # (``py`` stays pybind11's: torch's headers declare it so)
            elif tok.text == "using":
                self._using(tokens, i)
            elif tok.text == "typedef":
                end = _statement_end(tokens, i)
                name = next((t for t in reversed(tokens[i + 1 : end]) if t.kind == "id"), None)
                if name is not None:
                    self.types[name.text] = tuple(tokens[i + 1 : end])
            elif tok.text in ("struct", "class", "union", "enum") and nxt is not None:
                self._own_type(tokens, i)
            elif is_definition(tokens, i):
                self.functions.add(tok.text)

    def _using(self, tokens: Sequence[Token], i: int) -> None:
        if _text(tokens, i + 1) == "namespace":
            names, _ = chain_after(tokens, i + 2)
            if names:
                self.imported.add(tuple(names))
        elif _text(tokens, i + 2) == "=" and tokens[i + 1].kind == "id":
            self.types[tokens[i + 1].text] = tuple(tokens[i + 3 : _statement_end(tokens, i)])
        else:
            start = i + 2 if _text(tokens, i + 1) == "typename" else i + 1
            names, _ = chain_after(tokens, start)
            if len(names) > 1:
                self.using[names[-1]] = tuple(names)

    def _own_type(self, tokens: Sequence[Token], i: int) -> None:
        k = i + 1
        if tokens[i].text == "enum" and _text(tokens, k) in ("class", "struct"):
            k += 1
        while k < len(tokens) and tokens[k].text in ("alignas", "__align__", "__attribute__", "__declspec"):
            k = closing(tokens, k + 1) + 1 if _text(tokens, k + 1) == "(" else k + 1
        if k >= len(tokens) or tokens[k].kind != "id":
            return
        name, j = tokens[k].text, k + 1
        if _text(tokens, j) == "<":  # a specialisation: struct W<int> { ... }
            j = closing(tokens, j) + 1
        if _text(tokens, j) == "final":
            j += 1
        if _text(tokens, j) not in ("{", ":", ";"):
            return  # `struct Acc acc;` declares a variable of the type
        bases: list[Token] = []
        if _text(tokens, j) == ":":
            j += 1
            while j < len(tokens) and tokens[j].text not in ("{", ";"):
                if tokens[j].text not in ("public", "private", "protected", "virtual"):
                    bases.append(tokens[j])
                j += 1
        opaque = False
        if _text(tokens, j) == "{":
            body = tokens[j : closing(tokens, j) + 1]
            words = {t.text for t in body if t.kind == "id"}
            arrow = any(t.text == "operator" and _text(body, n + 1) in ("->", "->*") for n, t in enumerate(body))
            opaque = bool(words & TENSOR_WORDS) or arrow
        base_spans = _split_commas(bases)
        self.own_types.setdefault(name, []).append(_TypeInfo(tuple(base_spans), opaque))

    def add_declarations(self, tokens: Sequence[Token]) -> None:
        """Second pass (after every source's names): the declarations of variables and reassignments."""
        vector_calls = self._vector_call_arguments(tokens)
        brackets: list[str] = []
        for i, tok in code(tokens):
            if tok.text in ("(", "[", "{"):
                brackets.append(tok.text)
            elif tok.text in (")", "]", "}") and brackets:
                brackets.pop()
            if tok.kind != "id" or tok.text in _NOT_A_TYPE or tok.text in SCALAR_WORDS:
                continue
            prev = tokens[i - 1] if i > 0 else None
            if prev is not None and prev.text in (".", "->", "::"):
                continue
            nxt = _text(tokens, i + 1)
            if tok.text == "auto" and nxt in ("[", "&", "&&") and "[" in _texts(tokens, i + 1, i + 3):
                self._structured_binding(tokens, i)
                continue
            if nxt == "=" and prev is not None and brackets and brackets[-1] == "[" and prev.text in ("[", ",", "&"):
                self._declare(tok.text, Declared((), False))  # a lambda's init-capture
                continue
            if nxt not in _FOLLOWS_A_DECLARATION:
                continue
            span = self._type_before(tokens, i)
            if span is None:
                if nxt == "=" and prev is not None and prev.text in (";", "{", "}", ")", ","):
                    if not self._allocation_after(tokens, i + 2):
                        self.reassigned.add(tok.text)
                continue
            if [t.text for t in span] == ["auto"]:
                span = self._initialiser_chain(tokens, i, in_vector_call=any(a <= i < b for a, b in vector_calls))
            allocated = nxt == "=" and self._allocation_after(tokens, i + 2)
            self._declare(tok.text, Declared(span, allocated))
            self._more_declarators(tokens, i, span)

    def _declare(self, name: str, declared: Declared) -> None:
        self.variables.setdefault(name, []).append(declared)

    def _structured_binding(self, tokens: Sequence[Token], i: int) -> None:
        k = i + 1
        while k < len(tokens) and tokens[k].text != "[":
            k += 1
        for tok in tokens[k : closing(tokens, k)]:
            if tok.kind == "id":
                self._declare(tok.text, Declared((), False))

    def _more_declarators(self, tokens: Sequence[Token], i: int, span: tuple[Token, ...]) -> None:
        """``Acc a, b;``: the names after commas at the same level share the first one's type."""
        k = i + 1
        while k < len(tokens):
            text = tokens[k].text
            if text == "{" and tokens[k - 1].text == ")":
                return  # a function's body
            if text in ("(", "[", "{"):
                k = closing(tokens, k) + 1
                continue
            if text in (")", "]", "}", ";"):
                return
            if text == ",":
                j = k + 1
                while j < len(tokens) and tokens[j].text in _DECLARATOR:
                    j += 1
                declarator = j + 1 < len(tokens) and tokens[j].kind == "id"
                if not declarator or tokens[j + 1].text not in ("=", ";", ",", "[", "{"):
                    return
                self._declare(tokens[j].text, Declared(span, False))
                k = j
            k += 1

    def _type_before(self, tokens: Sequence[Token], i: int) -> tuple[Token, ...] | None:
        """The tokens of the type declaring the name at ``i``, or None when the name is not declared there."""
        k = i - 1
        while k >= 0 and tokens[k].text in _DECLARATOR:
            k -= 1
        wrapped = k >= 0 and tokens[k].text == "(" and _text(tokens, i + 1) == ")"  # `at::Tensor (b);`
        if wrapped:
            k -= 1
        if k < 0:
            return None
        end = tokens[k]
        if end.text in (")", "..."):
            return (dataclasses.replace(end, kind="id", text="decltype"),)  # decltype(x) b; Ts... b
        if end.kind == "id" and end.text in _NOT_A_TYPE:
            return None
        if end.kind != "id" and end.text not in (">", ">>"):
            return None
        start = k
        while start >= 0:
            tok = tokens[start]
            if tok.text in (">", ">>"):
                start = opening(tokens, start)
                if start < 0:
                    return None
                start -= 1
                continue
            if tok.kind == "id" and tok.text not in _NOT_A_TYPE:
                if start >= 1 and tokens[start - 1].text == "::":
                    start -= 2
                    continue
                start -= 1
                if start >= 0 and tokens[start].text in SCALAR_WORDS:
                    continue
                break
            if tok.text == "::":
                start -= 1
                continue
            break
        span = tuple(tokens[start + 1 : k + 1])
        if wrapped and not self._known_type(span):
            return None  # `foo(b);` is a call, not a declaration
        return span or None

    def _known_type(self, span: Sequence[Token]) -> bool:
        words = {t.text for t in span if t.kind == "id"}
        return bool(words & (TENSOR_WORDS | set(self.types) | set(self.own_types) | SCALAR_WORDS | {"auto"}))

    def _initialiser_chain(self, tokens: Sequence[Token], i: int, *, in_vector_call: bool) -> tuple[Token, ...]:
        """For ``auto name = X::Y(...)``: the tokens of ``X::Y`` (a call on an object yields none)."""
        if in_vector_call and _text(tokens, i + 1) in (")", ","):
            return (dataclasses.replace(tokens[i], text="Vectorized"),)  # a lambda given to at::vec::map
        k = i + 2 if _text(tokens, i + 1) in ("=", "{", "(") else i + 1
        if _text(tokens, i + 1) == "=" and _text(tokens, k) == "{":
            return ()
        names, end = chain_after(tokens, k)
        if not names:
            return ()
        stop = end
        if _text(tokens, stop) == "<":
            stop = closing(tokens, stop) + 1
            while _text(tokens, stop) == "::" and stop + 1 < len(tokens) and tokens[stop + 1].kind == "id":
                stop += 2
        if _text(tokens, stop) in (".", "->", "[") or _text(tokens, stop) not in ("(", "{", ";", ",", ")"):
            return ()  # a member call or an expression: unknown
        if _text(tokens, stop) == "(":
            after = closing(tokens, stop) + 1
            if _text(tokens, after) in (".", "->", "["):
                return ()
        return tuple(tokens[k:stop])

    def _allocation_after(self, tokens: Sequence[Token], k: int) -> bool:
        names, end = chain_after(tokens, k)
        resolved = self.resolve(tuple(names)) if names else ()
        if len(resolved) != 2 or resolved[0] not in ("at", "torch") or resolved[1] not in ALLOCATIONS:
            return False
        if _text(tokens, end) != "(":
            return False
        after = closing(tokens, end) + 1
        return _text(tokens, after) in (";", ",", ")")

    def _vector_call_arguments(self, tokens: Sequence[Token]) -> list[tuple[int, int]]:
        """Index ranges of the arguments of calls to ``at::vec::`` functions (lambdas given to them take
        ``Vectorized`` values)."""
        found = []
        for i, tok in code(tokens):
            if tok.kind == "id" and (i == 0 or tokens[i - 1].text != "::"):
                names, end = chain_after(tokens, i)
                resolved = self.resolve(tuple(names)) if len(names) > 1 else ()
                if resolved[:2] == ("at", "vec") and _text(tokens, end) == "(":
                    found.append((end, closing(tokens, end)))
        return found

    # -- queries -------------------------------------------------------------------------------------------

    def resolve(self, parts: tuple[str, ...]) -> tuple[str, ...]:
        """``parts`` with namespace aliases and using-declared names at its head replaced (``X::relu`` is
        ``at::relu`` after ``namespace X = at;``)."""
        for _ in range(16):
            if parts and parts[0] in self.aliases and self.aliases[parts[0]] != parts[:1]:
                parts = self.aliases[parts[0]] + parts[1:]
            elif parts and parts[0] in self.using and self.using[parts[0]] != parts[:1]:
                parts = self.using[parts[0]] + parts[1:]
            else:
                break
        return parts

    def defined(self, name: str) -> bool:
        """Whether the sources define ``name`` themselves: a function, macro, type, alias or namespace."""
        own = name in self.functions or name in self.macros or name in self.own_types or name in self.types
        return own or (name in self.namespaces and name not in PREDEFINED_ALIASES)

    def receiver(self, tokens: Sequence[Token], i: int) -> str:
        """What the object before the ``.``/``->`` at ``i`` is: "object" (of a type known to hold no
        tensor, or ``this``), "buffer" (a tensor the binding allocated itself) or "unknown"."""
        prev = tokens[i - 1] if i > 0 else None
        if prev is None:
            return "unknown"
        if prev.text == "this":
            return "object"
        if prev.kind == "id":
            return self.kind(prev.text)
        if prev.text == "]":
            start = opening(tokens, i - 1)
            return self.kind(tokens[start - 1].text, element=True) if start > 0 else "unknown"
        if prev.text in (")", "}"):
            start = opening(tokens, i - 1)
            if start <= 0:
                return "unknown"
            _, names = chain_before(tokens, start - 1)
            return "object" if names and self._object_type_name(names) else "unknown"
        return "unknown"

    def kind(self, name: str, *, element: bool = False) -> str:
        """What a variable (``element``: each of its elements) is, over all its declarations: "object" when
        every one names a type known to hold no tensor, "buffer" when the tensor ones are all initialised by
        an allocation and the name is never assigned anything else, "unknown" otherwise."""
        key = (name, element)
        if key not in self._kinds:
            self._kinds[key] = self._kind(name, element)
        return self._kinds[key]

    def _kind(self, name: str, element: bool) -> str:
        declarations = self.variables.get(name)
        if not declarations:
            return "unknown"
        objects = [self.is_object(d.span) for d in declarations]
        if all(objects):
            return "object"
        tensors = [d for d, is_object in zip(declarations, objects, strict=True) if not is_object]
        if not element and all(d.allocated for d in tensors) and name not in self.reassigned:
            return "buffer"
        return "unknown"

    def is_object(self, span: Sequence[Token], depth: int = 0) -> bool:
        """Whether a type's tokens name a type known to hold no tensor."""
        if not span or depth > 8:
            return False
        ids = [t for t in span if t.kind == "id"]
        if any(t.text in TENSOR_WORDS or t.text == "decltype" for t in ids):
            return False
        k = 0
        while k < len(span):
            tok = span[k]
            if tok.kind != "id" or (k >= 2 and span[k - 1].text == "::" and span[k - 2].text in (">", ">>")):
                k += 1
                continue
            names = [tok.text]
            while k + 2 < len(span) and span[k + 1].text == "::" and span[k + 2].kind == "id":
                names.append(span[k + 2].text)
                k += 2
            if not self._object_chain(tuple(names), depth):
                return False
            k += 1
        return True

    def _object_chain(self, names: tuple[str, ...], depth: int) -> bool:
        if names[0] in self.types:  # an alias, or a member of one (Vec::loadu)
            return self.is_object(self.types[names[0]], depth + 1)
        resolved = self.resolve(names)
        head = resolved[0]
        if head in OBJECT_HEADS or resolved[:2] == ("at", "vec") or self._plain(head):
            return True
        return len(resolved) == 1 and (head in SCALAR_WORDS or head in VECTOR_WORDS)

    def _object_type_name(self, names: list[str]) -> bool:
        """Whether a call ``names(...)`` or ``names{...}`` builds an object of a type known to hold no tensor:
        a constructor or static member of the solution's own type, of an alias of one, or of ``Vectorized``
        (a library function such as ``std::get`` may return anything)."""
        if names[0] in self.types:
            return self.is_object(self.types[names[0]])
        head = self.resolve(tuple(names[:1]))
        return head[0] in VECTOR_WORDS or head[:2] == _VECTOR_NAMESPACE or self._plain(head[0])

    def _plain(self, name: str, depth: int = 0) -> bool:
        """Whether ``name`` is one of the solution's own types and plain: nothing in it mentions a tensor,
        it defines no ``operator->``, and its bases are plain too."""
        infos = self.own_types.get(name)
        if not infos or name in self.types or depth > 8:
            return False
        return all(not info.opaque and all(self.is_object(b, depth + 1) for b in info.bases) for info in infos)


def _text(tokens: Sequence[Token], k: int) -> str:
    return tokens[k].text if 0 <= k < len(tokens) else ""


def _texts(tokens: Sequence[Token], start: int, end: int) -> list[str]:
    return [t.text for t in tokens[start:end]]


def _split_commas(tokens: Sequence[Token]) -> list[tuple[Token, ...]]:
    parts: list[list[Token]] = [[]]
    depth = 0
    for tok in tokens:
        depth += {"<": 1, ">": -1, ">>": -2, "(": 1, ")": -1}.get(tok.text, 0)
        if tok.text == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(tok)
    return [tuple(p) for p in parts if p]


def _statement_end(tokens: Sequence[Token], i: int) -> int:
    k = i
    while k < len(tokens) and tokens[k].text != ";":
        k = closing(tokens, k) + 1 if tokens[k].text in ("(", "{", "[") else k + 1
    return min(k, len(tokens))
