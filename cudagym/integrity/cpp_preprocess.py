"""The preprocessor's work the C++ checks need after lexing (:mod:`cudagym.integrity.cpp_tokens`).

3. :func:`expand` replaces macro invocations the way the preprocessor does (object-like and function-like
   macros, ``#`` stringizing, ``##`` pasting, ``__VA_ARGS__``/``__VA_OPT__``, rescanning with hide sets),
   with the macros of every source of the solution (a header's macro is expanded where it is used).
   Macros defined more than once (under ``#if`` branches the checks cannot decide) are expanded once per
   combination of their definitions; what cannot be expanded raises :class:`Unexpandable`.
4. :func:`finish` turns ``_Pragma("...")`` into a ``#pragma`` directive and joins adjacent string literals
   (``".inc" "bin"`` is ``".incbin"``), the last phases before the tokens are checked.

:func:`prepare` runs all of it on a solution's sources. Nothing here knows a rule;
:mod:`cudagym.integrity.cpp_checks` runs them on the result.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence

from cudagym.errors import CudaGymError
from cudagym.integrity.cpp_tokens import Stream, Token, directives, lex

# -- macros ----------------------------------------------------------------------------------------------


class Unexpandable(CudaGymError):
    """A macro the checks cannot expand (malformed, unterminated, or an expansion past the budget)."""

    def __init__(self, what: str, line: int) -> None:
        super().__init__(what)
        self.what = what
        self.line = line


@dataclasses.dataclass(frozen=True)
class Macro:
    """One ``#define``: the name, the parameters (None for an object-like macro), whether the last
    parameter takes the variable arguments, and the replacement list."""

    name: str
    params: tuple[str, ...] | None
    variadic: bool
    body: tuple[Token, ...]
    line: int

    def key(self) -> tuple[object, ...]:
        """What makes two definitions the same (a header's macro defined again identically is one)."""
        return (self.params, self.variadic, tuple((t.kind, t.text) for t in self.body))


def parse_define(tokens: Sequence[Token], line: int) -> Macro:
    """The macro of a ``#define`` directive's tokens (those after ``define``)."""
    if not tokens or tokens[0].kind != "id":
        raise Unexpandable("a #define without a macro name", line)
    name, rest = tokens[0].text, list(tokens[1:])
    if not rest or rest[0].text != "(" or rest[0].gap:
        return Macro(name, None, False, tuple(rest), line)
    params: list[str] = []
    variadic, k = False, 1
    while k < len(rest) and rest[k].text != ")":
        tok = rest[k]
        if tok.text == "...":
            params.append("__VA_ARGS__")
            variadic = True
        elif tok.kind == "id" and k + 1 < len(rest) and rest[k + 1].text == "...":
            params.append(tok.text)
            variadic = True
            k += 1
        elif tok.kind == "id":
            params.append(tok.text)
        elif tok.text != ",":
            raise Unexpandable(f"the parameters of macro {name} cannot be read", line)
        k += 1
    if k >= len(rest):
        raise Unexpandable(f"the parameter list of macro {name} is not closed", line)
    return Macro(name, tuple(params), variadic, tuple(rest[k + 1 :]), line)


class MacroTable:
    """Every macro the sources define, with each distinct definition of a name kept."""

    def __init__(self) -> None:
        self.definitions: dict[str, list[Macro]] = {}
        self.errors: list[Unexpandable] = []

    def add_source(self, tokens: Sequence[Token]) -> None:
        """Adds the ``#define``s of one source's tokens (``#undef`` is ignored: every definition counts)."""
        for start, end in directives(tokens):
            if start + 1 < end and tokens[start + 1].text == "define":
                try:
                    self.add(parse_define(tokens[start + 2 : end], tokens[start].line))
                except Unexpandable as error:
                    self.errors.append(error)

    def add(self, macro: Macro) -> None:
        known = self.definitions.setdefault(macro.name, [])
        if all(m.key() != macro.key() for m in known):
            known.append(macro)

    def __contains__(self, name: str) -> bool:
        return name in self.definitions

    def choices(self, tokens: Sequence[Token], limit: int) -> list[dict[str, int]] | None:
        """One mapping (macro -> which definition) per combination of the definitions of the macros that
        ``tokens`` reach and that are defined more than once; None when there are more than ``limit``."""
        reached: set[str] = set()
        frontier = [t.text for t in _outside_definitions(tokens) if t.kind == "id" and t.text in self.definitions]
        while frontier:
            name = frontier.pop()
            if name in reached:
                continue
            reached.add(name)
            for macro in self.definitions[name]:
                frontier += [t.text for t in macro.body if t.kind == "id" and t.text in self.definitions]
        several = sorted(n for n in reached if len(self.definitions[n]) > 1)
        count = 1
        for name in several:
            count *= len(self.definitions[name])
            if count > limit:
                return None
        ranges = [range(len(self.definitions[n])) for n in several]
        return [dict(zip(several, combo, strict=True)) for combo in itertools.product(*ranges)]


def _outside_definitions(tokens: Sequence[Token]) -> Iterator[Token]:
    """The tokens that are not part of a ``#define`` or ``#undef`` directive."""
    skip = False
    for k, tok in enumerate(tokens):
        if tok.kind == "hash":
            skip = k + 1 < len(tokens) and tokens[k + 1].text in ("define", "undef")
        if not skip:
            yield tok
        if tok.kind == "eol":
            skip = False


@dataclasses.dataclass
class _Budget:
    left: int


def expand(tokens: Sequence[Token], table: MacroTable, choice: dict[str, int], budget: int) -> list[Token]:
    """``tokens`` with every macro invocation replaced; directives pass through as they are, except the
    bodies of ``#pragma``s, which are expanded as GCC does for OpenMP. ``choice`` picks the definition of
    macros defined several times; more than ``budget`` tokens produced raises :class:`Unexpandable`."""
    return _expand(tokens, table, choice, _Budget(budget), 0)


def _expand(
    tokens: Sequence[Token], table: MacroTable, choice: dict[str, int], budget: _Budget, depth: int
) -> list[Token]:
    if depth > 64:
        raise Unexpandable("macros nest more than 64 levels deep", tokens[0].line if tokens else 1)
    out: list[Token] = []
    stack = list(reversed(tokens))
    while stack:
        tok = stack.pop()
        if tok.kind == "hash":
            directive = [tok]
            while stack and directive[-1].kind != "eol":
                directive.append(stack.pop())
            if len(directive) > 2 and directive[1].text == "pragma":
                body = directive[2:-1] if directive[-1].kind == "eol" else directive[2:]
                directive[2 : 2 + len(body)] = _expand(body, table, choice, budget, depth + 1)
            out += directive
            continue
        if tok.kind != "id" or tok.text not in table or tok.text in tok.hide:
            out.append(tok)
            continue
        macros = table.definitions[tok.text]
        macro = macros[choice.get(tok.text, 0) % len(macros)]
        if macro.params is None:
            body = _substitute(macro, None, tok.hide | {macro.name}, tok, table, choice, budget, depth)
        elif stack and stack[-1].text == "(":
            args, closing = _arguments(stack, macro, tok)
            hide = (tok.hide & closing.hide) | {macro.name}
            body = _substitute(macro, args, hide, tok, table, choice, budget, depth)
        else:
            out.append(tok)  # a function-like macro's name without arguments is just a name
            continue
        budget.left -= len(body)
        if budget.left < 0:
            raise Unexpandable(f"the expansion of macro {macro.name} grows past what the checks follow", tok.line)
        stack.extend(reversed(body))
    return out


def _arguments(stack: list[Token], macro: Macro, site: Token) -> tuple[list[list[Token]], Token]:
    """Pops ``( ... )`` off ``stack`` and returns the arguments and the closing parenthesis."""
    stack.pop()
    args: list[list[Token]] = [[]]
    depth = 0
    params = macro.params or ()
    while stack:
        tok = stack.pop()
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            if depth == 0:
                if args == [[]] and not params:
                    args = []
                if len(args) < len(params) - int(macro.variadic) or (len(args) > len(params) and not macro.variadic):
                    raise Unexpandable(f"macro {macro.name} is given {len(args)} arguments", site.line)
                return args, tok
            depth -= 1
        elif tok.text == "," and depth == 0 and not (macro.variadic and len(args) >= len(params)):
            args.append([])
            continue
        args[-1].append(tok)
    raise Unexpandable(f"the arguments of macro {macro.name} are not closed", site.line)


def _substitute(
    macro: Macro,
    args: list[list[Token]] | None,
    hide: frozenset[str],
    site: Token,
    table: MacroTable,
    choice: dict[str, int],
    budget: _Budget,
    depth: int,
) -> list[Token]:
    """The replacement list with arguments substituted, ``#`` and ``##`` applied, placed at ``site``."""
    raw: dict[str, list[Token]] = {}
    if args is not None and macro.params is not None:
        raw = {name: args[k] if k < len(args) else [] for k, name in enumerate(macro.params)}
    va = raw.get(macro.params[-1], []) if macro.variadic and macro.params else []
    expanded: dict[str, list[Token]] = {}

    def full(name: str) -> list[Token]:
        if name not in expanded:
            expanded[name] = _expand(raw[name], table, choice, budget, depth + 1)
        return expanded[name]

    body = list(macro.body)
    out: list[Token | None] = []  # None: a placemarker (an empty argument next to ##)
    i = 0
    while i < len(body):
        tok = body[i]
        after = body[i + 1] if i + 1 < len(body) else None
        if tok.text == "__VA_OPT__" and after is not None and after.text == "(":
            close, level = i + 1, 0
            for close in range(i + 1, len(body)):
                level += {"(": 1, ")": -1}.get(body[close].text, 0)
                if level == 0:
                    break
            if va:
                body[i : close + 1] = body[i + 2 : close]
            else:
                del body[i : close + 1]
            continue
        if tok.text in ("#", "%:") and raw and after is not None and after.text in raw:
            out.append(_stringize(raw[after.text], site))
            i += 2
            continue
        if tok.text == "##" and out:
            right: list[Token | None] = [after]
            if after is None:
                right = [None]
            elif after.text in raw:
                right = list(raw[after.text]) or [None]
            out[-1:] = _paste(out[-1], right[0], site) + right[1:]
            i += 2
            continue
        if tok.text in raw:
            pasted_next = after is not None and after.text == "##"
            pieces: list[Token | None] = list(raw[tok.text]) if pasted_next else list(full(tok.text))
            out += pieces or ([None] if pasted_next else [])
        else:
            out.append(tok)
        i += 1
    placed = []
    for tok in out:
        if tok is not None:
            placed.append(dataclasses.replace(tok, line=site.line, hide=tok.hide | hide, via=tok.via or macro.name))
    if placed:
        placed[0] = dataclasses.replace(placed[0], gap=site.gap)
    return placed


def _stringize(tokens: Sequence[Token], site: Token) -> Token:
    """``#x``: the argument's spelling as a string literal (quotes and backslashes in literals escaped)."""
    parts = []
    for k, tok in enumerate(tokens):
        spelled = tok.spelling()
        if tok.kind in ("str", "char"):
            spelled = spelled.replace("\\", "\\\\").replace('"', '\\"')
        parts.append((" " if k and tok.gap else "") + spelled)
    return Token("str", "".join(parts), site.line, site.gap)


def _paste(left: Token | None, right: Token | None, site: Token) -> list[Token | None]:
    """``a ## b``: the tokens the joined spelling lexes to (one, unless the paste is invalid)."""
    if left is None or right is None:
        return [left if right is None else right]
    joined = lex(left.spelling() + right.spelling())
    return [dataclasses.replace(t, line=site.line, gap=left.gap, hide=left.hide | right.hide) for t in joined]


# -- the last phases ---------------------------------------------------------------------------------------


def finish(tokens: Iterable[Token]) -> list[Token]:
    """``_Pragma("x")`` as the directive ``#pragma x``, then adjacent string literals joined (phase 6).
    A ``_Pragma`` whose operand is not one string literal raises :class:`Unexpandable`."""
    listed = list(tokens)
    out: list[Token] = []
    i, in_directive = 0, False
    while i < len(listed):
        tok = listed[i]
        in_directive = (in_directive or tok.kind == "hash") and tok.kind != "eol"
        if tok.kind == "id" and tok.text == "_Pragma" and not in_directive:
            window = listed[i + 1 : i + 4]
            if len(window) < 3 or window[0].text != "(" or window[1].kind != "str" or window[2].text != ")":
                raise Unexpandable("_Pragma is given something other than one string literal", tok.line)
            body = [dataclasses.replace(t, line=tok.line, via=tok.via) for t in lex(window[1].decoded())]
            out += [Token("hash", "#", tok.line), Token("id", "pragma", tok.line, True), *body]
            out.append(Token("eol", "", tok.line))
            i += 4
            continue
        previous = out[-1] if out else None
        if tok.kind == "str" and previous is not None and previous.kind == "str":
            joined = previous.decoded() + tok.decoded()
            out[-1] = dataclasses.replace(previous, text=previous.text + tok.text, value=joined)
        else:
            out.append(tok)
        i += 1
    return out


# -- a solution's sources -----------------------------------------------------------------------------------

MAX_COMBINATIONS = 32
"""Macros defined several ways (under ``#if`` branches) are expanded once per combination, up to this many."""

EXPANSION_BUDGET = 200_000
"""Tokens one source's macro expansion may produce before it is refused as uncheckable."""

COMBINED_TOKENS = 400_000
"""Tokens all the combinations of one source may add up to (a large file gets fewer combinations)."""


@dataclasses.dataclass(frozen=True)
class CppSource:
    """One C/C++/CUDA source: its workspace path, its text, and the line its first line is on (a string
    inside model_new.py starts further down)."""

    path: str
    text: str
    line_offset: int = 0


def prepare(
    sources: Iterable[CppSource],
) -> tuple[list[tuple[CppSource, Stream]], list[tuple[CppSource, Unexpandable]]]:
    """Every source after all the phases, with the macros of all of them (one stream per combination of
    the definitions of macros defined more than once), and what could not be expanded. A source that
    cannot be expanded is kept as written, so the rules still see what it spells out."""
    listed = list(sources)
    lexed = [lex(source.text) for source in listed]
    table = MacroTable()
    refusals: list[tuple[CppSource, Unexpandable]] = []
    for source, tokens in zip(listed, lexed, strict=True):
        before = len(table.errors)
        table.add_source(tokens)
        refusals += [(source, error) for error in table.errors[before:]]
    streams: list[tuple[CppSource, Stream]] = []
    for source, tokens in zip(listed, lexed, strict=True):
        limit = max(1, min(MAX_COMBINATIONS, COMBINED_TOKENS // max(len(tokens), 1)))
        choices = table.choices(tokens, limit)
        if choices is None:
            refusals.append((source, Unexpandable(f"macros defined in more than {limit} combinations of ways", 1)))
            choices = [{}]
        for choice in choices:
            prepared = _prepared(tokens, table, choice, lambda error, s=source: refusals.append((s, error)))
            streams.append((source, Stream(prepared)))
    return streams, refusals


def _prepared(
    tokens: list[Token], table: MacroTable, choice: dict[str, int], refuse: Callable[[Unexpandable], None]
) -> list[Token]:
    """The tokens after macro expansion and the last phases; what cannot be expanded goes to ``refuse``
    and is kept as written."""
    try:
        expanded = expand(tokens, table, choice, EXPANSION_BUDGET)
    except Unexpandable as error:
        refuse(error)
        expanded = tokens
    try:
        return finish(expanded)
    except Unexpandable as error:
        refuse(error)
        return list(expanded)
