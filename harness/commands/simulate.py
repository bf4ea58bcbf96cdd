"""`harness simulate`: the test in the deterministic simulated world instead of on real hosts.

The same options, profiles and `--set` keys as `harness run`. One seed (`--seed N`, or the
config's) writes a run folder like `harness run` does; `--seeds A-B` searches a range of seeds
(on `--jobs` local processes, or on Spark with `--spark-master`), `--stop-after N` ends the
search at the Nth failing seed, and `--check-determinism` runs each seed twice and fails on
the first byte that differs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from checkers.exitcodes import Exit, UserError
from harness import store
from harness.campaign_spec import load_spec, seed_range
from harness.commands.argtypes import add_test_options
from harness.config import TestConfig, from_args, parse_fault_list, typed, with_sets, with_values
from harness.minimal import replay_test
from harness.pypy import INTERPRETERS, PYPY_MIN_SEEDS_PER_WORKER
from harness.sim_run import simulated
from harness.test import Test

NAME = "simulate"
HELP = "run the test in the deterministic simulator (one seed, or a search over seeds)"


def seeds_option(text: str) -> range:
    """"100-199" or "7" -> the seeds, inclusive, lazily (campaign_spec.seed_range)."""
    try:
        return seed_range(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_test_options(parser)
    parser.add_argument("--seeds", type=seeds_option, metavar="A-B",
                        help="search these seeds (inclusive) instead of running one")
    parser.add_argument("--stop-after", type=int, metavar="N",
                        help="with --seeds: stop once N seeds have failed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="with --seeds: local processes (default: the cores)")
    parser.add_argument("--spark-master", metavar="URL",
                        help="with --seeds: simulate on this Spark cluster instead")
    parser.add_argument("--interpreter", choices=INTERPRETERS, default="auto",
                        help="with --seeds: what simulates each seed (the checks stay on this "
                             "Python): auto (default: PyPy, installed by `make bootstrap`, for a "
                             f"search of at least {PYPY_MIN_SEEDS_PER_WORKER} seeds per job without "
                             "--stop-after, where its JIT pays off; else this Python), pypy or "
                             "cpython")
    parser.add_argument("--campaign", type=Path, metavar="FILE.toml",
                        help="take the test from a campaign file's cell (with --cell)")
    parser.add_argument("--cell", metavar="CONFIG[/MIX]",
                        help="with --campaign: the [[config]] (and nemesis mix) to simulate")
    parser.add_argument("--replay", type=Path, metavar="MINIMAL.json",
                        help="simulate a minimal reproduction written by `harness shrink` "
                             "(its seed, config and schedule): the same bytes as its run folder")
    parser.add_argument("--keep-going", action="store_true",
                        help="record protocol-invariant violations and run on to the final read "
                             "(default: the first violation ends the run; searches always go on)")
    parser.add_argument("--check-determinism", action="store_true",
                        help="run each seed twice (the second time in a fresh interpreter, PyPy "
                             "when installed, with another hash seed) and fail on the first "
                             "divergence")


def campaign_config(args: argparse.Namespace) -> dict:
    """The resolved config of a campaign cell, with --seed, --time-limit, --nodes, --nemesis
    and then every --set laid over it (a --config would replace the cell's: refused)."""
    if not args.cell:
        raise UserError("--campaign needs --cell CONFIG[/MIX]")
    if getattr(args, "config", None):
        raise UserError("--campaign takes the cell's config: use --set K=V to change it, "
                        "not --config")
    _, cells = load_spec(args.campaign)
    wanted = args.cell.split("/")
    for cell in cells:
        if [cell.config, cell.nemesis][:len(wanted)] == wanted:
            config = with_values(cell.resolved, _cell_overrides(args),
                                 source=f"{args.campaign} cell {cell.id}")
            sets = getattr(args, "set", None) or []
            return with_sets(config, sets) if sets else config
    known = sorted({f"{c.config}/{c.nemesis}" for c in cells})
    raise UserError(f"{args.campaign}: no cell {args.cell!r}; cells: {', '.join(known)}")


def _cell_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The options given beside --campaign, as dotted keys over the cell's config."""
    nemesis = getattr(args, "nemesis", None)
    given = {"seed": args.seed, "time_limit": args.time_limit,
             "nodes": getattr(args, "nodes", None),
             "nemesis.faults": parse_fault_list(nemesis) if nemesis is not None else None}
    return {key: value for key, value in given.items() if value is not None}


def main(args: argparse.Namespace) -> int:
    if args.replay:
        return _replay(args.replay)
    from harness.simulate import run_search, simulate_test

    config = simulated(typed(campaign_config(args) if args.campaign else from_args(args)))
    if args.check_determinism:
        return _determinism(config, args.seeds or [config.seed])
    test = Test.of(config, store.default_results_dir(), argv=sys.argv)
    if args.seeds:
        summary = run_search(test, args.seeds, jobs=max(1, args.jobs),
                             spark_master=args.spark_master, stop_after=args.stop_after,
                             interpreter=args.interpreter)
        if summary.errors:
            return Exit.ERROR
        return Exit.INVALID if summary.failing else Exit.VALID
    run_dir = simulate_test(test, keep_going=args.keep_going)
    print(run_dir / "report.html")
    return store.verdict_exit(run_dir)


def _replay(path: Path) -> int:
    test = replay_test(path, store.default_results_dir(), sys.argv)  # a bad file: refused here
    from harness.simulate import simulate_test

    run_dir = simulate_test(test, backend="reference", keep_going=True)
    print(run_dir / "report.html")
    return store.verdict_exit(run_dir)


def _determinism(config: TestConfig, seeds: list[int]) -> int:
    from harness.simulate import check_determinism

    for seed in seeds:
        divergence = check_determinism(config, seed)
        if divergence is not None:
            print(f"seed {seed}: the two runs diverged at {divergence}")
            return Exit.INVALID
        print(f"seed {seed}: identical history.jsonl, events.jsonl and schedule.json")
    return Exit.VALID
