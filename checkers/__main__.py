"""`python -m checkers PATH [--spark-master URL]`: check a run folder or history.jsonl."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from checkers.exitcodes import Parser, exit_code, guarded


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m checkers", description=__doc__)
    ap.add_argument("path", type=Path, help="a run folder or a history.jsonl")
    ap.add_argument("--spark-master", help="Spark master URL (default: HARNESS_SPARK_MASTER, "
                    "the test's checker.spark_master, else local[*])")
    args = ap.parse_args(argv)
    return guarded("python -m checkers", lambda: _check(args))


def _check(args: argparse.Namespace) -> int:
    # pandas, Arrow and Spark, imported here: not for --help or a usage error
    from checkers.check import check_path

    results = check_path(args.path, args.spark_master)
    for err in results.get("errors", []):
        print(err, file=sys.stderr)
    summary = {n: a["count"] for n, a in results["anomalies"].items()}
    print(json.dumps({"valid": results["valid"], "anomalies": summary}))
    for note in results.get("notes", []):
        print(f"note: {note}")
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
