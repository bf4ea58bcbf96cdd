"""`harness campaign FILE.toml`: a matrix of tests, resumable, with an index page."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.campaign import run_campaign
from harness.commands.argtypes import parse_duration, systems
from harness.report.nightly import compare_nights

NAME = "campaign"
HELP = "run a matrix of tests from a TOML file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE.toml")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted night")
    parser.add_argument("--time-budget", type=parse_duration, metavar="DURATION",
                        help="stop starting new runs after this long (e.g. 2h, 30m)")
    parser.add_argument("--seeds", metavar="A-B|1,2,5",
                        help="replace the file's top-level seeds (configs with their own keep them)")
    parser.add_argument("--config", action="append", dest="only", metavar="NAME",
                        help="run only this config (repeatable)")
    parser.add_argument("--systems", type=systems, metavar="S1,S2,...",
                        help="run every cell on each of these systems side by side: sim, "
                             "embedded, kafka[:VERSION] (replaces the file's `systems`)")


def main(args: argparse.Namespace) -> int:
    """Exit 1 on a regression night, or on a New finding (one no earlier night of this
    campaign had) in an `expect = "no-loss"` config, so a cron job or CI can alert on it."""
    folder = run_campaign(args.file, args.resume, args.time_budget,
                          seeds=args.seeds, only=args.only, systems=args.systems)
    state = json.loads((Path(folder) / "campaign.json").read_text())
    diff = compare_nights(Path(folder))
    new_bad = diff is not None and bool(diff.new_in_no_loss)
    return 1 if state.get("verdict") == "regression" or new_bad else 0
