"""`harness run`: one test on real hosts -- hosts, nodes, workload, nemesis, check, report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from checkers.exitcodes import Exit
from harness import store
from harness.commands.argtypes import add_test_options
from harness.config import from_args, require_toxiproxy
from harness.test import Plan, Test

NAME = "run"
HELP = "run one test: hosts, nodes, workload, nemesis, check"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_test_options(parser)
    parser.add_argument("--plan", type=Path, metavar="SCHEDULE.json|MINIMAL.json",
                        help="run these faults (a run's schedule.json, a minimal.json) at their "
                             "times, each aimed at the part its node played (leader, ...)")
    parser.add_argument("--cleanup-only", action="store_true",
                        help="only tear down what crashed or interrupted runs left behind")


def main(args: argparse.Namespace) -> int:
    if args.cleanup_only:
        return _cleanup()
    # Resolve the config first so a bad test file fails before any host is touched.
    config = from_args(args)
    plan = None
    if args.plan is not None:
        from harness.reproduce import plan_file, with_plan_faults

        entries = plan_file(args.plan)
        config = with_plan_faults(config, entries, str(args.plan))
        plan = Plan.scripted(entries)
    test = Test.of(config, store.default_results_dir(), argv=sys.argv, plan=plan)
    require_toxiproxy(test.config.hosts)
    from harness.runner import run_test

    run_dir = run_test(test)
    print(run_dir / "report.html")
    return store.verdict_exit(run_dir)


def _cleanup() -> int:
    from harness.runner import clean_leftovers, say

    cleaned, pruned = clean_leftovers()
    say(f"cleaned up {len(cleaned)} leftover cluster(s) and {len(pruned)} stale lazyfs "
        "registry entr" + ("y" if len(pruned) == 1 else "ies"))
    return Exit.VALID
