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
from harness.shrink import load_minimal
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


def reproduce_schedule(path: Path, times: int = 1) -> int:
    """`harness reproduce --schedule minimal.json --times N`: run a minimal reproduction (from
    `harness shrink`) on real hosts N times -- its config and seed, its schedule at its times
    against its nodes -- and say how often the same anomaly class occurred."""
    config, entries, doc = load_minimal(Path(path))
    config = dict(config)
    config["hosts"] = dict(doc.get("real_hosts") or {"provider": "netns"})
    config = validate(config, source=str(path))
    wanted = doc.get("anomaly")
    hits, runs = 0, []
    for i in range(max(1, times)):
        new_dir = run_test(Test.of(config, store.default_results_dir(), argv=sys.argv,
                                   plan=Plan.scripted(entries)))
        found = _anomalies(new_dir)
        hit = bool(found.get(wanted))
        hits += hit
        runs.append(new_dir)
        print(f"run {i + 1}/{times}: {new_dir}  {wanted} {found.get(wanted, 0)}  "
              f"anomalies {found or 'none'}", flush=True)
    print(f"{wanted} occurred in {hits}/{len(runs)} real run(s) of {path}")
    return 0 if hits else 1
