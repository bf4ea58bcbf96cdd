"""Fault windows: pair the nemesis `start-*` / `stop-*` operations of a history.

A nemesis may log each fault once (`info`) or as an invoke/completion pair, as Jepsen does;
both shapes yield one window per fault, from the first start record to the last stop record.
Faults of one kind may overlap (e.g. two paused brokers); a stop is matched to the open window
with the same value (its targets) first. `stop-all` (the final heal) closes every open window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runformat.effects import effects_of


@dataclass
class FaultWindow:
    kind: str  # the fault name without the start-/stop- prefix, e.g. "kill"
    start_ns: int
    end_ns: int | None = None  # None while open; closed at the history's end if never stopped
    values: list[Any] = field(default_factory=list)
    healed: bool = True  # False when the history ended without a stop record
    effects: frozenset[str] = frozenset()  # what the fault did (runformat.effects)

    @property
    def start_s(self) -> float:
        return self.start_ns / 1e9

    @property
    def end_s(self) -> float:
        return (self.end_ns if self.end_ns is not None else self.start_ns) / 1e9


class FaultTracker:
    """Feed nemesis operations in history order; read `windows()` at the end."""

    def __init__(self) -> None:
        self._open: dict[str, list[FaultWindow]] = {}
        self._closed: list[FaultWindow] = []
        # The last window closed per kind, and whether its stop was an invoke: the completion
        # of that same stop then extends it instead of being an unmatched stop.
        self._last_stop: dict[str, tuple[FaultWindow, bool]] = {}
        self.unmatched_stops = 0

    def feed(self, op: dict[str, Any]) -> None:
        f = op.get("f")
        if not isinstance(f, str):
            return
        time = int(op.get("time", 0))
        value = op.get("value")
        if f.startswith("start-"):
            self._start(f[len("start-"):], time, value, effects_of(op))
        elif f == "stop-all":
            self._stop_all(time)
        elif f.startswith("stop-"):
            self._stop(f[len("stop-"):], time, value, op.get("type") == "invoke")

    def _start(self, kind: str, time: int, value: Any, effects: frozenset[str]) -> None:
        windows = self._open.setdefault(kind, [])
        if any(value in w.values or (value is None and not w.values) for w in windows):
            return  # the completion of a start already seen
        windows.append(FaultWindow(kind, time, values=[] if value is None else [value],
                                   effects=effects))

    def _stop(self, kind: str, time: int, value: Any, is_invoke: bool) -> None:
        windows = self._open.get(kind, [])
        match = next((w for w in windows if value in w.values), None)
        last = self._last_stop.get(kind)
        if match is None and last and last[1] and (value is None or value in last[0].values):
            last[0].end_ns = time
            self._last_stop[kind] = (last[0], is_invoke)
            return
        if match is None and windows:
            match = windows[0]
        if match is None:
            self.unmatched_stops += 1
            return
        windows.remove(match)
        match.end_ns = time
        self._closed.append(match)
        self._last_stop[kind] = (match, is_invoke)

    def _stop_all(self, time: int) -> None:
        for windows in self._open.values():
            for window in windows:
                window.end_ns = time
                self._closed.append(window)
            windows.clear()

    def windows(self, end_ns: int) -> list[FaultWindow]:
        """All windows by start time; faults never stopped are closed at `end_ns`."""
        still_open = [FaultWindow(w.kind, w.start_ns, max(end_ns, w.start_ns), list(w.values),
                                  healed=False, effects=w.effects)
                      for windows in self._open.values() for w in windows]
        return sorted(self._closed + still_open, key=lambda w: (w.start_ns, w.kind))
