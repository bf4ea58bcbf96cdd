"""The `harness` command line (DESIGN.md "Harness command line").

Each subcommand imports its implementation only when run, so a missing piece is reported as
"not available yet" instead of breaking the other subcommands. User errors (bad config, bad
path) print one line and exit 2; Ctrl-C prints one line and exits 130.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.config import ConfigError, from_args
from harness.store import default_results_dir

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
DEFAULT_PORT = 8000
PROJECT_PACKAGES = ("harness", "nemesis", "workloads", "checkers", "replication")
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


class NotAvailable(RuntimeError):
    """The subcommand's implementation is not in this checkout (yet)."""


def parse_duration(text: str) -> int | float:
    """"2h", "30m", "90s", "1h30m", "1.5h" or bare seconds ("90") -> seconds (> 0)."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        seconds = float(s)
    elif s and _DURATION.sub("", s) == "":
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(s))
    else:
        raise argparse.ArgumentTypeError(
            f"bad duration {text!r}: expected e.g. 90, 90s, 30m, 2h, 1h30m")
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: must be > 0")
    return int(seconds) if seconds.is_integer() else seconds


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"bad port {text!r}: expected 1..65535")
    return port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness", description="Chaos and linearizability tests of Kafka-style replication.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run one test: hosts, nodes, workload, nemesis, check")
    run.add_argument("--config", metavar="FILE.toml",
                     help="test file, or a profile name from harness/profiles (e.g. fast)")
    run.add_argument("--nodes", type=int, metavar="N", help="hosts: n1 controller, rest brokers")
    run.add_argument("--nemesis", metavar="LIST",
                     help="comma-separated faults, e.g. kill,partition; 'none' for none")
    run.add_argument("--time-limit", type=parse_duration, metavar="S",
                     help="seconds of workload and nemesis (90, 90s, 5m)")
    run.add_argument("--seed", type=int, metavar="N")
    run.add_argument("--set", action="append", default=[], metavar="K=V",
                     help="override a setting, e.g. system.min.insync.replicas=2 (repeatable)")
    run.add_argument("--cleanup-only", action="store_true",
                     help="only tear down what crashed or interrupted runs left behind")

    check = sub.add_parser("check", help="check a run folder or a history.jsonl")
    check.add_argument("path", type=Path, metavar="PATH")
    check.add_argument("--spark-master", metavar="URL",
                       help="Spark master (default local[*] or $HARNESS_SPARK_MASTER)")
    check.add_argument("--model", choices=["register", "cas-register", "kv"],
                       help="check a history of another object (.jsonl or Jepsen .edn) for "
                            "linearizability with this model instead of as a Kafka history")
    check.add_argument("--budget-s", type=float, default=300.0,
                       help="with --model: give up with verdict unknown after this long")

    report = sub.add_parser("report", help="(re)write the HTML of a run or campaign folder")
    report.add_argument("path", type=Path, metavar="PATH")

    campaign = sub.add_parser("campaign", help="run a matrix of tests from a TOML file")
    campaign.add_argument("file", type=Path, metavar="FILE.toml")
    campaign.add_argument("--resume", action="store_true", help="continue an interrupted night")
    campaign.add_argument("--time-budget", type=parse_duration, metavar="DURATION",
                          help="stop starting new runs after this long (e.g. 2h, 30m)")

    reproduce = sub.add_parser("reproduce", help="re-run a results folder's test and schedule")
    reproduce.add_argument("run_dir", type=Path, metavar="RUN_DIR")

    serve = sub.add_parser("serve", help="browse results/ over HTTP on 127.0.0.1")
    serve.add_argument("--port", type=_port, default=DEFAULT_PORT, metavar="P")
    return parser


def _implementation(module: str, attr: str, command: str) -> Callable[..., Any]:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        # A module of this project missing means "not yet"; a missing third-party
        # dependency is a broken install and keeps its traceback.
        if e.name is not None and e.name.split(".")[0] in PROJECT_PACKAGES:
            raise NotAvailable(f"`harness {command}` is not available yet "
                               f"({e.name} is not in this checkout)") from None
        raise
    fn = getattr(mod, attr, None)
    if fn is None:
        raise NotAvailable(f"`harness {command}` is not available yet ({module}.{attr} is missing)")
    return fn


def _run(args: argparse.Namespace) -> Any:
    # Resolve the config first so a bad test file fails before any host is touched.
    args.resolved_config = None if args.cleanup_only else from_args(args)
    return _implementation("harness.runner", "run_from_cli", "run")(args)


def _check_linearizable(args: argparse.Namespace) -> int:
    check_file = _implementation("checkers.linear", "check_file", "check")
    runner_kwargs = {}
    if args.spark_master:
        runner_kwargs["runner"] = _implementation("checkers.linear.parallel", "spark_runner",
                                                  "check")(args.spark_master)
    verdict = check_file(args.path, args.model, budget_s=args.budget_s, **runner_kwargs)
    out = args.path.parent / f"{args.path.stem}.linearizability.json"
    out.write_text(json.dumps(verdict, indent=2, default=str))
    print(json.dumps({"valid": verdict["valid"], "model": args.model, "results": str(out)}))
    exits = _implementation("checkers.linear.cli", "EXIT", "check")
    return exits.get(verdict["valid"], exits["unknown"])


def _check(args: argparse.Namespace) -> int:
    if args.model or args.path.suffix in (".edn", ".txt"):
        if not args.model:
            raise ConfigError("an .edn/.txt history needs --model register|cas-register|kv")
        return _check_linearizable(args)
    check_path = _implementation("checkers.check", "check_path", "check")
    exit_code = _implementation("checkers.check", "exit_code", "check")
    results = check_path(args.path, spark_master=args.spark_master)
    for err in results.get("errors", []):
        print(err, file=sys.stderr)
    summary = {name: a.get("count") for name, a in results.get("anomalies", {}).items()}
    print(json.dumps({"valid": results.get("valid"), "anomalies": summary}))
    return exit_code(results)


def _report(args: argparse.Namespace) -> int:
    written = _implementation("harness.report", "report_path", "report")(args.path)
    if written is not None:
        print(written)
    return 0


def _campaign(args: argparse.Namespace) -> int:
    """Exit 1 on a regression night, so a cron job or CI can alert on it."""
    run_campaign = _implementation("harness.campaign", "run_campaign", "campaign")
    folder = run_campaign(args.file, args.resume, args.time_budget)
    state = json.loads((Path(folder) / "campaign.json").read_text())
    return 1 if state.get("verdict") == "regression" else 0


def _reproduce(args: argparse.Namespace) -> Any:
    return _implementation("harness.reproduce", "reproduce", "reproduce")(args.run_dir)


def _serve(args: argparse.Namespace) -> Any:
    return _implementation("harness.serve", "serve", "serve")(default_results_dir(), args.port)


COMMANDS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "run": _run, "check": _check, "report": _report, "campaign": _campaign,
    "reproduce": _reproduce, "serve": _serve,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:  # --help, or a usage error argparse has already printed
            return e.code if isinstance(e.code, int) else EXIT_ERROR
        args.argv = ["harness", *argv]
        result = COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ConfigError, NotAvailable, FileNotFoundError, NotADirectoryError, ValueError) as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
