"""Real failing runs reproduced in the simulator: the reproduction probability per run.

    .venv/bin/python benchmarks/real_in_sim.py CAMPAIGN_FOLDER|RUN_DIR... [--tries 5] [--jobs 2]

For each real-host run that failed (its results.json reports an anomaly), the realised schedule
is mapped into the simulator exactly as `harness shrink` maps it (harness.shrink.start_candidate:
the times faults really started, the nodes they really hit, the run's config) and simulated
with `tries` seeds (seed, seed+1, ...). A try reproduces when the run's target class (the class
`harness shrink` would keep: loss classes first) recurs. Prints, per run, the hits and which
anomaly classes the real run and the simulated tries reported (so the classes the two worlds
find can be compared), then per config the runs reproduced at least once and the mean
probability. A campaign folder means every real run of its cells that has results.json.
No assertions: a measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.shrink import (  # noqa: E402
    Budget,
    Candidate,
    Evaluator,
    start_candidate,
    target_class,
)
from harness.sim_run import with_seed  # noqa: E402


def run_dirs(paths: list[Path]) -> list[tuple[str, Path]]:
    """(config name, run folder) for each argument; a campaign folder expands to its cells."""
    out = []
    for path in paths:
        state = path / "campaign.json"
        if state.exists():
            for cell in json.loads(state.read_text())["cells"]:
                if cell.get("run_dir"):
                    out.append((cell["config"], (path / cell["run_dir"]).resolve()))
        else:
            out.append((json.loads((path / "test.json").read_text())["config"]["name"], path))
    return [(c, p) for c, p in out if (p / "results.json").exists()]


def try_seed(start: Candidate, target: str, k: int) -> dict[str, Any]:
    """The mapped schedule simulated with seed + k, checked as `harness shrink` checks it."""
    cand = Candidate(with_seed(start.config, start.config.seed + k), start.entries)
    out = Evaluator(target, Budget(None)).outcome(cand)
    return {"hit": target in out.classes, "classes": sorted(out.classes), "s": out.wall_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    rows = []
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        for config, run_dir in run_dirs(args.paths):
            results = json.loads((run_dir / "results.json").read_text())
            if json.loads((run_dir / "test.json").read_text()).get("hosts") == "sim":
                continue
            target = target_class(results)
            real_classes = sorted(k for k, v in (results.get("anomalies") or {}).items()
                                  if (v.get("count") if isinstance(v, dict) else v))
            if target is None:
                rows.append({"config": config, "run": str(run_dir), "target": None,
                             "real": real_classes})
                continue
            start, _real, notes = start_candidate(run_dir)  # read once, simulated `tries` times
            tries = list(pool.map(try_seed, [start] * args.tries, [target] * args.tries,
                                  range(args.tries)))
            hits = sum(t["hit"] for t in tries)
            sim_classes = sorted({c for t in tries for c in t["classes"]})
            rows.append({"config": config, "run": str(run_dir), "target": target, "hits": hits,
                         "tries": args.tries, "faults": start.faults, "real": real_classes,
                         "sim": sim_classes, "notes": notes})
            print(f"{config:22s} {run_dir.name:26s} {target:22s} {hits}/{args.tries}  "
                  f"faults {start.faults:2d}  real {real_classes}  sim {sim_classes}",
                  flush=True)
    print(f"\n{len(rows)} runs in {time.perf_counter() - started:.0f} s; per config "
          "(failing real runs, reproduced at least once, mean probability):")
    by_config: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_config[row["config"]].append(row)
    for config, group in by_config.items():
        failing = [r for r in group if r["target"]]
        if not failing:
            print(f"  {config:22s} {len(group)} runs, none failing")
            continue
        once = sum(r["hits"] > 0 for r in failing)
        mean = sum(r["hits"] / r["tries"] for r in failing) / len(failing)
        print(f"  {config:22s} {len(failing)}/{len(group)} failing, {once} reproduced, "
              f"mean probability {mean:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
