"""`harness serve`: browse results/ over HTTP, bound to 127.0.0.1 only."""

from __future__ import annotations

import argparse

from checkers.exitcodes import Exit
from harness.commands.argtypes import port

NAME = "serve"
HELP = "browse results/ over HTTP on 127.0.0.1"
DEFAULT_PORT = 8000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=port, default=DEFAULT_PORT, metavar="P")


def main(args: argparse.Namespace) -> int:
    from harness.serve import serve
    from harness.store import default_results_dir

    serve(default_results_dir(), args.port)
    return Exit.VALID
