"""Time to detection: how much campaign time a weakness needs before a run catches it.

For each config expected to lose data, its finished cells are taken in run order and their
wall-clock durations (set-up, workload, final read and check) are added up until a cell whose
checker reports lost acknowledged records (lost-write or unseen); that sum is one detection
time, and counting starts again from zero. So with three seeds that all lose data there are
three samples, each one run long; with one detecting run out of three, one sample of three
runs. Time spent after the last detection is reported apart as `undetected_s` (the search
had not succeeded yet), never folded into the statistics.

Three measures are kept. `lost` counts a run as detecting when its checker reports lost-write
or unseen records. `evidence` also counts `inconsistent-offsets`: consumers read only up to the
high watermark, so an offset read with one value and later with another is a committed record
that was lost, even though, having been read once before it vanished, it is not a lost-write
by the Jepsen definition the checker follows (unclean elections and last-replica-standing
losses mostly show up this way, because the old leader's high watermark covered the records).
`invariants` also counts a violated protocol invariant (`invariant:<name>`, docs/invariants.md):
the bad state that a later fault would turn into a loss, seen in runs where that fault did not
come.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any

from harness.report.outcome import LOSS_ANOMALIES

FINISHED_CELLS = ("done", "error")  # a campaign never re-runs these on resume
EVIDENCE = (*LOSS_ANOMALIES, "inconsistent-offsets")
INVARIANT = "invariant:"  # the prefix of every protocol-invariant anomaly
WITH_INVARIANTS = (*EVIDENCE, INVARIANT)


@dataclass
class Detection:
    config: str
    runs: int = 0  # finished cells
    detecting_runs: int = 0
    seeds: list[int] = field(default_factory=list)
    samples_s: list[float] = field(default_factory=list)
    undetected_s: float = 0.0

    @property
    def median_s(self) -> float | None:
        return median(self.samples_s) if self.samples_s else None

    @property
    def worst_s(self) -> float | None:
        return max(self.samples_s) if self.samples_s else None


def _detects(cell: dict[str, Any], anomalies: tuple[str, ...]) -> bool:
    """Lost records, or a count for one of `anomalies` (a name ending in ":" is a prefix)."""
    found = {name: count for name, count in (cell.get("anomalies") or {}).items() if count}
    return bool(cell.get("lost")) or any(
        any(name.startswith(wanted) for name in found) if wanted.endswith(":") else wanted in found
        for wanted in anomalies)


def detection_times(cells: list[dict[str, Any]],
                    anomalies: tuple[str, ...] = LOSS_ANOMALIES) -> list[Detection]:
    """One row per `loss-allowed` config that has finished cells, in campaign order; a cell
    detects when its checker reported any of `anomalies` (or lost records)."""
    rows: dict[str, Detection] = {}
    for cell in cells:
        if cell.get("expect") != "loss-allowed" or cell.get("status") not in FINISHED_CELLS:
            continue
        row = rows.setdefault(cell["config"], Detection(cell["config"]))
        row.runs += 1
        if cell.get("seed") not in row.seeds:
            row.seeds.append(cell.get("seed"))
        row.undetected_s += float(cell.get("duration_s") or 0.0)
        if _detects(cell, anomalies):
            row.detecting_runs += 1
            row.samples_s.append(round(row.undetected_s, 1))
            row.undetected_s = 0.0
    for row in rows.values():
        row.undetected_s = round(row.undetected_s, 1)
    return list(rows.values())


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def format_table(rows: list[Detection]) -> str:
    """A plain-text table for the end of a campaign's output."""
    lines = [f"{'config':<24} {'detected':>9} {'median':>8} {'worst':>8} {'undetected':>11}  seeds"]
    for r in rows:
        lines.append(f"{r.config:<24} {f'{r.detecting_runs}/{r.runs}':>9} {_fmt(r.median_s):>8} "
                     f"{_fmt(r.worst_s):>8} {_fmt(r.undetected_s or None):>11}  "
                     + ",".join(str(s) for s in r.seeds))
    return "\n".join(lines)
