"""The report's one pass over history.jsonl: bounded summaries of sends and faults.

A history may hold tens of millions of operations, so nothing here grows with the number of
operations: latencies are reservoir-sampled, throughput is counted in one-second bins (the
run's duration bounds those) and in-flight sends are keyed by process. `scan_history` reads
the file once and hands every operation to this summary and to the timeline's fold
(harness.report.timeline), so the report parses each line at most once.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.report.faults import FaultTracker, FaultWindow
from runformat import Op, Tally, history, last_time

OUTCOMES = ("ok", "fail", "info")
LATENCY_SAMPLES = 20_000  # per outcome; enough for a dense scatter, cheap to plot


@dataclass
class LatencySample:
    """Reservoir sample of (completion time s, latency ms) for one outcome: algorithm L
    (Li 1994), which draws a random number per kept point, not per point seen."""

    cap: int
    rng: random.Random
    seen: int = 0
    points: list[tuple[float, float]] = field(default_factory=list)
    _w: float = 1.0
    _next: int = 0  # the `seen` count at which the next point is kept

    def add(self, done_ns: int, started_ns: int) -> None:
        """One completion; its point is made only when it is kept."""
        self.seen += 1
        if self.seen < self._next:
            return  # most completions, once the sample is full
        point = (done_ns / 1e9, (done_ns - started_ns) / 1e6)
        if len(self.points) < self.cap:
            self.points.append(point)
            if len(self.points) == self.cap:
                self._draw_next()
        elif self.seen == self._next:
            self.points[self.rng.randrange(self.cap)] = point
            self._draw_next()

    def _draw_next(self) -> None:
        self._w *= math.exp(math.log(1.0 - self.rng.random()) / self.cap)
        skip = math.log(1.0 - self.rng.random()) / math.log(1.0 - self._w) if self._w < 1 else 0
        self._next = self.seen + int(skip) + 1


@dataclass
class HistorySummary:
    operations: int = 0
    end_ns: int = 0
    sends: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    latency: dict[str, LatencySample] = field(default_factory=dict)
    # second -> [ok, fail, info] send completions in that second
    throughput: dict[int, list[int]] = field(default_factory=dict)
    faults: list[FaultWindow] = field(default_factory=list)
    unmatched_fault_stops: int = 0
    nemesis: list[Op] = field(default_factory=list)  # every fault operation, for the story
    first_op_ns: int | None = None  # the first workload operation's time, for the story
    tally: Tally = field(default_factory=lambda: Tally("history.jsonl"))


class Fold(Protocol):
    """Something else fed every completed (ok) operation of the same pass (the timeline)."""

    def feed(self, op: Op) -> None: ...


def scan_history(path: Path, folds: Iterable[Fold] = (),
                 sample_cap: int = LATENCY_SAMPLES) -> HistorySummary:
    """Stream `path` once into a summary, and its ok operations into `folds`; malformed lines
    are counted and named (runformat's policy), not fatal."""
    summary = HistorySummary()
    rng = random.Random(0)  # deterministic: the same history gives the same plot
    summary.latency = {o: LatencySample(sample_cap, rng) for o in OUTCOMES}
    tracker = FaultTracker()
    feeds = [fold.feed for fold in folds]
    feed_send = _SendFeed(summary).feed
    for op in history(path, summary.tally):
        if op.get("f") == "send":
            feed_send(op)
        elif op.get("process") == "nemesis":
            tracker.feed(op)
            summary.nemesis.append(op)
        elif summary.first_op_ns is None:
            summary.first_op_ns = op["time"]
        if op.get("type") == "ok":
            for feed in feeds:
                feed(op)
    summary.operations = summary.tally.lines
    # A torn last line's time counts too: the history ran until then.
    summary.end_ns = max(summary.tally.end_ns, last_time(path))
    summary.faults = tracker.windows(summary.end_ns)
    summary.unmatched_fault_stops = tracker.unmatched_stops
    return summary


class _SendFeed:
    """Counts, bins and samples the send completions; in-flight invokes keyed by process."""

    def __init__(self, summary: HistorySummary) -> None:
        self.summary = summary
        self.invoked: dict[Any, int] = {}
        self.outcome = {o: i for i, o in enumerate(OUTCOMES)}

    def feed(self, op: Op) -> None:
        kind, t = op.get("type"), op["time"]
        summary = self.summary
        if summary.first_op_ns is None:
            summary.first_op_ns = t
        if kind == "invoke":
            self.invoked[op.get("process")] = t
            return
        column = self.outcome.get(kind)  # type: ignore[arg-type]
        if column is None:
            return
        summary.sends[kind] += 1  # type: ignore[index]
        second = t // 1_000_000_000
        bins = summary.throughput.get(second)
        if bins is None:
            bins = summary.throughput[second] = [0, 0, 0]
        bins[column] += 1
        started = self.invoked.pop(op.get("process"), None)
        if started is not None:
            summary.latency[kind].add(t, started)  # type: ignore[index]
