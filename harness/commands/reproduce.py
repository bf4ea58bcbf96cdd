"""`harness reproduce RUN_DIR`: re-run a results folder's test with its recorded schedule."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.reproduce import reproduce

NAME = "reproduce"
HELP = "re-run a results folder's test and schedule"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")


def main(args: argparse.Namespace) -> int:
    return reproduce(args.run_dir)
