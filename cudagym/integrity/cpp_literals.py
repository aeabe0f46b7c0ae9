"""The C++ checks on data: string literals, brace initialisers, asm statements and attributes.

Strings are judged by their decoded content after adjacent literals are joined (``"\\x2einc" "bin"`` is
``.incbin``). A brace initialiser of numbers is a lookup table unless it looks like a binary: bytes that
start with an ELF, cubin or fatbin header, more than :data:`MAX_BYTE_TABLE` byte values (``xxd -i`` output),
or more than :data:`MAX_TABLE` numbers of any kind. Float tables and integer tables of moderate size
(``static const float table[1024] = {...}``) are fine. An asm statement's text must be a literal and may
hold no directive that pulls a file in (``.incbin``), emits raw bytes (``.byte``) or defines symbols or
sections, and no instruction that enters the kernel; asm labels and ``alias``/``weakref`` attributes, which
rename declarations, and ``section`` attributes are refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from cudagym.integrity import vocabulary as V
from cudagym.integrity.cpp_tokens import Stream, Token, closing, opening

MAX_BYTE_TABLE = 1024
"""Byte values (``unsigned char``/``uint8_t`` elements, or hex and character literals in 0..255) a table may
hold; a longer one is an embedded binary."""

MAX_TABLE = 65536
"""Numbers any initialiser may hold."""

_PTX_RE = re.compile(r"\.version\s+\d|\.target\s+sm_|\.entry\s|\.visible\s")
_BLOB_RE = re.compile(r"[A-Za-z0-9+/=]{256,}|(?:[0-9a-fA-F]{2}){128,}|(?:\\x[0-9a-fA-F]{2}){64,}|(?:\\[0-7]{3}){64,}")
_BINARY_PATH_RE = re.compile(r"\.(so(\.\d+)*|cubin|fatbin|ptx|o|a|dll|dylib)$")
_MAGICS: tuple[tuple[int, ...], ...] = ((0x7F, 0x45, 0x4C, 0x46), (0x50, 0xED, 0x55, 0xBA), (0xB1, 0x43, 0x62, 0x46))
"""First bytes of an ELF image (cubins are ELF), and of a fatbin and its wrapper."""
_MAGIC_WORDS = frozenset({0x464C457F, 0x7F454C46, 0xBA55ED50, 0x466243B1})
"""The same headers packed into 32-bit words."""
_BYTE_TYPES = frozenset({"char", "uint8_t", "int8_t", "u8", "byte", "uchar", "BYTE", "__nv_fp8_e4m3"})
_ASM_DIRECTIVE_RE = re.compile(r"(?:^|[\n;{}]|\\n)\s*(?:[A-Za-z_.$][\w.$]*:\s*)?\.([A-Za-z0-9_]+)")
_ASM_SYSCALL_RE = re.compile(V.ASM_SYSCALL_RE)
ASM_KEYWORDS = frozenset({"asm", "__asm__", "__asm"})
_ASM_QUALIFIERS = frozenset({"volatile", "__volatile__", "__volatile", "goto", "inline", "__inline__"})
_KEYWORDS_BEFORE_PARENS = frozenset({"if", "while", "for", "switch", "return", "sizeof", "catch", "decltype"})
_INT_RE = re.compile(r"^(0[xX][0-9a-fA-F']+|0[bB][01']+|0[0-7']*|[1-9][0-9']*)[uUlLzZ]*$")


def _number(text: str) -> int | float | None:
    """The value of an integer literal, a float marker (``0.5``) for floating ones, None if neither."""
    match = _INT_RE.match(text)
    if match:
        digits = match.group(1).replace("'", "")
        if digits[:2].lower() == "0x":
            return int(digits[2:], 16)
        if digits[:2].lower() == "0b":
            return int(digits[2:], 2)
        return int(digits, 8) if len(digits) > 1 and digits[0] == "0" else int(digits)
    return 0.5 if re.match(r"^[0-9.][0-9a-fA-FxXpP.eE+'-]*$", text.rstrip("fFlL")) else None


class LiteralChecks:
    """Rules on literal data, asm statements and attributes; violations go to ``flag(rule, token, what)``,
    and the symbols asm labels and alias attributes name to ``symbol(token, name)`` (the rules on names;
    it returns whether one fired)."""

    def __init__(self, flag: Callable[[str, Token, str], None], symbol: Callable[[Token, str], bool]) -> None:
        self.flag = flag
        self.symbol = symbol

    def literal(self, tok: Token) -> None:
        """A string literal (joined with its neighbours), by its decoded content."""
        self.text(tok, tok.decoded(), tok.text)

    def text(self, tok: Token, text: str, raw: str = "") -> None:
        """Rules on a string's content: PTX, ``.incbin``, binary blobs, prebuilt-binary and /proc paths."""
        unprintable = sum(not (ch.isprintable() or ch in "\n\t\r") for ch in text)
        if _PTX_RE.search(text) or ".incbin" in text:
            self.flag("binary_loading", tok, "a string holds PTX or an .incbin directive (build kernels from source)")
        elif text.startswith("\x7fELF") or unprintable >= 32 or _BLOB_RE.search(raw) or _BLOB_RE.search(text):
            self.flag("binary_loading", tok, "a string holds an embedded binary blob")
        elif _BINARY_PATH_RE.search(text.strip()) and " " not in text.strip():
            self.flag("binary_loading", tok, f'the path "{text[:80]}" names a prebuilt binary')
        if text.startswith(("/proc/", "/dev/shm")):
            self.flag("introspection", tok, f'the path "{text[:80]}" reads process or shared-memory state')

    def asm(self, tokens: Sequence[Token], i: int) -> None:
        """``asm("...")``: the text must be a literal; in a statement no directive may pull files in, emit
        raw bytes or define symbols, and no instruction may enter the kernel; as a label it renames a
        declaration, which the checks do not follow."""
        k = i + 1
        while k < len(tokens) and tokens[k].text in _ASM_QUALIFIERS:
            k += 1
        if k >= len(tokens) or tokens[k].text != "(":
            return
        inner = tokens[k + 1 : closing(tokens, k)]
        tok = tokens[i]
        if not inner or inner[0].kind != "str":
            self.flag("checkable", tok, "an asm statement whose text is not a string literal (write it out)")
            return
        if self.is_label(tokens, i) and k == i + 1 and len(inner) == 1:
            self.symbol_or_rename(tok, inner[0].decoded())
            return
        self.asm_text(tok, inner[0].decoded())

    def is_label(self, tokens: Sequence[Token], i: int) -> bool:
        """Whether the asm at ``i`` follows a declarator (``void f(int) asm("name");``)."""
        prev = tokens[i - 1] if i > 0 else None
        if prev is None:
            return False
        if prev.text == ")":
            start = opening(tokens, i - 1)
            callee = tokens[start - 1] if start > 0 else None
            return callee is not None and callee.kind == "id" and callee.text not in _KEYWORDS_BEFORE_PARENS
        return prev.text == "]" or (prev.kind == "id" and prev.text not in ("else", "do", "return"))

    def attribute(self, tokens: Sequence[Token], i: int) -> None:
        """``__attribute__((...))``: each attribute it lists."""
        if i + 1 >= len(tokens) or tokens[i + 1].text != "(":
            return
        end = closing(tokens, i + 1)
        for k in range(i + 2, end):
            if tokens[k].kind == "id" and tokens[k - 1].text in ("(", ","):
                self.attribute_name(tokens, k + 1, tokens[k].text)

    def attribute_name(self, tokens: Sequence[Token], j: int, name: str) -> None:
        """One attribute (``section``, ``alias``, ``weakref``, ...) whose arguments start at ``j``."""
        bare = name.strip("_")
        tok = tokens[j - 1] if j > 0 else tokens[0]
        if bare == "section":
            self.flag("binary_loading", tok, "places code or data into a section of its own (__attribute__ section)")
        elif bare in V.SYMBOL_ATTRIBUTES and j + 1 < len(tokens) and tokens[j].text == "(":
            argument = tokens[j + 1]
            self.symbol_or_rename(tok, argument.decoded() if argument.kind == "str" else argument.text)

    def symbol_or_rename(self, tok: Token, name: str) -> None:
        """An asm label or an alias/weakref attribute: the symbol's own rules, and renaming refused."""
        if not self.symbol(tok, name):
            what = f'binds a declaration to the symbol "{name[:60]}" (call functions by their own names)'
            self.flag("patching", tok, what)

    def asm_text(self, tok: Token, text: str) -> None:
        """The text of an asm statement: no directive that pulls files in, emits raw bytes or defines
        symbols and sections, and no instruction that enters the kernel."""
        for match in _ASM_DIRECTIVE_RE.finditer(text):
            directive = match.group(1)
            if directive in V.ASM_FILE_DIRECTIVES:
                self.flag("binary_loading", tok, f"an asm .{directive} pulls a file into the build")
            elif directive in V.ASM_DATA_DIRECTIVES:
                self.flag("binary_loading", tok, f"an asm .{directive} emits raw code or data (an embedded binary)")
            elif directive in V.ASM_SYMBOL_DIRECTIVES:
                self.flag("patching", tok, f"an asm .{directive} defines symbols or sections the checks cannot follow")
        if _ASM_SYSCALL_RE.search(text):
            self.flag("concurrency", tok, "an asm instruction enters the kernel directly (a system call)")

    def initializer(self, tokens: Sequence[Token], i: int) -> int:
        """A brace initialiser of numbers, characters or strings at ``i``: a table, or an embedded binary.
        Returns the index of its closing brace (nested braces are part of it), or ``i`` for a block."""
        end = closing(tokens, i)
        stop = (
            tokens.stops[i]
            if isinstance(tokens, Stream)
            else next(
                (k for k in range(i, len(tokens)) if tokens[k].text == ";" or tokens[k].kind == "hash"), len(tokens)
            )
        )
        if stop < end:
            return i  # a block of statements, not an initialiser
        body = tokens[i + 1 : end]
        numbers: list[int | float] = []
        chars: list[int] = []
        strings: list[Token] = []
        hex_or_char = 0
        for k, tok in enumerate(body):
            if tok.kind == "num":
                value = _number(tok.text)
                if value is not None:
                    numbers.append(-value if k > 0 and body[k - 1].text == "-" else value)
                    hex_or_char += tok.text[:2].lower() == "0x"
            elif tok.kind == "char":
                decoded = tok.decoded()
                chars.append(ord(decoded[0]) if decoded else 0)
                numbers.append(chars[-1])
                hex_or_char += 1
            elif tok.kind == "str":
                strings.append(tok)
        if strings and not numbers:
            self.strings(tokens[i], strings)
        elif chars and all(isinstance(v, int) and 0 <= v < 0x110000 for v in numbers):
            self.text(tokens[i], "".join(chr(int(v)) for v in numbers).rstrip("\0"))
        if numbers:
            self.numbers(tokens, i, numbers, hex_or_char)
        return end

    def numbers(self, tokens: Sequence[Token], i: int, numbers: list[int | float], hex_or_char: int) -> None:
        """A table of numbers: refused when it starts like a binary image or holds too many bytes."""
        at = tokens[i]
        head = tuple(int(v) & 0xFF if isinstance(v, int) else -1 for v in numbers[:4])
        first = numbers[0]
        if head in _MAGICS or (isinstance(first, int) and first & 0xFFFFFFFF in _MAGIC_WORDS):
            self.flag("binary_loading", at, "an initializer that starts like an ELF, cubin or fatbin image")
            return
        byte_valued = all(isinstance(v, int) and -128 <= v <= 255 for v in numbers)
        declared_bytes = bool({t.text for t in _declaration_before(tokens, i)} & _BYTE_TYPES)
        if byte_valued and len(numbers) > MAX_BYTE_TABLE and (declared_bytes or hex_or_char * 2 > len(numbers)):
            self.flag("binary_loading", at, f"an initializer of {len(numbers)} bytes (an embedded binary?)")
        elif len(numbers) > MAX_TABLE:
            self.flag("binary_loading", at, f"an initializer of {len(numbers)} numbers (an embedded binary?)")

    def strings(self, at: Token, strings: list[Token]) -> None:
        """An array of strings: a blob split into pieces is still a blob."""
        total = "".join(t.decoded() for t in strings)
        if len(total) >= 1024 and re.fullmatch(r"[A-Za-z0-9+/=\s]+", total):
            self.flag("binary_loading", at, f"an initializer of strings holding {len(total)} encoded bytes (a blob)")


def _declaration_before(tokens: Sequence[Token], i: int) -> list[Token]:
    """The tokens of the declaration an initialiser at ``i`` belongs to (back to the previous statement)."""
    k = i - 1
    while k >= 0 and tokens[k].text not in (";", "{", "}") and i - k < 24:
        k -= 1
    return list(tokens[k + 1 : i])
