"""One module per `harness` subcommand: each has `NAME`, `HELP`, `add_arguments(parser)` and
`main(args) -> int`. harness.cli builds the parser from them and maps errors onto the exit-code
contract (checkers.exitcodes).

A command module imports at its top only what its parser needs and what reading and refusing
its input needs; the engine it drives (the runner, the simulator's search, the checks, which
bring pandas, Spark, Arrow, paramiko and confluent-kafka) it imports in `main`, once the input
is accepted. `harness --help`, a usage error or a bad file is then answered in about 0.6 s
instead of 2.6 (benchmarks/cli_startup.py; tests/harness/test_cli.py holds the commands to it)."""

from harness.commands import (
    campaign,
    check,
    mutate,
    report,
    reproduce,
    run,
    serve,
    shrink,
    simulate,
    vms,
)

COMMANDS = (run, simulate, check, report, campaign, reproduce, shrink, serve, vms, mutate)
