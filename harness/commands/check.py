"""`harness check PATH`: a run folder or history.jsonl as a Kafka history, a Jepsen Kafka
history.edn (translated into ours first), or with `--model` any history (.jsonl, Jepsen .edn
or .txt, Porcupine .txt) for linearizability."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from checkers.exitcodes import Exit, UserError, exit_code
from checkers.history_paths import locate, output_paths, refuse_foreign_results
from checkers.linear.cli import add_model_options
from checkers.linear.models import MODELS

NAME = "check"
HELP = "check a run folder or a history.jsonl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, metavar="PATH")
    parser.add_argument("--spark-master", metavar="URL",
                        help="Spark master (default local[*] or $HARNESS_SPARK_MASTER)")
    parser.add_argument("--model", choices=sorted(MODELS),
                        help="check a history of another object (.jsonl, Jepsen .edn/.txt or "
                             "Porcupine .txt) for linearizability with this model instead of "
                             "as a Kafka history")
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="with --model: give up with verdict unknown after this long")
    parser.add_argument("--in-process", action="store_true",
                        help="check in this process, without Spark (a Kafka history with the "
                             "pandas reference implementation)")
    add_model_options(parser)


def _linearizable(args: argparse.Namespace) -> int:
    from checkers.linear.check import check, run_local
    from checkers.linear.cli import model_from_args, spark_runner_from_args
    from checkers.linear.history import pair
    from checkers.linear.importers import read_events
    from checkers.linear.search import Budget
    from control.files import write_text_atomic

    model = model_from_args(args)
    ops = pair(read_events(args.path))
    runner = run_local if args.in_process else spark_runner_from_args(args)
    verdict = check(ops, model, Budget.of(args.budget_s), runner)
    out = args.path.parent / f"{args.path.stem}.linearizability.json"
    write_text_atomic(out, json.dumps(verdict, indent=2, default=str))  # never through a symlink
    summary = {"valid": verdict["valid"], "model": args.model, "engine": verdict["engine"],
               "results": str(out)}
    if verdict["valid"] is False:
        from checkers.linear.visualize import write_visualization

        html = args.path.parent / f"{args.path.stem}.linearizability.html"
        write_visualization(html, ops, model, verdict)
        summary["visualization"] = str(html)
    print(json.dumps(summary))
    return Exit.of(verdict["valid"])


def _jepsen_kafka(args: argparse.Namespace) -> int:
    from checkers.jepsen_kafka import is_jepsen_kafka, translate
    from control.files import check_regular_file

    check_regular_file(args.path)  # a FIFO is refused, not read for ever (nor "not Jepsen")
    if not is_jepsen_kafka(args.path):
        raise UserError(f"{args.path} is not a Jepsen Kafka history (no :send/:poll/:txn ops "
                        f"with micro-op values): check other objects with --model "
                        f"{'|'.join(sorted(MODELS))}")
    run_dir = translate(args.path, args.path.parent / f"{args.path.stem}.kafka")
    print(f"translated {args.path} into {run_dir / 'history.jsonl'}", file=sys.stderr)
    return _kafka(run_dir, args)


def _kafka(path: Path, args: argparse.Namespace) -> int:
    # a history that is not there, a FIFO or another history's results: refused before the
    # checks (Spark, pandas) are imported, which check_path then does again
    history, _ = locate(path)
    refuse_foreign_results(output_paths(history)[0], history)
    from checkers.check import check_path

    results = check_path(path, spark_master=args.spark_master,
                         backend="reference" if args.in_process else "spark",
                         spark_min_ops=args.spark_min_ops)
    for err in results.get("errors", []):
        print(err, file=sys.stderr)
    summary = {name: a.get("count") for name, a in results.get("anomalies", {}).items()}
    print(json.dumps({"valid": results.get("valid"), "anomalies": summary,
                      "results": str(output_paths(history)[0])}))
    return exit_code(results)


def main(args: argparse.Namespace) -> int:
    if args.model:
        return _linearizable(args)
    if args.path.suffix in (".edn", ".txt"):
        return _jepsen_kafka(args)
    return _kafka(args.path, args)
