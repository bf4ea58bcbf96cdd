"""Operations: invocations paired with their completions, from Jepsen-style event histories.

An event is a plain dict in the form of the history (docs/architecture.md; ``process``, ``type`` =
invoke/ok/fail/info, ``f``, ``value``, optional ``index``, ``time``, ``key``). Pairing turns
the events into ``Operation`` records the search works on: an ``ok`` op has a return
position, an ``info`` op (or an invoke never completed) has none because it may take effect
at any point after its invoke, and a ``fail`` op definitely did not happen and is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control.files import check_regular_file


class _Unknown:
    """The output of an op whose outcome is unknown; a singleton that survives pickling."""

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()

TYPES = ("invoke", "ok", "fail", "info")
NEMESIS = "nemesis"


class HistoryError(ValueError):
    """Bad history input; the message names the file and line (or index)."""


@dataclass(frozen=True, slots=True)
class Operation:
    id: int  # dense, in invoke order
    process: Any
    f: str
    value: Any  # the invocation's value (the op's input)
    output: Any  # the completion's value, or UNKNOWN
    call: int  # position of the invoke event in the history
    ret: int | None  # position of the ok event; None: never returned (info / pending)
    invoke_index: int  # the events' own `index` fields, for reports
    complete_index: int | None
    key: Any = None  # kv: which register the op acts on
    where: str = ""  # file:line of the invoke, for error messages

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view for reports."""
        d: dict[str, Any] = {"process": self.process, "f": self.f, "value": thaw(self.value)}
        if self.key is not None:
            d["key"] = thaw(self.key)
        d["output"] = "unknown" if self.output is UNKNOWN else thaw(self.output)
        d["invoke_index"] = self.invoke_index
        d["complete_index"] = self.complete_index
        return d


def freeze(value: Any) -> Any:
    """Make JSON/EDN values hashable (lists become tuples, dicts sorted item tuples)."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted(((k, freeze(v)) for k, v in value.items()), key=repr))
    if isinstance(value, set | frozenset):
        return frozenset(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Turn tuples back into lists so reports serialise as JSON arrays."""
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    if isinstance(value, frozenset):
        return sorted((thaw(v) for v in value), key=repr)
    return value


@dataclass(slots=True)
class _Event:
    event: dict[str, Any]
    where: str
    position: int


def _field(event: dict[str, Any], name: str, where: str) -> Any:
    if name not in event:
        raise HistoryError(f"{where}: missing field {name!r}")
    return event[name]


def pair(events: Iterable[tuple[str, dict[str, Any]]]) -> list[Operation]:
    """Pair ``(location, event)`` items into operations, sorted by invoke position.

    Nemesis events are skipped: they are not operations on the object under test.
    """
    pending: dict[Any, _Event] = {}
    done: list[tuple[_Event, _Event | None]] = []
    for position, (where, event) in enumerate(events):
        if not isinstance(event, dict):
            raise HistoryError(f"{where}: expected an operation map, got {type(event).__name__}")
        process = _field(event, "process", where)
        kind = _field(event, "type", where)
        if process == NEMESIS:
            continue
        if kind not in TYPES:
            raise HistoryError(f"{where}: type {kind!r} is not one of {', '.join(TYPES)}")
        _field(event, "f", where)
        try:
            hash(process)
        except TypeError:
            raise HistoryError(f"{where}: process {process!r} is not a scalar") from None
        if kind == "invoke":
            if process in pending:
                raise HistoryError(
                    f"{where}: process {process!r} invoked again while its op from "
                    f"{pending[process].where} is still pending")
            pending[process] = _Event(event, where, position)
            continue
        inv = pending.pop(process, None)
        if inv is None:
            raise HistoryError(f"{where}: {kind} for process {process!r} without a pending invoke")
        if event["f"] != inv.event["f"]:
            raise HistoryError(
                f"{where}: completion f {event['f']!r} does not match the invoke's "
                f"{inv.event['f']!r} at {inv.where}")
        if kind != "fail":
            done.append((inv, _Event(event, where, position)))
    for inv in pending.values():  # never completed: outcome unknown
        done.append((inv, None))
    done.sort(key=lambda d: d[0].position)
    return [_operation(i, inv, end) for i, (inv, end) in enumerate(done)]


def pair_events(events: Iterable[dict[str, Any]]) -> list[Operation]:
    """``pair`` for events held in memory; errors name the event's position."""
    return pair((f"event {i}", e) for i, e in enumerate(events))


def _operation(i: int, inv: _Event, end: _Event | None) -> Operation:
    """``end`` is the ok/info completion, None if the op never completed."""
    e = inv.event
    ok = end is not None and end.event["type"] == "ok"
    key = e.get("key")
    return Operation(
        id=i,
        process=e["process"],
        f=e["f"],
        value=freeze(e.get("value")),
        output=freeze(end.event.get("value")) if ok else UNKNOWN,
        call=inv.position,
        ret=end.position if ok else None,
        invoke_index=e.get("index", inv.position),
        complete_index=None if end is None else end.event.get("index", end.position),
        key=None if key is None else freeze(key),
        where=inv.where,
    )


def read_jsonl(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """Read a history.jsonl into ``(location, event)`` items; blank lines are skipped."""
    items = []
    with open(check_regular_file(path), encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                items.append((where, json.loads(line)))
            except json.JSONDecodeError as e:
                raise HistoryError(f"{where}: invalid JSON: {e.msg}") from None
            except RecursionError:
                raise HistoryError(f"{where}: nested too deeply") from None
    return items
