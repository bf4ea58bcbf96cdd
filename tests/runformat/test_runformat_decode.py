"""runformat's decoder: msgspec first, Python's json for what msgspec refuses, so every reader
gets exactly what json.loads would give (values, types, key order) at about half the cost."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from runformat import Tally, history
from runformat.jsonl import LONG_LINE

# JSON values with what tells decoders apart: big and negative integers, floats at the
# edges of a double, escapes, non-ASCII and astral characters, nesting.
_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=12)
# What a mutation inserts: JSON's own characters, what json takes and msgspec does not (NaN,
# Infinity, lone surrogates, overflowing exponents) and what neither should take.
_pieces = st.sampled_from(list('{}[]",:.-+eE0123456789 \t\r\\/ubfnrt') + [
    "\x00", "\x01", "\x1f", "\x7f", "é", "\ufeff", "\u2028", "true", "null", "NaN", "Infinity",
    "-Infinity", "\\ud800", "\\udc00", "1e400", "123456789012345678901234567890"])


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (float bits and dict key order too)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a.hex() == b.hex()
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@st.composite
def _texts(draw: st.DrawFn) -> str:
    """A JSON text as some writer might lay it out, then possibly damaged in a few places."""
    text = json.dumps(draw(_values), ensure_ascii=draw(st.booleans()),
                      separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 2))
        text = text[:at] + draw(_pieces) + text[at + cut:]
    return text


@settings(max_examples=1000, deadline=None)
@given(_texts())
def test_what_msgspec_takes_json_takes_to_the_same_value(text: str) -> None:
    try:
        fast = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return  # the reader asks json then (the next test)
    assert _same(fast, json.loads(text)), text


def test_lines_msgspec_refuses_are_read_as_json_reads_them(tmp_path: Path) -> None:
    lines = ['{"time": 1, "value": NaN}', '{"time": 2, "value": [Infinity, -Infinity]}',
             '{"time": 3, "value": 1e400}', '{"time": 4, "value": "\\ud800"}',
             '  {"time": 5, "value": 18446744073709551616}', '{"time": 6, "value": [1,]}',
             '{"time": 7}{"time": 8}']
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n")
    tally = Tally("history.jsonl")
    ops = list(history(path, tally))
    for op, line in zip(ops, lines[:5], strict=True):
        assert _same(op, json.loads(line))
    assert [op["time"] for op in ops] == [1, 2, 3, 4, 5]
    assert tally.named == ["history.jsonl line 6: invalid JSON (Expecting value)",
                           "history.jsonl line 7: invalid JSON (Extra data)"]


def test_a_long_line_is_read_and_the_collector_left_as_it_was(tmp_path: Path) -> None:
    records = [[i, i * 7] for i in range(LONG_LINE // 8)]
    line = json.dumps({"time": 9, "f": "final-poll", "records": records})
    assert len(line) > LONG_LINE
    path = tmp_path / "history.jsonl"
    path.write_text('{"time": 1}\n' + line + "\n")
    assert [op["time"] for op in history(path)] == [1, 9] and gc.isenabled()
    assert list(history(path))[1]["records"] == records
    gc.disable()
    try:
        assert len(list(history(path))) == 2 and not gc.isenabled()
    finally:
        gc.enable()
