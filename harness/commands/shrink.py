"""`harness shrink RUN_DIR`: shrink a failing run (simulated, or real and mapped into the
simulator) to a minimal reproduction: the fewest, shortest, earliest faults and the smallest
workload that still produce the same anomaly class. Writes a minimal run folder with
minimal.json (replay it with `harness simulate --replay minimal.json`) and shrunk.json in
RUN_DIR."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from checkers.exitcodes import Exit
from harness.minimal import MINIMAL

NAME = "shrink"
HELP = "shrink a failing run to a minimal reproduction (fewest faults, smallest workload)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("--budget", metavar="SECONDS|Nc",
                        help="stop after this many seconds (300, 300s) or simulated candidates "
                             "(80c) with the smallest reproduction found so far")
    parser.add_argument("--tries", type=int, metavar="K",
                        help="seeds tried on the full schedule (default 1 for a simulated run, "
                             "5 for a real one, whose timing the simulator cannot copy)")
    parser.add_argument("--against", action="append", default=[], metavar="K=V",
                        help="keep only candidates that do NOT show the anomaly with this "
                             "setting (e.g. the weakness's switch at its safe value); repeatable")


def main(args: argparse.Namespace) -> int:
    from harness.shrink import shrink

    r = shrink(args.run_dir, budget=args.budget, tries=args.tries, argv=sys.argv,
               against=args.against)
    hits = sum(t["reproduced"] for t in r.tries)
    print(f"anomaly: {r.target} (reproduced with {hits}/{len(r.tries)} seed(s))")
    print(f"faults: {r.before.faults} -> {r.after.faults}; records: "
          f"{r.before_outcome.sends} -> {r.after_outcome.sends}; "
          f"{r.target}: {r.before_outcome.classes.get(r.target)} -> "
          f"{r.after_outcome.classes.get(r.target)}")
    print(f"{r.simulated} candidates simulated ({r.cache_hits} cache hits) in {r.wall_s:.1f} s"
          f"{'; budget exhausted' if r.budget_exhausted else ''}")
    if r.against:
        print(f"with {' '.join(r.against)} the minimal schedule shows no {r.target}")
    print(f"replay: harness simulate --replay {r.minimal_dir / MINIMAL}")
    print(r.minimal_dir / "report.html")
    return Exit.VALID
