"""A minimal reproduction's file, minimal.json: what `harness shrink` writes
(harness/shrink.py) and what `harness simulate --replay`, `harness reproduce --schedule` and
`harness run --plan` read (docs/validation.md, "Minimal reproductions"). Kept apart from the
shrinker so that reading one, and refusing a bad one, needs neither the simulator's search nor
Spark."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checkers.exitcodes import UserError
from control.files import check_regular_file
from harness.config import validate
from harness.test import Plan, Test
from nemesis.schedule import plan_entries

MINIMAL = "minimal.json"
FORMAT = 1
# (its config, validated; its schedule as plan entries; the whole document)
Minimal = tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]


def load_minimal(path: Path) -> Minimal:
    """(config, plan entries, the whole document) of a minimal.json (or its folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / MINIMAL
    try:
        doc = json.loads(check_regular_file(path).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    except RecursionError:
        raise UserError(f"cannot read {path}: nested too deeply") from None
    if (not isinstance(doc, dict) or doc.get("format") != FORMAT
            or not isinstance(doc.get("config"), dict) or "schedule" not in doc):
        raise UserError(f"{path}: not a minimal.json (format {FORMAT}, config, schedule)")
    config = validate(doc["config"], source=str(path))
    return config, plan_entries(doc["schedule"], str(path)), doc


def replay_test(path: Path, results_root: Path, argv: Sequence[str]) -> Test:
    """`harness simulate --replay minimal.json`: the same config and scripted plan."""
    config, entries, _ = load_minimal(path)
    return Test.of(config, results_root, argv=list(argv), plan=Plan.scripted(entries))
