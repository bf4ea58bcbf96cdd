"""What a checked run amounts to, read from its results.json (shared by reports and campaigns)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOSS_ANOMALIES = ("lost-write", "unseen")  # acknowledged records that were never read


@dataclass
class RunOutcome:
    checked: bool = False  # a readable results.json exists
    valid: bool | str | None = None  # true | false | "unknown"; None when not checked
    lost: int = 0
    anomalies: dict[str, int] = field(default_factory=dict)  # name -> count, count > 0 only
    error: str | None = None  # why results.json could not be read

    @property
    def verdict(self) -> str:
        if not self.checked:
            return "not checked"
        if self.valid is True:
            return "valid"
        if self.valid is False:
            return "invalid"
        return "unknown"

    @property
    def other_anomalies(self) -> dict[str, int]:
        return {k: v for k, v in self.anomalies.items() if k not in LOSS_ANOMALIES}


def parse_results(data: Any, where: str) -> RunOutcome:
    """Interpret a results.json document; `where` names it in errors."""
    if not isinstance(data, dict) or "valid" not in data:
        raise ValueError(f"{where}: not a results object with a `valid` key")
    valid = data["valid"]
    if valid not in (True, False, "unknown"):
        raise ValueError(f"{where}: `valid` is {valid!r}, expected true, false or \"unknown\"")
    anomalies: dict[str, int] = {}
    for name, entry in (data.get("anomalies") or {}).items():
        count = entry.get("count", 0) if isinstance(entry, dict) else 0
        if not isinstance(count, int):
            raise ValueError(f"{where}: anomalies.{name}.count is {count!r}, not an integer")
        if count:
            anomalies[str(name)] = count
    lost = sum(anomalies.get(name, 0) for name in LOSS_ANOMALIES)
    return RunOutcome(checked=True, valid=valid, lost=lost, anomalies=anomalies)


def read_outcome(run_dir: Path) -> RunOutcome:
    """The outcome of `run_dir`; a missing or unreadable results.json is reported, not raised."""
    path = run_dir / "results.json"
    if not path.is_file():
        return RunOutcome(error=f"{path} does not exist (the run was not checked)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return RunOutcome(error=f"{path}: cannot read: {exc}")
    try:
        return parse_results(data, str(path))
    except ValueError as exc:
        return RunOutcome(error=str(exc))
