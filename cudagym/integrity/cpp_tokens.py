"""C/C++/CUDA tokens: what the compiler's first translation phases make of a source, and how to walk them.

1. Trigraphs are replaced and line splices (``\\`` before a newline, also with blanks between them, as GCC
   accepts) are joined, so ``dl\\<newline>sym`` is one identifier. The lines a splice joins are added
   back after the logical line, so every later token keeps its physical line number.
2. :func:`lex` cuts the text into tokens: comments dropped, string literals whole, directives framed by
   ``hash``/``eol`` tokens, digraphs and universal character names in identifiers normalised.

:class:`Stream` holds a preprocessed source with its brackets matched once; :func:`closing`,
:func:`opening`, :func:`chain_after` and :func:`chain_before` are the walks the rules share.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence

# -- tokens ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Token:
    """One preprocessing token.

    ``kind``: id, num, str, char, punct, header (an #include's target), hash (the ``#`` that opens a
    directive), eol (the end of a directive). ``text``: the spelling, or for a string or character literal
    its content between the quotes (escapes as written). ``gap``: blank space came before it (stringizing
    keeps it). ``hide``: the macros this token may not be expanded by again. ``value``: the decoded
    content of a raw or concatenated string literal (:meth:`decoded` works it out for the others). ``via``:
    the macro whose expansion produced the token ("" for source text).
    """

    kind: str
    text: str
    line: int
    gap: bool = False
    hide: frozenset[str] = frozenset()
    value: str | None = None
    via: str = ""

    def decoded(self) -> str:
        """A literal's content with its escape sequences resolved (the text itself for other tokens)."""
        if self.value is not None:
            return self.value
        return unescape(self.text) if self.kind in ("str", "char") else self.text

    def spelling(self) -> str:
        """The token as it would be written in source (for pasting and stringizing)."""
        if self.kind == "str":
            return f'"{self.text}"'
        if self.kind == "char":
            return f"'{self.text}'"
        return self.text


_TRIGRAPHS = {"=": "#", "/": "\\", "'": "^", "(": "[", ")": "]", "!": "|", "<": "{", ">": "}", "-": "~"}
_TRIGRAPH_RE = re.compile(r"\?\?([=/'()!<>\-])")
_SPLICE_END_RE = re.compile(r"\\[ \t\f\v\r]*$")


def splice(text: str) -> str:
    """Phases 1 and 2: trigraphs replaced (conservatively, as ``-trigraphs`` would) and line splices
    joined. The lines a splice joins come back as empty lines after the logical line, so the line count
    and every later line number stay as they were."""
    text = _TRIGRAPH_RE.sub(lambda m: _TRIGRAPHS[m.group(1)], text)
    if "\\" not in text:
        return text
    out: list[str] = []
    joined, pending = "", 0
    for line in text.split("\n"):
        end = _SPLICE_END_RE.search(line)
        if end:
            joined += line[: end.start()]
            pending += 1
            continue
        out.append(joined + line)
        out += [""] * pending
        joined, pending = "", 0
    if pending:
        out.append(joined)
        out += [""] * (pending - 1)
    return "\n".join(out)


_DIGRAPHS = {"<%": "{", "%>": "}", "<:": "[", ":>": "]", "%:%:": "##", "%:": "#"}
_IDENT = r"(?:[A-Za-z_$]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}|[^\x00-\x7f])"
_TOKEN_RE = re.compile(
    rf"""(?P<include>^[ \t]*(?:\#|%:)[ \t]*(?P<directive>include_next|include|import|embed)\b
        [ \t]*(?P<header><[^>\n]*>|"[^"\n]*")?)
    |(?P<hash>^[ \t]*(?:\#|%:)(?!\#|%:))|(?P<nl>\n)|(?P<ws>[ \t\r\f\v]+)
    |(?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
    |(?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\ \n]{{0,16}})\((?P<rawbody>.*?)(?:\)(?P=delim)"|\Z))
    |(?P<str>(?:u8|u|U|L)?"(?P<strbody>(?:[^"\\\n]|\\.)*)"?)|(?P<char>(?:u8|u|U|L)?'(?P<charbody>(?:[^'\\\n]|\\.)*)'?)
    |(?P<id>{_IDENT}(?:{_IDENT}|[0-9])*)|(?P<num>\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z]|[0-9A-Za-z_.])*)
    |(?P<punct>%:%:|<%|%>|<:(?!:[^:>])|:>|%:|\.\.\.|->\*|<<=|>>=|<<<|>>>|::|->|\#\#|==|!=|<=|>=|&&|\|\||\+\+|--
        |[-+*/%&|^]=|<<|>>|\.\*|.)""",
    re.S | re.X | re.M,
)
_MULTILINE = frozenset({"raw", "str", "char"})
_UCN_RE = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")


def _ucn(text: str) -> str:
    """An identifier with its universal character names decoded (``dl\\u0073ym`` is ``dlsym``)."""
    if "\\" not in text:
        return text
    return _UCN_RE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), text)


def lex(text: str) -> list[Token]:
    """Tokens of a C/C++/CUDA source after phases 1 and 2: comments dropped, literals whole, directives
    framed by hash/eol. A ``#`` is a directive's when only blanks and comments come before it on its line
    (a comment that spans lines counts as a line start: GCC is stricter, the checks err on the safe side)."""
    tokens: list[Token] = []
    add = tokens.append
    line, in_directive, gap, line_start = 1, False, False, True
    for match in _TOKEN_RE.finditer(splice(text)):
        kind = match.lastgroup
        spelled = match.group()
        if kind == "nl":
            if in_directive:
                add(Token("eol", "", line))
                in_directive = False
            line += 1
            gap = line_start = True
            continue
        if kind in ("ws", "comment"):
            gap = True
            line_start = line_start or "\n" in spelled
            line += spelled.count("\n")
            continue
        if kind == "include" or (kind == "hash" and not in_directive):
            in_directive = True
            add(Token("hash", "#", line, gap))
            if kind == "include":
                add(Token("id", match.group("directive"), line, True))
                if match.group("header"):
                    add(Token("header", match.group("header"), line, True))
        elif kind == "punct" and spelled in ("#", "%:") and line_start and not in_directive:
            in_directive = True  # after a comment at the start of the line
            add(Token("hash", "#", line, gap))
        elif kind == "raw":
            add(Token("str", match.group("rawbody"), line, gap, value=match.group("rawbody")))
        elif kind in ("str", "char"):
            add(Token(kind, match.group(f"{kind}body"), line, gap))
        elif kind == "id":
            add(Token("id", _ucn(spelled), line, gap))
        elif kind == "punct":
            add(Token("punct", _DIGRAPHS.get(spelled, spelled), line, gap))
        else:
            add(Token(kind or "punct", spelled, line, gap))
        if kind in _MULTILINE:
            line += spelled.count("\n")
        gap = line_start = False
    if in_directive:
        add(Token("eol", "", line))
    return tokens


_ESCAPE_RE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]+)|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b"}


def unescape(body: str) -> str:
    """The characters a literal's escape sequences stand for (``\\x2eincbin`` is ``.incbin``)."""
    if "\\" not in body:
        return body

    def one(m: re.Match[str]) -> str:
        octal, hexa, short, long_, other = m.groups()
        if octal is not None:
            return chr(int(octal, 8))
        number = hexa or short or long_
        if number is not None:
            return chr(min(int(number, 16), 0x10FFFF))
        return _SIMPLE_ESCAPES.get(other, other)

    return _ESCAPE_RE.sub(one, body)


# -- walking tokens ---------------------------------------------------------------------------------------


def directives(tokens: Sequence[Token]) -> Iterator[tuple[int, int]]:
    """(index of the ``hash``, index of its ``eol``) of every directive in ``tokens``."""
    i = 0
    while i < len(tokens):
        if tokens[i].kind == "hash":
            j = i
            while j < len(tokens) and tokens[j].kind != "eol":
                j += 1
            yield i, j
            i = j
        i += 1


def code(tokens: Sequence[Token]) -> Iterator[tuple[int, Token]]:
    """(index, token) of the tokens outside directives."""
    in_directive = False
    for i, tok in enumerate(tokens):
        in_directive = (in_directive or tok.kind == "hash") and tok.kind != "eol"
        if not in_directive and tok.kind != "eol":
            yield i, tok


class Stream(list[Token]):
    """A source's tokens after preprocessing, with its ``()``, ``[]`` and ``{}`` matched once: the rules look
    brackets up at many places, and a hostile file of nested brackets must not make that quadratic."""

    def __init__(self, tokens: Sequence[Token]) -> None:
        super().__init__(tokens)
        self.pairs: dict[int, int] = {}
        stack: list[int] = []
        for k, tok in enumerate(self):
            if tok.text in ("(", "[", "{"):
                stack.append(k)
            elif tok.text in (")", "]", "}") and stack:
                start = stack.pop()
                self.pairs[start] = k
                self.pairs[k] = start
        self.stops = [len(self)] * (len(self) + 1)  # the next `;` or directive at or after each index
        for k in range(len(self) - 1, -1, -1):
            self.stops[k] = k if self[k].text == ";" or self[k].kind == "hash" else self.stops[k + 1]


_ANGLE_REACH = 256
"""How far template brackets are followed (``<`` is also less-than; a real argument list is shorter)."""


def closing(tokens: Sequence[Token], i: int) -> int:
    """Index of the bracket that closes the one at ``i`` (``len(tokens)`` when unclosed)."""
    if isinstance(tokens, Stream) and tokens[i].text != "<":
        return tokens.pairs.get(i, len(tokens))
    pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
    opener, closer, depth = tokens[i].text, pairs[tokens[i].text], 0
    stop = min(len(tokens), i + _ANGLE_REACH) if opener == "<" else len(tokens)
    for k in range(i, stop):
        text = tokens[k].text
        if text == opener:
            depth += 1
        elif text == closer or (opener == "<" and text == ">>"):
            depth -= 2 if text == ">>" else 1
            if depth <= 0:
                return k
        elif opener == "<" and text in (";", "{", "}"):
            return len(tokens)
    return len(tokens)


def opening(tokens: Sequence[Token], i: int) -> int:
    """Index of the bracket that opens the one that closes at ``i`` (-1 when unopened)."""
    if isinstance(tokens, Stream) and tokens[i].text not in (">", ">>"):
        return tokens.pairs.get(i, -1)
    pairs = {")": "(", "]": "[", "}": "{", ">": "<", ">>": "<"}
    closer, depth = tokens[i].text, 0
    opener = pairs[closer]
    stop = max(-1, i - _ANGLE_REACH) if opener == "<" else -1
    for k in range(i, stop, -1):
        text = tokens[k].text
        if text == closer or (opener == "<" and text in (">", ">>")):
            depth += 2 if text == ">>" else 1
        elif text == opener:
            depth -= 1
            if depth <= 0:
                return k
        elif opener == "<" and text in (";", "{", "}"):
            return -1
    return -1


def chain_before(tokens: Sequence[Token], end: int) -> tuple[int, list[str]]:
    """(start index, names) of the ``a::b<...>::c`` chain whose last token is at ``end``; template
    arguments are skipped and their names not included."""
    names: list[str] = []
    k = end
    while k >= 0:
        tok = tokens[k]
        if tok.text in (">", ">>"):
            k = opening(tokens, k) - 1
            continue
        if tok.kind != "id":
            break
        names.append(tok.text)
        if k >= 1 and tokens[k - 1].text == "::":
            k -= 2
            continue
        k -= 1
        break
    start = k + 1
    while start < len(tokens) and tokens[start].text in ("::",):
        start += 1
    return start, names[::-1]


def chain_after(tokens: Sequence[Token], i: int) -> tuple[list[str], int]:
    """(names, index after the chain) of the ``a::b::c`` chain starting at ``i`` (a leading ``::`` skipped)."""
    k = i + 1 if i < len(tokens) and tokens[i].text == "::" else i
    names: list[str] = []
    while k < len(tokens) and tokens[k].kind == "id":
        names.append(tokens[k].text)
        if k + 2 < len(tokens) and tokens[k + 1].text == "::" and tokens[k + 2].kind == "id":
            k += 2
            continue
        k += 1
        break
    return names, k
