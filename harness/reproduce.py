"""`harness reproduce RUN_DIR`: run a test again from its folder -- same config, seed and
workload, the recorded nemesis schedule replayed at its recorded times against the nodes it
hit -- and say whether the same anomalies occurred."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from checkers.exitcodes import Exit
from harness import store
from harness.config import validate
from harness.runner import run_test
from harness.test import Plan, Test


def _anomalies(run_dir: Path) -> dict[str, int]:
    path = run_dir / "results.json"
    if not path.exists():
        return {}
    results = json.loads(path.read_text())
    return {name: a["count"] for name, a in results.get("anomalies", {}).items()}


def reproduce(run_dir: Path) -> int:
    run_dir = Path(run_dir)
    if not (run_dir / "test.json").exists() or not (run_dir / "schedule.json").exists():
        print(f"harness reproduce: {run_dir} is not a run folder (needs test.json and schedule.json)",
              file=sys.stderr)
        return Exit.ERROR
    config = validate(store.read_test_json(run_dir)["config"], source=str(run_dir / "test.json"))
    new_dir = run_test(Test.of(config, store.default_results_dir(), argv=sys.argv,
                               plan=Plan.replayed(run_dir)))
    before, after = _anomalies(run_dir), _anomalies(new_dir)
    print(f"original:   {run_dir}  anomalies {before or 'none'}")
    print(f"reproduced: {new_dir}  anomalies {after or 'none'}")
    same = set(before) == set(after)
    print("same anomalies occurred" if same else "the anomalies differ")
    print(new_dir / "report.html")
    return 0 if same else 1
