"""The same cells on several systems, side by side: what each lost, and where they disagree.

A campaign across systems (`systems = [...]`, docs/differential.md) runs each cell -- config,
fault mix, seed, time limit: the same planned schedule -- once per system. A group is one such
cell on every system; it disagrees when some systems lost acknowledged records and others did
not. The weakness table sums each config over its seeds: runs that lost, and how much."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.report.outcome import LOSS_ANOMALIES
from runformat import history


@dataclass
class Side:
    """One cell on one system."""

    system: str
    outcome: str  # the campaign's outcome (detected, clean, regression, ...) or its status
    lost: int | None
    classes: tuple[str, ...]  # anomaly classes found
    first_loss_s: float | None  # when the first lost record was acknowledged, s into the run
    report: str | None  # relative link to the run's report


@dataclass
class Group:
    """One cell (config, mix, seed, time limit) on every system it ran on."""

    id: str
    config: str
    sides: dict[str, Side] = field(default_factory=dict)

    @property
    def disagreement(self) -> str | None:
        """"loses on A; not on B" when the finished sides disagree about losing data."""
        done = [s for s in self.sides.values() if s.lost is not None]
        losing = [s.system for s in done if s.lost]
        clean = [s.system for s in done if not s.lost]
        if losing and clean:
            return f"loses on {', '.join(losing)}; not on {', '.join(clean)}"
        return None


@dataclass
class Row:
    """A config on one system, over its seeds: the weakness table's cell."""

    config: str
    system: str
    runs: int
    losing: int
    median_lost: float | None


def compare(folder: Path, cells: list[dict[str, Any]]) -> list[Group]:
    """The groups of a campaign folder's cells that ran on a named system, in cell order."""
    groups: dict[str, Group] = {}
    for cell in cells:
        if not cell.get("system"):
            continue
        base = cell["id"].rsplit("@", 1)[0]
        group = groups.setdefault(base, Group(base, cell["config"]))
        group.sides[cell["system"]] = _side(folder, cell)
    return list(groups.values())


def _side(folder: Path, cell: dict[str, Any]) -> Side:
    run_dir = folder / cell["run_dir"] if cell.get("run_dir") else None
    report = f"{cell['run_dir']}/report.html" if run_dir and (run_dir / "report.html").is_file() else None
    return Side(cell["system"], str(cell.get("outcome") or cell.get("status")), cell.get("lost"),
                tuple(sorted(cell.get("anomalies") or {})),
                first_loss_s(run_dir) if run_dir and cell.get("lost") else None, report)


def first_loss_s(run_dir: Path) -> float | None:
    """Seconds from the history's first operation to the acknowledgement of the earliest lost
    record the checker gave as an example; None when unreadable."""
    try:
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
        start = next(history(run_dir / "history.jsonl"))["time"]
        acks = [e["ack_time"] for name in LOSS_ANOMALIES
                for e in results["anomalies"].get(name, {}).get("examples", [])
                if isinstance(e.get("ack_time"), int)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration):
        return None
    return round((min(acks) - start) / 1e9, 1) if acks else None


def table(groups: list[Group]) -> list[Row]:
    """Each config on each system over its seeds, in first-seen order."""
    found: dict[tuple[str, str], list[int]] = {}
    for group in groups:
        for side in group.sides.values():
            runs = found.setdefault((group.config, side.system), [])
            if side.lost is not None:
                runs.append(side.lost)
    return [Row(config, system, len(lost), sum(1 for n in lost if n),
                statistics.median([n for n in lost if n]) if any(lost) else None)
            for (config, system), lost in found.items()]


def systems_of(groups: list[Group]) -> list[str]:
    out: list[str] = []
    for group in groups:
        out += [s for s in group.sides if s not in out]
    return out


def format_comparison(groups: list[Group]) -> str:
    """The weakness table and the disagreements, for the terminal."""
    systems = systems_of(groups)
    rows = {(r.config, r.system): r for r in table(groups)}
    configs = list(dict.fromkeys(g.config for g in groups))
    width = max(len(c) for c in configs) + 2
    lines = ["lost acknowledged records: runs that lost / runs (median lost)",
             "".ljust(width) + "".join(s.ljust(22) for s in systems)]
    for config in configs:
        cells = [_row_text(rows.get((config, s))) for s in systems]
        lines.append(config.ljust(width) + "".join(c.ljust(22) for c in cells))
    disagreements = [g for g in groups if g.disagreement]
    lines.append(f"disagreements: {len(disagreements)}")
    lines += [f"  {g.id}: {g.disagreement}" for g in disagreements]
    return "\n".join(lines)


def _row_text(row: Row | None) -> str:
    if row is None or not row.runs:
        return "-"
    median = f" ({row.median_lost:g})" if row.median_lost is not None else ""
    return f"{row.losing}/{row.runs}{median}"
