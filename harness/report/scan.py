"""One streaming pass over history.jsonl that keeps only bounded summaries.

A history may hold tens of millions of operations, so nothing here grows with the number of
operations: latencies are reservoir-sampled, throughput is counted in one-second bins (the
run's duration bounds those) and in-flight sends are keyed by process.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.report.faults import FaultTracker, FaultWindow

OUTCOMES = ("ok", "fail", "info")
LATENCY_SAMPLES = 20_000  # per outcome; enough for a dense scatter, cheap to plot
MAX_BAD_LINES_REPORTED = 5


@dataclass
class LatencySample:
    """Reservoir sample (algorithm R) of (completion time s, latency ms) for one outcome."""

    cap: int
    rng: random.Random
    seen: int = 0
    points: list[tuple[float, float]] = field(default_factory=list)

    def add(self, time_s: float, latency_ms: float) -> None:
        self.seen += 1
        if len(self.points) < self.cap:
            self.points.append((time_s, latency_ms))
            return
        slot = self.rng.randrange(self.seen)
        if slot < self.cap:
            self.points[slot] = (time_s, latency_ms)


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
    bad_lines: list[str] = field(default_factory=list)
    bad_line_count: int = 0


def _relevant(line: str) -> bool:
    # Polls dominate big histories and carry long record lists; the report needs only sends
    # and nemesis operations, so skip the rest before paying for json.loads. Both tokens are
    # necessarily present, JSON-encoded, in every line we need.
    return '"send"' in line or '"nemesis"' in line


def scan_history(path: Path, sample_cap: int = LATENCY_SAMPLES) -> HistorySummary:
    """Stream `path` once and summarise it; malformed lines are counted and named, not fatal."""
    summary = HistorySummary()
    rng = random.Random(0)  # deterministic: the same history gives the same plot
    summary.latency = {o: LatencySample(sample_cap, rng) for o in OUTCOMES}
    tracker = FaultTracker()
    invoked: dict[Any, int] = {}
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            summary.operations += 1
            if not _relevant(line):
                _track_end(summary, line)
                continue
            try:
                op = json.loads(line)
            except ValueError as exc:
                _bad_line(summary, path, lineno, f"invalid JSON ({exc.msg})")
                continue
            if not isinstance(op, dict) or not isinstance(op.get("time"), int):
                _bad_line(summary, path, lineno, "not an object with an integer `time`")
                continue
            summary.end_ns = max(summary.end_ns, op["time"])
            if op.get("process") == "nemesis":
                tracker.feed(op)
            elif op.get("f") == "send":
                _feed_send(summary, invoked, op)
    summary.faults = tracker.windows(summary.end_ns)
    summary.unmatched_fault_stops = tracker.unmatched_stops
    return summary


def _track_end(summary: HistorySummary, line: str) -> None:
    # Skipped lines still move the end of the run; read `time` without a full parse.
    start = line.find('"time":')
    if start < 0:
        return
    digits = line[start + 7:start + 40].lstrip(" ").split(",", 1)[0].split("}", 1)[0]
    if digits.isdigit():
        summary.end_ns = max(summary.end_ns, int(digits))


def _feed_send(summary: HistorySummary, invoked: dict[Any, int], op: dict[str, Any]) -> None:
    kind = op.get("type")
    process = op.get("process")
    if kind == "invoke":
        invoked[process] = op["time"]
        return
    if kind not in OUTCOMES:
        return
    summary.sends[kind] += 1
    second = op["time"] // 1_000_000_000
    summary.throughput.setdefault(second, [0, 0, 0])[OUTCOMES.index(kind)] += 1
    started = invoked.pop(process, None)
    if started is not None:
        summary.latency[kind].add(op["time"] / 1e9, (op["time"] - started) / 1e6)


def _bad_line(summary: HistorySummary, path: Path, lineno: int, why: str) -> None:
    summary.bad_line_count += 1
    if len(summary.bad_lines) < MAX_BAD_LINES_REPORTED:
        summary.bad_lines.append(f"{path.name} line {lineno}: {why}")
