"""Typed iterators over a run's history.jsonl and events.jsonl, with one malformed-line policy.

    tally = Tally("history.jsonl")
    for op in history(path, tally):          # Op: index, time, process, type, f, ...
        ...
    page.notes += tally.notes()

The policy, the same for every reader of these files:
- a blank line is nothing;
- a line that is not a JSON object with an integer `time` (events: a number, made an integer;
  a node's own event log, before the merge: a number `ts`; a boolean is not one) is malformed: skipped, counted in `tally.malformed`, and the first MAX_NAMED are named
  ("history.jsonl line 7: invalid JSON (Expecting value)");
- a last line without its newline that does not parse is a crash's torn tail: skipped and
  named, but counted in `tally.torn`, not as malformed (a crashed run is not a corrupt one).
A caller that must not go on past a malformed line checks `tally.malformed` and refuses,
naming `tally.named[0]`. The formats are docs/architecture.md ("History") and docs/formats.md.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

MAX_NAMED = 5
# A line this long (a final read's records) is decoded with the garbage collector paused: the
# hundreds of thousands of lists it makes at once would set off full collections, each
# walking the whole heap (on the 1M-op benchmark, about a tenth of the report's pass).
LONG_LINE = 1 << 16


class Op(TypedDict, total=False):
    """One history operation (docs/architecture.md, "History")."""

    index: int
    time: int  # ns since the run started
    process: int | str  # "nemesis" for faults
    type: str  # invoke | ok | fail | info
    f: str  # send | poll | final-poll | start-<kind> | stop-<kind> | stop-all | ...
    partition: int
    value: Any  # a send's integer; a fault's details
    offset: int
    node: int | str
    epoch: int
    records: list[list[int]]  # a poll's [offset, value] pairs
    error: str


class Event(TypedDict, total=False):
    """One node event (docs/formats.md, "Node events")."""

    time: int  # ns since the run started: the history's clock
    ts: float
    node: int | str  # "controller" or a broker id
    host: str
    kind: str
    topic: str
    partition: int
    leader: int | None
    leader_epoch: int
    isr: list[int]
    elr: list[int]
    reason: str


@dataclass
class Tally:
    """What one pass over a file saw: its lines, the last time, and what it skipped."""

    name: str
    lines: int = 0  # lines read or skipped
    end_ns: int = 0  # the greatest `time` of the objects read (a node's own log: `ts`)
    malformed: int = 0
    torn: int = 0
    named: list[str] = field(default_factory=list)

    def skip(self, lineno: int, why: str, torn: bool = False) -> None:
        if torn:
            self.torn += 1
        else:
            self.malformed += 1
        if len(self.named) < MAX_NAMED:
            self.named.append(f"{self.name} line {lineno}: {why}")

    def notes(self) -> list[str]:
        """One line for a report or a checker's notes; [] when nothing was skipped."""
        out = []
        if self.malformed:
            out.append(f"{self.malformed:,} malformed {self.name} line(s) skipped: "
                       + "; ".join(n for n in self.named if "torn" not in n))
        if self.torn:
            out.append(f"{self.name}: the last line is cut short (a crash mid-write); skipped")
        return out


def _decode(line: str | bytes) -> tuple[Any, str]:
    """(the line's JSON value, "") or (None, why it is not one), as Python's json reads it:
    the slow path, for lines msgspec refused (json also takes NaN, Infinity, numbers
    beyond a double and lone surrogates; and names what is wrong)."""
    try:
        return json.loads(line), ""
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as exc:
        return None, f"invalid JSON ({getattr(exc, 'msg', exc)})"


def _time_of(line: str) -> int | None:
    """`time` of a line left unparsed: the writer puts it second, so a find is enough."""
    start = line.find('"time":')
    if start < 0:
        return None
    digits = line[start + 7:start + 40].lstrip(" ").split(",", 1)[0].split("}", 1)[0]
    return int(digits) if digits.isdigit() else None


def _objects(path: Path, tally: Tally, numeric_time: type | tuple[type, ...],
             key: str = "time") -> Iterator[Any]:
    # Imported here, where a file is read: the PyPy simulator imports runformat (for
    # runformat.effects), reads no file and has none of the PyPI dependencies (harness.pypy).
    from msgspec import DecodeError
    from msgspec.json import Decoder

    # The hot loop of every reader: a line costs one C call to parse it and a few tests.
    # msgspec's decoder takes what json.loads takes, to the same values, at about half the
    # cost (tests/runformat/test_runformat_decode.py); what it refuses goes to `_decode`.
    decode, end_ns, lineno = Decoder().decode, tally.end_ns, 0
    not_one = ("not a JSON object with an integer `time`" if key == "time"
               else f"not a JSON object with a number `{key}`")
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                obj = decode(line) if len(line) < LONG_LINE else _paused_gc(decode, line)
            except (DecodeError, RecursionError):
                obj, why = _decode(line)
                if why:
                    _skip_bad(tally, lineno, line, why)
                    continue
            t = obj.get(key) if type(obj) is dict else None
            if t.__class__ not in numeric_time:
                _skip_bad(tally, lineno, line, not_one)
                continue
            if t > end_ns:
                end_ns = t
            yield obj
    # Counted when the file is read to its end (a reader that stops early sees no totals).
    tally.lines += lineno
    tally.end_ns = end_ns


def _paused_gc(decode: Callable[[str], Any], line: str) -> Any:
    """decode(line) with the cyclic garbage collector paused (JSON values hold no cycles)."""
    if not gc.isenabled():
        return decode(line)
    gc.disable()
    try:
        return decode(line)
    finally:
        gc.enable()


def _skip_bad(tally: Tally, lineno: int, line: str, why: str) -> None:
    if not line.strip():
        return
    torn = not line.endswith("\n")
    tally.skip(lineno, "torn last line (no newline)" if torn else why, torn=torn)


def history(path: str | Path, tally: Tally | None = None) -> Iterator[Op]:
    """history.jsonl's operations in file order (which is time order)."""
    path = Path(path)
    return _objects(path, tally or Tally(path.name), (int,))  # type: ignore[return-value]


def events(path: str | Path, tally: Tally | None = None) -> Iterator[Event]:
    """events.jsonl's events in file order; a float `time` is made an integer."""
    path = Path(path)
    for event in _objects(path, tally or Tally(path.name), (int, float)):
        if type(event["time"]) is float:
            event["time"] = int(event["time"])
        yield event  # type: ignore[misc]


def records(path: str | Path, tally: Tally | None = None) -> Iterator[dict[str, Any]]:
    """The objects of a run's other JSONL files (invariants.jsonl), under the same policy."""
    path = Path(path)
    return _objects(path, tally or Tally(path.name), (int, float))


def node_events(path: str | Path, tally: Tally | None = None) -> Iterator[Event]:
    """A node's own events.jsonl (what replication.runtime.EventLog writes, before the run's
    merge gives each event its `time`): its events in file order, each with a number `ts`,
    the seconds of its host's wall clock."""
    path = Path(path)
    return _objects(path, tally or Tally(path.name), (int, float), "ts")


def history_line(line: str | bytes) -> Op | None:
    """One history.jsonl line under the same policy, for a reader handed lines instead of the
    file (Spark's textFile, a rewriter's bytes): its operation, or None where `history` skips
    the line (bytes that are not UTF-8 too)."""
    return _line_object(line, (int,))


def event_line(line: str | bytes) -> Event | None:
    """One events.jsonl line as `events` reads it (its `time` made an integer), or None."""
    event = _line_object(line, (int, float))
    if event is not None and type(event["time"]) is float:
        event["time"] = int(event["time"])
    return event


def _line_object(line: str | bytes, numeric_time: tuple[type, ...]) -> Any:
    obj, why = _decode(line) if line.strip() else (None, "blank")
    if why or type(obj) is not dict or obj.get("time").__class__ not in numeric_time:
        return None
    return obj


def read_events(path: str | Path, tally: Tally | None = None) -> list[Event]:
    """events.jsonl as a list in time order (the merge sorts by wall clock; ties keep file
    order); [] when the file does not exist."""
    path = Path(path)
    if not path.is_file():
        return []
    return sorted(events(path, tally), key=lambda e: e["time"])


def last_time(path: str | Path, block: int = 1 << 16) -> int:
    """The `time` of history.jsonl's last operation with one, read from the file's end (the
    writer never lets time go back, so it is the history's end); 0 if none. Only the start of
    that line is parsed: a final read's line may be megabytes long."""
    with open(path, "rb") as fh:
        end = fh.seek(0, 2)
        while end > 0:
            start = _line_start(fh, end, block)
            fh.seek(start)
            t = _time_of(fh.read(min(200, end - start)).decode("utf-8", "replace"))
            if t is not None:
                return t
            end = start - 1  # that line had no time (blank, torn): the one before it
    return 0


def _line_start(fh: Any, end: int, block: int) -> int:
    """Where the line ending before byte `end` (a newline there excluded) starts."""
    pos = end - 1 if end > 0 else 0
    fh.seek(max(0, pos))
    if fh.read(1) == b"\n":
        end = pos  # the file's (or line's) own newline
    while end > 0:
        lo = max(0, end - block)
        fh.seek(lo)
        found = fh.read(end - lo).rfind(b"\n")
        if found >= 0:
            return lo + found + 1
        end = lo
    return 0
