"""A small EDN reader and writer for what Jepsen histories use.

Supported: maps, vectors, lists, sets, keywords, symbols, strings, characters, integers
(with an optional ``N``), floats (with an optional ``M``), ratios, ``nil``, ``true``,
``false``, comments, ``#_`` discards and tagged elements. Tags (``#inst``, record tags such
as ``#jepsen.history.Op{...}``) are read as their untagged value: a history checker only
needs the data. Vectors and lists become tuples so they can be map keys and model states.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any


class EdnError(ValueError):
    """Malformed EDN, with the line where the problem is."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.reason = message


class Keyword(str):
    """An EDN keyword, e.g. ``:invoke``; compares equal to its name without the colon."""

    __slots__ = ()

    def __repr__(self) -> str:
        return ":" + str.__str__(self)


class Symbol(str):
    """An EDN symbol, e.g. ``foo/bar``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__str__(self)


_DELIMITERS = set(' \t\r\n,;()[]{}"#')
_NUMBER = re.compile(r"[+-]?\d+(?:/\d+|(?:\.\d*)?(?:[eE][+-]?\d+)?)?[NM]?")
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_NAMED_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r",
                "backspace": "\b", "formfeed": "\f"}
_CLOSERS = {"(": ")", "[": "]", "{": "}"}
_END = object()  # returned by _read when a closing delimiter ends a collection
_DISCARDED = object()  # returned by _read_one for a `#_` discard: read on
# Collections and tags nest at most this deep: the reader (and whatever walks the value after
# it) recurses once per level, and Python's stack ends near 1000 frames, with a traceback.
# Jepsen's ops nest a handful of levels.
MAX_DEPTH = 100


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.depth = 0

    def error(self, message: str) -> EdnError:
        return EdnError(message, self.line)

    def skip_space(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c == "\n":
                self.line += 1
            elif c == ";":
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end
                continue
            elif not (c.isspace() or c == ","):
                return
            self.pos += 1

    def at_end(self) -> bool:
        self.skip_space()
        return self.pos >= len(self.text)

    def read(self, closer: str | None = None) -> Any:
        """Read one value; return _END when ``closer`` is found instead."""
        if self.depth >= MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH} levels")
        self.depth += 1
        try:
            while (value := self._read_one(closer)) is _DISCARDED:
                pass  # a loop, not a recursion: a long run of discards is not nesting
            return value
        finally:
            self.depth -= 1

    def _read_one(self, closer: str | None) -> Any:
        self.skip_space()
        if self.pos >= len(self.text):
            raise self.error("unexpected end of input" + (f", expected {closer!r}" if closer else ""))
        c = self.text[self.pos]
        if c in ")]}":
            if c != closer:
                raise self.error(f"unexpected {c!r}")
            self.pos += 1
            return _END
        if c in _CLOSERS:
            self.pos += 1
            items = self.read_until(_CLOSERS[c])
            return self.make_map(items) if c == "{" else tuple(items)
        if c == '"':
            return self.read_string()
        if c == "\\":
            return self.read_char()
        if c == "#":
            return self.read_dispatch(closer)
        return self.read_atom()

    def read_until(self, closer: str) -> list[Any]:
        items = []
        while (item := self.read(closer)) is not _END:
            items.append(item)
        return items

    def make_map(self, items: list[Any]) -> dict[Any, Any]:
        if len(items) % 2:
            raise self.error("map literal with an odd number of forms")
        try:
            return dict(zip(items[::2], items[1::2], strict=True))
        except TypeError as e:  # an unhashable key such as a map
            raise self.error(f"unusable map key: {e}") from None

    def read_dispatch(self, closer: str | None) -> Any:
        nxt = self.text[self.pos + 1 : self.pos + 2]
        if nxt == "{":
            self.pos += 2
            try:
                return frozenset(self.read_until("}"))
            except TypeError as e:
                raise self.error(f"unusable set element: {e}") from None
        if nxt == "_":
            self.pos += 2
            if self.read() is _END:
                raise self.error("#_ without a form to discard")
            return _DISCARDED
        self.pos += 1
        tag = self.read_atom()
        if not isinstance(tag, Symbol):
            raise self.error(f"bad tag #{tag!r}")
        value = self.read()
        if value is _END:
            raise self.error(f"tag #{tag} without a value")
        return value

    def read_string(self) -> str:
        text, out = self.text, []
        i = self.pos + 1
        while True:
            j = i
            while j < len(text) and text[j] not in '"\\':
                j += 1
            if j >= len(text):
                raise self.error("unterminated string")
            out.append(text[i:j])
            self.line += text.count("\n", i, j)
            if text[j] == '"':
                self.pos = j + 1
                return "".join(out)
            esc = text[j + 1 : j + 2]
            if esc == "u":
                code = text[j + 2 : j + 6]
                if not re.fullmatch(r"[0-9a-fA-F]{4}", code):
                    raise self.error(f"bad unicode escape \\u{code}")
                out.append(chr(int(code, 16)))
                i = j + 6
            elif esc in _ESCAPES:
                out.append(_ESCAPES[esc])
                i = j + 2
            else:
                raise self.error(f"bad string escape \\{esc}")

    def read_char(self) -> str:
        start = self.pos + 1
        end = start + 1  # the first character is taken even if it is a delimiter, e.g. \(
        while end < len(self.text) and self.text[end] not in _DELIMITERS:
            end += 1
        name = self.text[start:end]
        self.pos = end
        if len(name) == 1:
            return name
        if name in _NAMED_CHARS:
            return _NAMED_CHARS[name]
        if re.fullmatch(r"u[0-9a-fA-F]{4}", name):
            return chr(int(name[1:], 16))
        raise self.error(f"bad character literal \\{name}")

    def read_atom(self) -> Any:
        start = self.pos
        end = start
        while end < len(self.text) and self.text[end] not in _DELIMITERS:
            end += 1
        token = self.text[start:end]
        self.pos = end
        if not token:
            raise self.error(f"unexpected {self.text[start]!r}")
        if token[0].isdigit() or (token[0] in "+-" and token[1:2].isdigit()):
            return self.number(token)
        if token[0] == ":":
            if len(token) == 1:
                raise self.error("empty keyword")
            return Keyword(token[1:])
        return {"nil": None, "true": True, "false": False}.get(token, Symbol(token))

    def number(self, token: str) -> int | float | Fraction:
        if not _NUMBER.fullmatch(token):
            raise self.error(f"bad number {token!r}")
        body = token.rstrip("NM")
        if "/" in body:
            return Fraction(body)
        if any(c in body for c in ".eE") or token.endswith("M"):
            return float(body)
        return int(body)


def loads(text: str) -> Any:
    """Read exactly one EDN value from ``text``."""
    reader = _Reader(text)
    value = reader.read()
    if value is _END:
        raise reader.error("unexpected closing delimiter")
    if not reader.at_end():
        raise reader.error("trailing data after the value")
    return value


def iter_values(text: str) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, value)`` for each top-level value in ``text``."""
    reader = _Reader(text)
    while not reader.at_end():
        line = reader.line
        value = reader.read()
        if value is _END:
            raise reader.error("unexpected closing delimiter")
        yield line, value


def dumps(value: Any) -> str:
    """Write ``value`` as EDN (strings stay strings; use Keyword for keywords)."""
    if value is None:
        return "nil"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Keyword):
        return ":" + str.__str__(value)
    if isinstance(value, Symbol):
        return str.__str__(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{dumps(k)} {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + " ".join(dumps(v) for v in value) + "]"
    if isinstance(value, set | frozenset):
        return "#{" + " ".join(dumps(v) for v in value) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as EDN")
