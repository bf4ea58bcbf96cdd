"""`harness reproduce RUN_DIR`: re-run a results folder's test with its recorded schedule.
`harness reproduce --schedule minimal.json [--times N] [--system S]`: run a minimal reproduction
written by `harness shrink` N times, on real hosts or on another system (its faults by role),
and count how often its anomaly class occurs."""

from __future__ import annotations

import argparse
from pathlib import Path

from checkers.exitcodes import UserError
from harness.commands.argtypes import system
from harness.minimal import load_minimal

NAME = "reproduce"
HELP = "re-run a results folder's test and schedule, or a minimal reproduction on real hosts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", nargs="?")
    parser.add_argument("--schedule", type=Path, metavar="MINIMAL.json",
                        help="run this minimal reproduction (from `harness shrink`) on real hosts")
    parser.add_argument("--times", type=int, default=1, metavar="N",
                        help="with --schedule: how many runs (default 1)")
    parser.add_argument("--system", type=system, metavar="SYSTEM",
                        help="with --schedule: run it on sim, embedded or kafka[:VERSION], each "
                             "fault aimed at the part its node played (leader, follower, ...)")
    parser.add_argument("--set", action="append", default=[], dest="sets", metavar="K=V",
                        help="with --schedule: change a setting of its config (repeatable), "
                             "e.g. system.eligible.leader.replicas.enable=true for a safe twin")


def main(args: argparse.Namespace) -> int:
    if args.schedule is not None:
        minimal = load_minimal(args.schedule)  # a bad file: refused before the runners' imports
        from harness.reproduce import reproduce_schedule

        return reproduce_schedule(args.schedule, minimal, args.times, args.system, args.sets)
    if args.sets:
        raise UserError("--set needs --schedule MINIMAL.json")
    if args.system is not None:
        raise UserError("--system needs --schedule MINIMAL.json")
    if args.run_dir is None:
        raise UserError("harness reproduce needs RUN_DIR or --schedule MINIMAL.json")
    from harness.reproduce import reproduce

    return reproduce(args.run_dir)
