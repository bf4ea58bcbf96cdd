"""``python -m checkers.linear HISTORY --model M``: print the verdict JSON.

Exit status: 0 valid, 1 invalid, 2 unknown (budget exhausted), 3 bad input or usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from checkers.linear.check import Runner, check, run_local
from checkers.linear.history import HistoryError, pair
from checkers.linear.importers import read_events
from checkers.linear.models import MODELS, make_model
from checkers.linear.search import Budget

EXIT = {True: 0, False: 1, "unknown": 2}
EXIT_BAD_INPUT = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse would exit 2, which here means "unknown"
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m checkers.linear", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("history", help="history file: .jsonl (ours), .edn or .txt (Jepsen)")
    p.add_argument("--model", required=True, choices=sorted(MODELS))
    p.add_argument("--kv-register", default="cas-register", choices=["register", "cas-register"],
                   help="the model of each key of a kv history (default: %(default)s)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="wall-time limit in seconds; past it the verdict is unknown")
    p.add_argument("--max-states", type=int, default=None,
                   help="limit on configurations explored per partition")
    p.add_argument("--spark-master", default=None,
                   help="Spark master for checking the partitions (keys) of a kv history in "
                        "parallel (default: $HARNESS_SPARK_MASTER or local[*])")
    p.add_argument("--in-process", action="store_true",
                   help="check partitions in this process, without starting Spark")
    return p


def _runner(args: argparse.Namespace, partitioned: bool) -> Runner:
    if args.in_process or not partitioned:
        return run_local
    from checkers.linear.parallel import spark_runner  # Spark only when it is used
    return spark_runner(args.spark_master)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        model = make_model(args.model, args.kv_register)
        ops = pair(read_events(args.history))
        verdict = check(ops, model, Budget.of(args.budget_s, args.max_states),
                        _runner(args, args.model == "kv"))
    except (HistoryError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    json.dump(verdict, sys.stdout, indent=2, default=repr)
    print()
    return EXIT[verdict["valid"]]
