"""Fault windows: pair the nemesis `start-*` / `stop-*` operations of a history.

A nemesis may log each fault once (`info`) or as an invoke/completion pair, as Jepsen does;
both shapes yield one window per fault, from the first start record to the last stop record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FaultWindow:
    kind: str  # the fault name without the start-/stop- prefix, e.g. "kill"
    start_ns: int
    end_ns: int | None = None  # None while open; closed at the history's end if never stopped
    values: list[Any] = field(default_factory=list)
    healed: bool = True  # False when the history ended without a stop record

    @property
    def start_s(self) -> float:
        return self.start_ns / 1e9

    @property
    def end_s(self) -> float:
        return (self.end_ns if self.end_ns is not None else self.start_ns) / 1e9


class FaultTracker:
    """Feed nemesis operations in history order; read `windows()` at the end."""

    def __init__(self) -> None:
        self._open: dict[str, FaultWindow] = {}
        self._closed: list[FaultWindow] = []
        # The last closed window per kind, and whether its stop came from an invoke: a later
        # completion of that same stop extends it instead of being an unmatched stop.
        self._last_stop: dict[str, tuple[FaultWindow, bool]] = {}
        self.unmatched_stops = 0

    def feed(self, op: dict[str, Any]) -> None:
        f = op.get("f")
        if not isinstance(f, str):
            return
        time = int(op.get("time", 0))
        is_invoke = op.get("type") == "invoke"
        value = op.get("value")
        if f.startswith("start-"):
            self._start(f[len("start-"):], time, value)
        elif f.startswith("stop-"):
            self._stop(f[len("stop-"):], time, value, is_invoke)

    def _start(self, kind: str, time: int, value: Any) -> None:
        window = self._open.get(kind)
        if window is None:
            window = FaultWindow(kind, time)
            self._open[kind] = window
            self._last_stop.pop(kind, None)
        if value is not None and value not in window.values:
            window.values.append(value)

    def _stop(self, kind: str, time: int, value: Any, is_invoke: bool) -> None:
        window = self._open.pop(kind, None)
        if window is not None:
            window.end_ns = time
            self._closed.append(window)
            self._last_stop[kind] = (window, is_invoke)
            return
        last = self._last_stop.get(kind)
        if last is not None and last[1]:
            last[0].end_ns = time
            self._last_stop[kind] = (last[0], is_invoke)
            return
        self.unmatched_stops += 1

    def windows(self, end_ns: int) -> list[FaultWindow]:
        """All windows by start time; faults never stopped are closed at `end_ns`."""
        still_open = []
        for window in self._open.values():
            still_open.append(
                FaultWindow(window.kind, window.start_ns, max(end_ns, window.start_ns),
                            list(window.values), healed=False)
            )
        return sorted(self._closed + still_open, key=lambda w: (w.start_ns, w.kind))
