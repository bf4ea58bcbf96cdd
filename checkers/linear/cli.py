"""``python -m checkers.linear HISTORY --model M``: print the verdict JSON.

Exit status (checkers.exitcodes): 0 valid, 1 invalid, 2 unknown (budget exhausted), 3 error
(bad input, bad usage, or a bug -- including a failed Spark job).

The keys of a kv history are searched in parallel on Spark when the history has at least
``--spark-min-ops`` ops (default checkers.linear.parallel.SPARK_MIN_OPS); smaller histories
are searched in this process, which is faster than starting Spark.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from checkers.exitcodes import Exit, Parser, UserError, guarded
from checkers.linear import edn
from checkers.linear.check import Runner, check, run_local
from checkers.linear.history import freeze, pair
from checkers.linear.importers import plain, read_events
from checkers.linear.models import KV_REGISTERS, MODELS, NIL_READS, Model, make_model
from checkers.linear.search import Budget


def add_model_options(p: argparse.ArgumentParser) -> None:
    """The options shared by this CLI and `harness check --model`."""
    p.add_argument("--kv-register", default="auto", choices=KV_REGISTERS,
                   help="the model of each key of a kv history (default: %(default)s: "
                        "append-register for get/put/append ops, else cas-register)")
    p.add_argument("--initial", metavar="EDN", default=None,
                   help="initial value of the register(s), as an EDN/JSON literal, e.g. 0, "
                        "'\"\"' or nil (default: nil; \"\" for get/put/append, as Porcupine)")
    p.add_argument("--nil-reads", default="value", choices=NIL_READS,
                   help="an ok read of nil: 'value' (ours: the register holds nil) or "
                        "'unknown' (Knossos: a read whose value is unknown) "
                        "(default: %(default)s)")
    p.add_argument("--spark-min-ops", type=int, default=None, metavar="N",
                   help="search kv keys on Spark only for histories of at least N ops "
                        "(default: checkers.linear.parallel.SPARK_MIN_OPS; 0: always); "
                        "`harness check` of a Kafka history: check it in this process below N "
                        "ops (default: the run's [checker] spark_min_ops, 0: always Spark)")


def model_from_args(args: argparse.Namespace) -> Model:
    kwargs: dict[str, Any] = {"nil_reads": args.nil_reads}
    if args.initial is not None:
        try:
            kwargs["initial"] = freeze(plain(edn.loads(args.initial)))
        except edn.EdnError as e:
            raise UserError(f"--initial {args.initial!r} is not an EDN value: {e.reason}") from None
    return make_model(args.model, args.kv_register, **kwargs)


def spark_runner_from_args(args: argparse.Namespace) -> Runner:
    from checkers.linear.parallel import SPARK_MIN_OPS, spark_runner  # Spark only if used

    min_ops = SPARK_MIN_OPS if args.spark_min_ops is None else args.spark_min_ops
    return spark_runner(args.spark_master, min_ops)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m checkers.linear", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("history", help="history file: .jsonl (ours), .edn or .txt (Jepsen, "
                                   "Porcupine)")
    p.add_argument("--model", required=True, choices=sorted(MODELS))
    add_model_options(p)
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
    return spark_runner_from_args(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return guarded("python -m checkers.linear", lambda: _check(args))


def _check(args: argparse.Namespace) -> int:
    model = model_from_args(args)
    ops = pair(read_events(args.history))
    verdict = check(ops, model, Budget.of(args.budget_s, args.max_states),
                    _runner(args, args.model == "kv"))
    json.dump(verdict, sys.stdout, indent=2, default=repr)
    print()
    return Exit.of(verdict["valid"])
