"""`harness campaign FILE.toml`: a matrix of tests, resumable, with an index page."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from checkers.exitcodes import Exit
from harness import campaign_spec
from harness.commands.argtypes import campaign_seeds, parse_duration, systems

NAME = "campaign"
HELP = "run a matrix of tests from a TOML file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE.toml")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted night")
    parser.add_argument("--time-budget", type=parse_duration, metavar="DURATION",
                        help="stop starting new runs after this long (e.g. 2h, 30m)")
    parser.add_argument("--seeds", type=campaign_seeds, metavar="A-B|1,2,5",
                        help="replace the file's top-level seeds (configs with their own keep them)")
    parser.add_argument("--config", action="append", dest="only", metavar="NAME",
                        help="run only this config (repeatable)")
    parser.add_argument("--systems", type=systems, metavar="S1,S2,...",
                        help="run every cell on each of these systems side by side: sim, "
                             "embedded, kafka[:VERSION] (replaces the file's `systems`)")


def main(args: argparse.Namespace) -> int:
    """Exit 1 on a regression night, or on a New finding (one no earlier night of this
    campaign had) in an `expect = "no-loss"` config, so a cron job or CI can alert on it;
    else 3 when a cell could not be run or checked, 2 when one is unknown, 0 on a pass."""
    # a file that is not there or not a campaign: refused before the runner and the reports
    spec = campaign_spec.load_spec(args.file, args.seeds, args.only, args.systems)
    from harness.campaign import run_campaign
    from harness.report.nightly import compare_nights

    folder = run_campaign(args.file, args.resume, args.time_budget,
                          seeds=args.seeds, only=args.only, systems=args.systems, spec=spec)
    state = json.loads((Path(folder) / "campaign.json").read_text())
    diff = compare_nights(Path(folder))
    return night_exit(state, new_bad=diff is not None and bool(diff.new_in_no_loss))


def night_exit(state: dict[str, Any], *, new_bad: bool) -> Exit:
    """The exit code of a finished night: a night whose every run errored is no pass."""
    if state.get("verdict") == "regression" or new_bad:
        return Exit.INVALID
    outcomes = {cell.get("outcome") for cell in state.get("cells", [])}
    if "error" in outcomes:
        return Exit.ERROR
    return Exit.UNKNOWN if "unknown" in outcomes else Exit.VALID
