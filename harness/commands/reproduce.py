"""`harness reproduce RUN_DIR`: re-run a results folder's test with its recorded schedule.
`harness reproduce --schedule minimal.json [--times N]`: run a minimal reproduction written by
`harness shrink` on real hosts N times and count how often its anomaly class occurs."""

from __future__ import annotations

import argparse
from pathlib import Path

from checkers.exitcodes import UserError
from harness.reproduce import reproduce, reproduce_schedule

NAME = "reproduce"
HELP = "re-run a results folder's test and schedule, or a minimal reproduction on real hosts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", nargs="?")
    parser.add_argument("--schedule", type=Path, metavar="MINIMAL.json",
                        help="run this minimal reproduction (from `harness shrink`) on real hosts")
    parser.add_argument("--times", type=int, default=1, metavar="N",
                        help="with --schedule: how many real runs (default 1)")


def main(args: argparse.Namespace) -> int:
    if args.schedule is not None:
        return reproduce_schedule(args.schedule, args.times)
    if args.run_dir is None:
        raise UserError("harness reproduce needs RUN_DIR or --schedule MINIMAL.json")
    return reproduce(args.run_dir)
