#!/usr/bin/env python3
"""How fast `harness simulate --seeds` finds each weakness of campaigns/validation.toml.

For every loss-allowed [[config]] of the campaign (under its own nemesis mix), run SEARCHES
searches on disjoint seed ranges, each stopping at its first failing seed, and print the
median and worst wall time to that seed, the seeds tried and the anomaly classes found.
With --safe N, also simulate N seeds of the safe configuration and print every anomaly.

    .venv/bin/python benchmarks/sim_detection.py [--searches 5] [--max-seeds 300] [--jobs 2]
        [--spark-master local[2]] [--only acks1,no-elr] [--safe 10000]

Wall times are measured; nothing is asserted (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.campaign_spec import load_spec  # noqa: E402
from harness.config import TestConfig, typed  # noqa: E402
from harness.simulate import search  # noqa: E402


def configs(path: Path) -> dict[str, tuple[str, TestConfig]]:
    """config name -> (expect, resolved config of its first cell)."""
    _, cells = load_spec(path)
    out: dict[str, tuple[str, TestConfig]] = {}
    for cell in cells:
        out.setdefault(cell.config, (cell.expect, typed(cell.resolved)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaign", type=Path, default=ROOT / "campaigns" / "validation.toml")
    ap.add_argument("--searches", type=int, default=5)
    ap.add_argument("--max-seeds", type=int, default=300, help="seeds per search at most")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--spark-master", default=None)
    ap.add_argument("--only", default=None, help="comma-separated config names")
    ap.add_argument("--safe", type=int, default=0, help="seeds of the safe configuration")
    args = ap.parse_args()
    cells = configs(args.campaign)
    only = set(args.only.split(",")) if args.only else None
    print(f"{'weakness':22} {'found':>7} {'median s':>9} {'worst s':>8} {'seeds tried':>12}  "
          "anomalies (runs)")
    for name, (expect, config) in cells.items():
        if expect == "no-loss" or (only and name not in only):
            continue
        times, tried, found, classes = [], [], 0, Counter()
        for k in range(args.searches):
            first = 100_000 * (k + 1) + 1
            seeds = range(first, first + args.max_seeds)
            started = time.perf_counter()
            summary = search(config, seeds, jobs=args.jobs, spark_master=args.spark_master,
                             stop_after=1)
            elapsed = time.perf_counter() - started
            tried.append(summary.runs)
            if summary.failing:
                found += 1
                times.append(elapsed)
                row = next(r for r in summary.rows if r["seed"] == summary.failing[0])
                classes.update(row["anomalies"].keys())
        median = f"{statistics.median(times):9.1f}" if times else f"{'-':>9}"
        worst = f"{max(times):8.1f}" if times else f"{'-':>8}"
        print(f"{name:22} {found:>3}/{args.searches:<3} {median} {worst} "
              f"{'/'.join(map(str, tried)):>12}  {dict(classes)}", flush=True)
    if args.safe:
        expect, config = next(v for v in cells.values() if v[0] == "no-loss")
        started = time.perf_counter()
        summary = search(config, range(1, args.safe + 1), jobs=args.jobs,
                         spark_master=args.spark_master)
        hours = summary.virtual_s / 3600
        print(f"safe: {summary.runs} runs, {hours:.1f} simulated hours in "
              f"{time.perf_counter() - started:.0f} s; failing {summary.failing[:20]} "
              f"errors {summary.errors[:20]} anomalies {dict(summary.by_anomaly)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
