"""`harness report PATH`: (re)write the HTML of a run or campaign folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from checkers.exitcodes import Exit

NAME = "report"
HELP = "(re)write the HTML of a run or campaign folder"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, metavar="PATH")


def main(args: argparse.Namespace) -> int:
    from harness.campaign import refresh_outcomes
    from harness.report import is_campaign_folder, report_path

    if is_campaign_folder(args.path):
        refresh_outcomes(args.path)  # its runs may have been re-checked since
    print(report_path(args.path))
    return Exit.VALID
