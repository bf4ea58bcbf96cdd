"""The `harness` command line: the parser built from harness.commands, and the exit-code
contract (checkers.exitcodes): 0 valid, 1 invalid, 2 unknown, 3 error, 130 interrupted,
143 terminated (SIGTERM: the same teardown as Ctrl-C, so no host, process or rule is left).

User errors (a bad config, a bad path) print one line; a bug prints a short traceback; both
exit 3, so neither can be mistaken for a verdict."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from checkers.exitcodes import Exit, Parser, guarded, terminate_as_interrupt
from harness.commands import COMMANDS


def environment_errors() -> tuple[type[Exception], ...]:
    """The environment's faults, not the program's: a host that cannot be reached, a Kafka that
    is not installed or does not answer. One line and exit 3, like bad input; never a traceback.
    Imported once something went wrong: they live beside paramiko and confluent-kafka."""
    from control.kafka_install import KafkaInstallError
    from control.remote import RemoteError
    from workloads.kafka_admin import KafkaAdminError
    return (RemoteError, KafkaInstallError, KafkaAdminError)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="harness",
                     description="Chaos and linearizability tests of Kafka-style replication.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=Parser)
    for command in COMMANDS:
        command.add_arguments(sub.add_parser(command.NAME, help=command.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0), or a usage error already printed (3)
        return e.code if isinstance(e.code, int) else Exit.ERROR
    args.argv = ["harness", *argv]
    handlers = {c.NAME: c.main for c in COMMANDS}
    terminate_as_interrupt()
    # A host that cannot be reached, or a command on it that failed, is the environment's
    # fault: one line, exit 3, as a bad config is (RemoteError says which host and why)
    return guarded("harness", lambda: handlers[args.command](args), environment=environment_errors)


if __name__ == "__main__":
    sys.exit(main())
