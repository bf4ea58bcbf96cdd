"""What a night of a campaign changed: compare it with the earlier nights of the same campaign.

The nights of campaign NAME are the folders results/campaigns/NAME/<stamp>/campaign.json; a
night is compared with the nights whose stamps sort before it. A finding is a (config, anomaly
class) pair: some run of that config reported that anomaly. Tonight's findings are

- New: never seen in an earlier night;
- Ongoing: also seen the night before;
- Rare: seen in some earlier night, but not the night before (it comes and goes);

and a finding of the night before that tonight lacks is Resolved. Each matrix cell (config x
nemesis x time limit) gets its detection rate over all the nights (runs with any anomaly / runs)
with a 95% Wilson score interval, and is flaky when its verdict differs between nights that ran
the same code (the git commit in each run's test.json `versions.git.commit`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATUSES = ("New", "Ongoing", "Rare", "Resolved")
Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of k successes in n trials ((0, 1) when n is 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Finding:
    config: str
    expect: str
    anomaly: str
    status: str
    nights_seen: int  # nights (this one included) with the finding
    nights: int


@dataclass
class CellTrend:
    config: str
    nemesis: str
    time_limit: float
    detected: int = 0
    runs: int = 0
    low: float = 0.0
    high: float = 1.0
    marks: list[str] = field(default_factory=list)  # per night: "D" detected, "." clean, "" absent
    flaky: bool = False
    commits: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.detected / self.runs if self.runs else 0.0


@dataclass
class NightDiff:
    name: str
    stamps: list[str]  # oldest first; the last is this night
    findings: list[Finding] = field(default_factory=list)
    cells: list[CellTrend] = field(default_factory=list)

    @property
    def new_in_no_loss(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "New" and f.expect == "no-loss"]

    def by_status(self, status: str) -> list[Finding]:
        return [f for f in self.findings if f.status == status]


def _read(folder: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((folder / "campaign.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("cells"), list) else None


def _commit(folder: Path, cell: dict[str, Any]) -> str:
    if cell.get("commit"):
        return str(cell["commit"])
    if not cell.get("run_dir"):
        return ""
    try:
        test = json.loads((folder / cell["run_dir"] / "test.json").read_text(encoding="utf-8"))
        git = test.get("versions", {}).get("git") or {}
        return str(git.get("commit") or "") + ("+dirty" if git.get("dirty") else "")
    except (OSError, ValueError, AttributeError):
        return ""


def _findings(state: dict[str, Any]) -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}
    for cell in state["cells"]:
        if cell.get("status") != "done":
            continue
        for name, n in (cell.get("anomalies") or {}).items():
            if n:
                found[(cell["config"], name)] = cell.get("expect", "")
    return found


def compare_nights(folder: Path, max_nights: int = 30) -> NightDiff | None:
    """This night (`folder`) against the earlier nights of its campaign; None if unreadable."""
    folder = Path(folder)
    this = _read(folder)
    if this is None:
        return None
    nights = []
    for other in sorted(p for p in folder.parent.iterdir() if p.is_dir()):
        if other.name > folder.name:
            continue
        state = this if other.name == folder.name else _read(other)
        if state is not None:
            nights.append((other, state))
    nights = nights[-max_nights:]
    diff = NightDiff(str(this.get("name", folder.parent.name)), [p.name for p, _ in nights])
    per_night = [_findings(state) for _, state in nights]
    tonight, earlier = per_night[-1], per_night[:-1]
    previous = earlier[-1] if earlier else {}
    keys = set(tonight) | set(previous)
    for key in sorted(keys):
        seen_before = any(key in night for night in earlier)
        if key in tonight:
            status = "Ongoing" if key in previous else ("Rare" if seen_before else "New")
        else:
            status = "Resolved"
        expect = tonight.get(key) or previous.get(key) or ""
        diff.findings.append(Finding(key[0], expect, key[1], status,
                                     sum(key in n for n in per_night), len(per_night)))
    diff.findings.sort(key=lambda f: (STATUSES.index(f.status), f.config, f.anomaly))
    diff.cells = _cells(nights)
    return diff


def _cells(nights: list[tuple[Path, dict[str, Any]]]) -> list[CellTrend]:
    trends: dict[tuple[str, str, float], CellTrend] = {}
    verdicts: dict[tuple[str, str, float], dict[str, set[bool]]] = {}
    for index, (folder, state) in enumerate(nights):
        night: dict[tuple[str, str, float], list[bool]] = {}
        for cell in state["cells"]:
            if cell.get("status") != "done" or cell.get("outcome") == "error":
                continue
            key = (cell["config"], cell["nemesis"], float(cell["time_limit"]))
            trend = trends.setdefault(key, CellTrend(*key, marks=[""] * len(nights)))
            detected = bool(cell.get("anomalies"))
            trend.runs += 1
            trend.detected += detected
            night.setdefault(key, []).append(detected)
            commit = _commit(folder, cell)
            if commit:
                verdicts.setdefault(key, {}).setdefault(commit, set()).add(detected)
                if commit not in trend.commits:
                    trend.commits.append(commit)
        for key, results in night.items():
            trends[key].marks[index] = "D" if any(results) else "."
    for key, trend in trends.items():
        trend.low, trend.high = wilson(trend.detected, trend.runs)
        trend.flaky = any(len(v) > 1 for v in verdicts.get(key, {}).values())
    return sorted(trends.values(), key=lambda t: (t.config, t.nemesis, t.time_limit))


def format_summary(diff: NightDiff) -> str:
    """The lines `harness campaign` prints at the end of a night."""
    earlier = len(diff.stamps) - 1
    lines = [f"compared with {earlier} earlier night(s) of campaign {diff.name}:"]
    for status in STATUSES:
        found = diff.by_status(status)
        if found:
            lines.append(f"  {status}: " + ", ".join(
                f"{f.config} {f.anomaly}" + (" (expects no-loss)" if f.expect == "no-loss"
                                             else "") for f in found))
    if len(lines) == 1:
        lines.append("  no findings tonight or the night before")
    flaky = [c for c in diff.cells if c.flaky]
    if flaky:
        lines.append("  flaky (verdict differs between nights of the same commit): "
                     + ", ".join(f"{c.config}/{c.nemesis}" for c in flaky))
    for c in diff.cells:
        lines.append(f"  {c.config}/{c.nemesis}/{c.time_limit:g}s: detected {c.detected}/{c.runs}"
                     f" ({c.rate:.0%}, 95% CI {c.low:.0%}-{c.high:.0%})"
                     f" nights {''.join(m or ' ' for m in c.marks)}")
    return "\n".join(lines)
