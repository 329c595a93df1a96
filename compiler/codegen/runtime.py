"""The runtime kernels a generated file uses: runtime_c's headers, cut down to what its code reaches.

Takes the headers' texts (in the order they are pasted) and the generated code that follows them;
gives the runtime text with only the top-level items that code reaches, by name, transitively:
function definitions, tables, types, macros and the top-level macro calls that define functions,
with the preprocessor conditionals around them kept balanced. Kept items are the headers' text byte
for byte and in their order, so a kept kernel is exactly the kernel every other model pastes; only
the headers' `#include "et_*.h"` lines go, everywhere (the file they name is pasted in too).

Names are taken from C tokens (comments and string literals skipped), so a name a kernel only
mentions in a comment keeps nothing; anything the parser cannot name (a `#pragma`, a system
`#include`) is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple
from collections.abc import Iterator

_TOKEN = re.compile(
    r"""
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<directive>^[ \t]*\#(?:\\\n|/\*.*?\*/|[^\n])*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>\.?\d(?:[eEpP][+-]|[\w.])*)
  | (?P<newline>\n)
  | (?P<space>[ \t\r\f\v]+|\\\n)
  | (?P<punct>\#\#|.)
""",
    re.M | re.S | re.X,
)

_NOT_CODE = re.compile(r"""/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.S)
_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_DIRECTIVE = re.compile(r"[ \t]*#[ \t]*(\w*)")
_RUNTIME_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"et_\w+\.h"[^\n]*\n', re.M)
_MACRO = re.compile(r"[ \t]*#[ \t]*define[ \t]+(\w+)(\(([^)]*)\))?(.*)", re.S)
_UNDEF = re.compile(r"[ \t]*#[ \t]*undef[ \t]+(\w+)")
_BLANK = frozenset({"space", "newline", "comment"})
_KEYWORDS = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
    volatile while _Bool __attribute__ __restrict__ __inline__ __extension__""".split()
)


# function-like macro -> (its parameters, its body)
_Macros = dict[str, tuple[list[str], str]]


class _Token(NamedTuple):
    kind: str
    text: str
    start: int
    end: int


@dataclass(eq=False)
class _Group:
    """An #if ... #endif at the top level: its directive lines are kept when anything inside is."""

    parent: _Group | None
    directives: list[_Atom] = field(default_factory=list)


@dataclass(eq=False)
class _Atom:
    """A stretch of header text kept or dropped as one: an item with the comments and blank lines
    before it, or one directive line of a group."""

    start: int
    end: int
    group: _Group | None
    defines: frozenset[str] = frozenset()
    refs: frozenset[str] = frozenset()
    always: bool = False
    undefines: str | None = None


def _tokens(text: str) -> list[_Token]:
    """C tokens of `text`, whitespace and comments included; a preprocessor line is one token."""
    return [_Token(str(m.lastgroup), m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def identifiers(text: str) -> frozenset[str]:
    """The identifiers the C text uses, outside comments and string literals (directives included)."""
    return frozenset(_IDENTIFIER.findall(_NOT_CODE.sub(" ", text)))


def _identifiers(toks: list[_Token]) -> frozenset[str]:
    names: set[str] = set()
    for token in toks:
        if token.kind == "ident":
            names.add(token.text)
        elif token.kind == "directive":
            names |= identifiers(_directive_body(token.text))
    return frozenset(names)


def _directive_body(text: str) -> str:
    """A directive's text after its `#name`, continuation lines joined."""
    joined = text.replace("\\\n", " ")
    match = _DIRECTIVE.match(joined)
    return joined[match.end() :] if match else joined


def _directive_name(text: str) -> str:
    match = _DIRECTIVE.match(text)
    return match.group(1) if match else ""


def strip_runtime_includes(header: str) -> str:
    """The header without its `#include "et_*.h"` lines: in a generated file those headers are pasted."""
    return _RUNTIME_INCLUDE.sub("", header)


def used_runtime(headers: tuple[str, ...], code: str) -> str:
    """The runtime section for `code`: each header with only the items `code` reaches, each followed
    by a blank line as when all are pasted; a header with nothing reached is left out whole."""
    parsed = _parse_all(tuple(strip_runtime_includes(h) for h in headers))
    kept = _closure([a for _, atoms in parsed for a in atoms], identifiers(code))
    sections = []
    for text, atoms in parsed:
        chosen = [text[a.start : a.end] for a in atoms if a in kept]
        if chosen:
            sections.append("".join(chosen) + "\n")
    return "".join(sections)


def every_runtime(headers: tuple[str, ...]) -> str:
    """The runtime section with every kernel, as used_runtime lays it out."""
    return "".join(strip_runtime_includes(h) + "\n" for h in headers)


@lru_cache(maxsize=4)
def _parse_all(headers: tuple[str, ...]) -> list[tuple[str, list[_Atom]]]:
    macros: _Macros = {}
    return [(text, _parse(text, macros)) for text in headers]


def _parse(text: str, macros: _Macros) -> list[_Atom]:
    """The header's atoms in order, covering its text from start to end; `macros` collects the
    function-like macros defined so far (a later header may call an earlier one's)."""
    toks = _tokens(text)
    atoms: list[_Atom] = []
    group: _Group | None = None
    start = i = 0
    while i < len(toks):
        if toks[i].kind in _BLANK:
            i += 1
            continue
        if toks[i].kind == "directive":
            atom, group = _directive(toks[i], start, group, macros)
            last = i
        else:
            last, defines, refs = _item(toks, i, macros)
            atom = _Atom(start, 0, group, defines, refs)
        i = _line_end(toks, last)
        atom.end = start = toks[i - 1].end
        atoms.append(atom)
    if group is not None:
        raise ValueError("unbalanced #if in a runtime header")
    if atoms:
        atoms[-1].end = len(text)
    return atoms


def _line_end(toks: list[_Token], last: int) -> int:
    """The index after the item ending at `last`: past the rest of its line (spaces, a comment)
    and the newline that ends it."""
    i = last + 1
    while i < len(toks) and toks[i].kind in ("space", "comment"):
        i += 1
    if i < len(toks) and toks[i].kind == "newline":
        i += 1
    return i


def _code(toks: list[_Token], i: int) -> Iterator[int]:
    """Indices of the tokens from toks[i] on that are not whitespace or comments."""
    return (k for k in range(i, len(toks)) if toks[k].kind not in _BLANK)


def _directive(token: _Token, start: int, group: _Group | None, macros: _Macros) -> tuple[_Atom, _Group | None]:
    """A top-level directive line as an atom, and the group that holds what follows it."""
    name = _directive_name(token.text)
    refs = identifiers(_directive_body(token.text))
    if name in ("if", "ifdef", "ifndef"):
        group = _Group(group)
    if name in ("if", "ifdef", "ifndef", "elif", "else", "endif"):
        if group is None:
            raise ValueError(f"#{name} without #if in a runtime header")
        atom = _Atom(start, 0, group.parent, refs=refs)
        group.directives.append(atom)
        return atom, (group.parent if name == "endif" else group)
    define, undef = _MACRO.match(token.text.replace("\\\n", " ")), _UNDEF.match(token.text)
    if define:
        macro, params, param_list, body = define.groups()
        names = [p.strip() for p in param_list.split(",")] if params else []
        if params:
            macros[macro] = (names, body)
        return _Atom(start, 0, group, frozenset({macro}), identifiers(body) - {macro, *names}), group
    if undef:
        return _Atom(start, 0, group, undefines=undef.group(1)), group
    return _Atom(start, 0, group, refs=refs, always=True), group


def _item(toks: list[_Token], i: int, macros: _Macros) -> tuple[int, frozenset[str], frozenset[str]]:
    """A C item starting at toks[i]: (index of its last token, names it defines, names it uses)."""
    code = _code(toks, i + 1)
    if toks[i].text in macros and toks[next(code, i)].text == "(":
        return _macro_call(toks, i, macros)
    depth, saw_init, prev, head = 0, False, "", []
    skipping: list[bool] = []
    for k in _code(toks, i):
        token = toks[k]
        if token.kind == "directive":
            skipping = _skip_branches(token.text, skipping)
            continue
        if any(skipping) or token.kind != "punct":
            prev = token.text
            head.append(token)
            continue
        if token.text in "([{":
            if token.text == "{" and depth == 0 and prev == ")" and not saw_init:
                last = _matching(toks, k)
                return last, _function_name(head) | _inner_macros(toks, k, last), _names(toks, i, last)
            depth += 1
        elif token.text in ")]}":
            depth -= 1
        elif token.text == "=" and depth == 0:
            saw_init = True
        elif token.text == ";" and depth == 0:
            return k, _declared(head), _names(toks, i, k)
        prev = token.text
        head.append(token)
    raise ValueError(f"unterminated item in a runtime header: {toks[i].text} ...")


def _skip_branches(directive: str, skipping: list[bool]) -> list[bool]:
    """Brackets are counted in an inner #if's first branch only: its #elif/#else branches repeat them."""
    name = _directive_name(directive)
    if name in ("if", "ifdef", "ifndef"):
        return skipping + [False]
    if name in ("elif", "else") and skipping:
        return skipping[:-1] + [True]
    if name == "endif" and skipping:
        return skipping[:-1]
    return skipping


def _matching(toks: list[_Token], at: int) -> int:
    """The index of the bracket closing the one at toks[at] (counted in first #if branches only)."""
    depth, skipping = 0, list[bool]()
    for k in _code(toks, at):
        token = toks[k]
        if token.kind == "directive":
            skipping = _skip_branches(token.text, skipping)
        elif token.kind == "punct" and not any(skipping):
            depth += token.text in "([{"
            depth -= token.text in ")]}"
            if depth == 0:
                return k
    raise ValueError(f"unbalanced brackets in a runtime header at {toks[at].text!r}")


def _inner_macros(toks: list[_Token], first: int, last: int) -> frozenset[str]:
    """Macros a function's body defines and leaves defined: a later function may use them. Those
    it #undefs again are its own (other functions reuse their names for macros of their own)."""
    defined: set[str] = set()
    for token in toks[first : last + 1]:
        if token.kind == "directive" and (define := _MACRO.match(token.text)):
            defined.add(define.group(1))
        elif token.kind == "directive" and (undef := _UNDEF.match(token.text)):
            defined.discard(undef.group(1))
    return frozenset(defined)


def _names(toks: list[_Token], first: int, last: int) -> frozenset[str]:
    return _identifiers(toks[first : last + 1])


def _function_name(head: list[_Token]) -> frozenset[str]:
    """The name of a function definition: the identifier before the first parenthesis of its head."""
    texts = [t.text for t in head]
    at = texts.index("(")
    return frozenset({texts[at - 1]}) if at else frozenset()


def _declared(head: list[_Token]) -> frozenset[str]:
    """Names a declaration introduces: declarators (an identifier before `[`, `=`, `;`, `,`, `(` or an
    attribute at the outer level), struct/union/enum tags and enumerators."""
    texts = [t.text for t in head] + [";"]
    names, depth, enum = set(), 0, False
    for n, token in enumerate(head):
        text = token.text
        if text == "=" and depth == 0:
            break
        depth += text in ("(", "[", "{")
        depth -= text in (")", "]", "}")
        if token.kind != "ident" or text in _KEYWORDS:
            enum |= text == "enum"
            continue
        after, before = texts[n + 1], texts[n - 1] if n else ""
        declarator = after in ("[", "=", ";", ",", "(", "__attribute__") or before in ("struct", "union", "enum")
        enumerator = enum and depth == 1 and before in ("{", ",")
        if (depth == 0 and declarator) or enumerator:
            names.add(text)
    return frozenset(names)


def _macro_call(toks: list[_Token], i: int, macros: _Macros) -> tuple[int, frozenset[str], frozenset[str]]:
    """A top-level call of a function-like macro that defines functions (`ET_DEFINE_X_(et_x_f32, ...)`):
    it defines what its expansion defines."""
    code = _code(toks, i + 1)
    last = _matching(toks, next(code))
    after = next(_code(toks, last + 1), None)
    if after is not None and toks[after].text == ";":
        last = after
    expansion = _expand([t for t in toks[i : last + 1] if t.kind not in _BLANK], macros)
    defined = [a.defines for a in _parse(expansion, dict(macros))]
    return last, frozenset().union(*defined), _names(toks, i, last) | identifiers(expansion)


def _expand(call: list[_Token], macros: _Macros, depth: int = 0) -> str:
    """The macro call's text, expanded (arguments substituted, `##` pasted) until no call of a
    function-like macro heads it: enough to see the names it defines."""
    params, body = macros[call[0].text]
    args, current, level = [], list[str](), 0
    for token in call[2:]:
        if level == 0 and token.text in (",", ")"):
            args.append(" ".join(current))
            current = []
            if token.text == ")":
                break
            continue
        level += token.text in ("(", "[", "{")
        level -= token.text in (")", "]", "}")
        current.append(token.text)
    values = dict(zip(params, args))
    expanded = "".join(values.get(t.text, t.text) if t.kind == "ident" else t.text for t in _tokens(body))
    expanded = re.sub(r"\s*##\s*", "", expanded)
    inner = [t for t in _tokens(expanded) if t.kind not in _BLANK]
    if depth < 8 and len(inner) > 1 and inner[0].text in macros and inner[1].text == "(":
        return _expand(inner, macros, depth + 1)
    return expanded


def _closure(atoms: list[_Atom], roots: frozenset[str]) -> set[_Atom]:
    """The atoms kept: those defining a name reached from `roots`, the directive lines of every group
    holding one, the lines nothing names, and each #undef of a kept macro."""
    defining: dict[str, list[_Atom]] = {}
    for atom in atoms:
        for name in atom.defines:
            defining.setdefault(name, []).append(atom)
    kept: set[_Atom] = set()
    names: set[str] = set()
    pending = list(roots)

    def keep(atom: _Atom) -> None:
        if atom in kept:
            return
        kept.add(atom)
        pending.extend(atom.refs)
        group = atom.group
        while group is not None and group.directives[0] not in kept:
            for line in group.directives:
                kept.add(line)
                pending.extend(line.refs)
            group = group.parent

    for atom in atoms:
        if atom.always:
            keep(atom)
    while pending:
        while pending:
            name = pending.pop()
            if name not in names:
                names.add(name)
                for atom in defining.get(name, ()):
                    keep(atom)
        for atom in atoms:
            if atom.undefines in names and atom not in kept:
                keep(atom)
    return kept
