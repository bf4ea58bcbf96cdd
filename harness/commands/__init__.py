"""One module per `harness` subcommand: each has `NAME`, `HELP`, `add_arguments(parser)` and
`main(args) -> int`. harness.cli builds the parser from them and maps errors onto the exit-code
contract (checkers.exitcodes)."""

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
