"""`harness mutate`: mutation analysis of the protocol code (docs/mutation.md).

Mutants of the safety-relevant modules of replication/ (harness/mutate/mutants.py), each
searched in the simulator over a campaign cell's seeds until its first seed that differs
from the unmutated code's same seed (harness/mutate/oracle.py: a safety or a liveness kill),
then the unit tests on the survivors; two scores per module and a report
(results/mutation/<stamp>/index.html)."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from checkers.exitcodes import Exit, UserError
from control.files import owned_dir
from harness import store
from harness.commands.simulate import campaign_config, seeds_option
from harness.config import typed
from harness.mutate import page
from harness.mutate.child import ROOT
from harness.mutate.mutants import MODULES, Mutant, mutants_of, resolve
from harness.mutate.race import race_all
from harness.mutate.score import (
    BASELINE,
    Cell,
    Result,
    Runner,
    local_runner,
    ran,
    search_all,
    spark_runner,
    unit_test_all,
)
from harness.sim_run import simulated

NAME = "mutate"
HELP = "mutation analysis: which small changes to the protocol the harness catches"
CLASSIFIED = ROOT / "campaigns" / "mutation-survivors.toml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modules", nargs="+", default=list(MODULES), metavar="PATH",
                        help="the modules to mutate (default: the safety-relevant ones)")
    parser.add_argument("--sample", type=int, metavar="N",
                        help="N mutants, as evenly as they go over the modules (default: all)")
    parser.add_argument("--sample-seed", type=int, default=1, metavar="S",
                        help="the seed of the sample (default 1)")
    parser.add_argument("--mutant", action="append", metavar="ID",
                        help="these mutants only (repeatable; ids as --list prints them)")
    parser.add_argument("--list", action="store_true", help="print the mutants' ids and stop")
    parser.add_argument("--show", metavar="ID", help="print one mutant's diff and stop")
    parser.add_argument("--rescore", type=Path, nargs="+", metavar="DIR",
                        help="write earlier campaigns' report (results/mutation/STAMP; several "
                             "are merged into a new folder, a later one's result of a mutant "
                             "taking the place of an earlier one's, its unit tests kept) again "
                             "with the hand classifications as they are now, and stop; a "
                             "campaign cut short is read from its progress.jsonl")
    parser.add_argument("--campaign", type=Path, default=ROOT / "campaigns" / "validation.toml",
                        metavar="FILE.toml", help="where the cells come from")
    parser.add_argument("--cell", action="append", metavar="CONFIG[/MIX]",
                        help="the cells to search, in order (repeatable; default: safe)")
    parser.add_argument("--seeds", type=seeds_option, default=seeds_option("1-20"), metavar="A-B",
                        help="each cell's seeds (default 1-20); a mutant stops at its first "
                             "failing seed")
    parser.add_argument("--block", type=int, default=10, metavar="N",
                        help="seeds per task (default 10)")
    parser.add_argument("--seed-timeout", type=float, default=30.0, metavar="S",
                        help="wall seconds a seed may take before its mutant counts as timed "
                             "out (default 30)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="tasks at a time, local or on Spark (default: the cores); with "
                             "--lanes, mutants at a time")
    parser.add_argument("--lanes", type=lanes_option, metavar="N",
                        help="race each mutant's cells: seed 1 of every cell, then seed 2, ..., "
                             "dealt to N children at once, the first kill stopping the others "
                             "(default: every seed of a cell before the next cell, round by "
                             "round)")
    parser.add_argument("--spark-master", metavar="URL",
                        help="run each task as a Spark task on this master (e.g. local[2])")
    parser.add_argument("--unit-tests", choices=("survivors", "all", "none"),
                        default="survivors",
                        help="which mutants the unit tests run on (default: the harness's "
                             "survivors)")
    parser.add_argument("--classified", type=Path, default=CLASSIFIED, metavar="FILE.toml",
                        help="hand classifications of survivors (equivalent or missed)")


def lanes_option(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--lanes takes a positive integer, got {text!r}")
    return n


def chosen(args: argparse.Namespace) -> list[Mutant]:
    if args.mutant:
        try:
            return [resolve(ROOT, i) for i in args.mutant]
        except ValueError as e:
            raise UserError(str(e)) from None
    per_module = {m: mutants_of(ROOT, m) for m in args.modules}
    if args.sample is None:
        return [m for ms in per_module.values() for m in ms]
    return sample(per_module, args.sample, args.sample_seed)


def sample(per_module: dict[str, list[Mutant]], n: int, seed: int) -> list[Mutant]:
    """`n` mutants spread evenly over the modules (a module with fewer gives all it has),
    each module's drawn by its own seeded generator, so adding a module changes no other's."""
    quota = {m: 0 for m in per_module}
    while sum(quota.values()) < n and any(quota[m] < len(ms) for m, ms in per_module.items()):
        for m, ms in per_module.items():
            if quota[m] < len(ms) and sum(quota.values()) < n:
                quota[m] += 1
    return [x for m, ms in per_module.items()
            for x in sorted(random.Random(f"{seed}:{m}").sample(ms, quota[m]),
                            key=lambda x: (x.line, x.col))]


def cells(args: argparse.Namespace) -> list[Cell]:
    out = []
    for name in args.cell or ["safe"]:
        config = campaign_config(argparse.Namespace(campaign=args.campaign, cell=name, seed=None,
                                                    time_limit=None))
        out.append(Cell(name, simulated(typed(config))))
    return out


def _say(result: Result) -> None:
    where = f" at {result.cell} seed {result.seed}" if result.seed is not None else ""
    by = f" by {', '.join(result.by)}" if result.by else ""
    kind = f" ({result.kind})" if result.kind else ""
    reach = f"; {ran(result)}" if ran(result) else ""
    print(f"[mutate] {result.outcome}{kind}{where}{by}: {result.id} ({result.wall_s:.0f} s"
          f"{reach})", file=sys.stderr, flush=True)


def _progress(out: Path) -> Callable[[Result], None]:
    """Say each decided mutant, and append it to progress.jsonl: a campaign cut short still
    leaves what it learnt."""
    def on_result(result: Result) -> None:
        _say(result)
        with (out / "progress.jsonl").open("a") as f:
            f.write(json.dumps(asdict(result)) + "\n")
    return on_result


def main(args: argparse.Namespace) -> int:
    if args.show:
        m = _mutant(args.show)
        print(f"{m.id} (line {m.line}, {m.place}): {m.what}\n{m.diff()}", end="")
        return Exit.VALID
    if args.rescore:
        return _rescore(args)
    mutants = chosen(args)
    if args.list:
        for m in mutants:
            print(f"{m.id}  line {m.line}: {m.what}")
        return Exit.VALID
    out = owned_dir(store.default_results_dir() / "mutation"
                    / time.strftime("%Y%m%dT%H%M%S", time.gmtime()))
    runner = _runner(args, args.jobs)
    started = time.perf_counter()
    results: dict[str, Result] = {}
    try:
        # a race's baseline: as many blocks at a time as the race has children
        search = (partial(race_all, lanes=args.lanes,
                          baseline_runner=_runner(args, args.jobs * args.lanes))
                  if args.lanes else search_all)
        results = search([m.id for m in mutants], cells(args), list(args.seeds), runner,
                         block=args.block, seed_timeout=args.seed_timeout,
                         on_result=_progress(out))
        search_s = time.perf_counter() - started
        unit_test_all(results, args.unit_tests, runner)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (exit 130 or 143): the runner has killed
        _cut_short(args, out, mutants, results)  # its children; keep what was decided
        raise
    seeds = list(args.seeds)
    wall_s = time.perf_counter() - started
    meta = {"argv": " ".join(args.argv), "cells": args.cell or ["safe"],
            "seeds": f"{seeds[0]}-{seeds[-1]}", "mutants": len(mutants),
            "runner": f"{args.spark_master or 'local'}, {args.jobs} tasks at a time",
            "search": (f"raced, {args.lanes} lanes a mutant" if args.lanes
                       else "cell by cell, round by round"),
            "search wall s": round(search_s, 1), "total wall s": round(wall_s, 1),
            "mutants per hour (search)": round(len(mutants) * 3600 / search_s, 1),
            "mutants per hour (with unit tests)": round(len(mutants) * 3600 / wall_s, 1)}
    return _report(args, out, mutants, results, meta)


def _runner(args: argparse.Namespace, jobs: int) -> Runner:
    return spark_runner(args.spark_master, jobs) if args.spark_master else local_runner(jobs)


def _cut_short(args: argparse.Namespace, out: Path, mutants: list[Mutant],
               results: dict[str, Result]) -> None:
    """The report of an interrupted campaign: the mutants decided so far (from progress.jsonl
    while the search ran; every result if the unit tests were running), which `--rescore`
    reads and merges like any other campaign's."""
    if not results and (out / "progress.jsonl").is_file():
        results = {r["id"]: Result(**r) for r in _saved(out)["results"]}
    decided = {i: r for i, r in results.items() if r.outcome != "alive"}
    meta = {"argv": " ".join(args.argv), "cut short": "interrupted (Ctrl-C or SIGTERM): "
            f"{len(decided)} of {len(mutants)} mutants decided", "mutants": len(mutants)}
    path = page.write(out, decided, {m.id: m for m in mutants}, _hand(args.classified), meta)
    print(f"[mutate] {meta['cut short']}: {path}", file=sys.stderr, flush=True)


def _mutant(mutant_id: str, diff: str | None = None) -> Mutant:
    try:
        return resolve(ROOT, mutant_id, diff)
    except ValueError as e:
        raise UserError(str(e)) from None


def _rescore(args: argparse.Namespace) -> int:
    """The report of earlier campaigns again, with the hand classifications as they are now.
    Several folders are merged into a new one, a later campaign's result of a mutant taking
    the place of an earlier one's (a mutant run again under a changed rule). Older ids (by
    line) are found again by their recorded diffs and keyed by the stable id."""
    results: dict[str, Result] = {}
    mutants: dict[str, Mutant] = {}
    for folder in args.rescore:
        saved = _saved(folder)
        now, gone = _still_made(folder, saved.pop("diffs"))
        mutants.update({m.id: m for m in now.values()})
        ran = saved.get("cells")  # a campaign cut short, or an older one, does not say
        for r in saved.pop("results"):
            if r["id"] in gone:
                continue
            result = _older(Result(**r))
            result.id = now[r["id"]].id if r["id"] in now else r["id"]
            results[result.id] = _merged(results.get(result.id), result, ran)
    if len(args.rescore) == 1:
        out, meta = args.rescore[0], {k: v for k, v in saved.items() if k != "scores"}
    else:
        out = owned_dir(store.default_results_dir() / "mutation"
                        / time.strftime("%Y%m%dT%H%M%S-merged", time.gmtime()))
        meta = {"merged": " ".join(map(str, args.rescore)), "mutants": len(mutants)}
    return _report(args, out, list(mutants.values()), results, meta)


def _still_made(folder: Path, diffs: dict[str, str]) -> tuple[dict[str, Mutant], set[str]]:
    """The recorded mutants the code as it is now still makes, by recorded id; and the ids of
    those whose code is gone (a function deleted or moved out of the module since), whose
    results are left out of the score, with a warning."""
    now, gone = {}, set()
    for i, diff in diffs.items():
        try:
            now[i] = resolve(ROOT, i, diff)
        except ValueError as e:
            print(f"{folder}: {e}; its result is left out", file=sys.stderr)
            gone.add(i)
    return now, gone


def _saved(folder: Path) -> dict[str, Any]:
    """A campaign's mutants.json, or, for one cut short before it was written, what its
    progress.jsonl holds: the mutants decided by then (the last line of each), their diffs
    rebuilt from their ids."""
    try:
        if (folder / "mutants.json").is_file() or not (folder / "progress.jsonl").is_file():
            return json.loads((folder / "mutants.json").read_text())
        lines = (folder / "progress.jsonl").read_text().splitlines()
    except (OSError, ValueError) as e:
        raise UserError(f"{folder}: no campaign's mutants.json ({e})") from None
    decided = {r["id"]: r for r in map(json.loads, filter(None, lines))}
    return {"cut short": f"{len(decided)} mutants decided in {folder / 'progress.jsonl'}",
            "results": list(decided.values()),
            "diffs": dict.fromkeys(i for i in decided if i != BASELINE)}


def _older(result: Result) -> Result:
    """A result saved before kills had a kind: one by a seed that raised or acknowledged
    nothing was a liveness kill, any other a safety kill."""
    if result.outcome == "killed" and result.kind is None:
        stalled = any(b == "nothing acknowledged" or b.startswith("error:") for b in result.by)
        result.kind = "liveness" if stalled else "safety"
    return result


def _merged(earlier: Result | None, later: Result,
            later_cells: Collection[str] | None = None) -> Result:
    """A later campaign's result of a mutant (a changed rule, another cell) in place of the
    earlier one, keeping the unit tests' verdict of whichever ran them. Only a campaign that
    ran the cell of an earlier kill replaces it (`later_cells`, None: unknown, it does): a
    survivor of other cells was asked another question, and the kill stands."""
    if earlier is None:
        return later
    stands = (earlier.outcome == "killed" and later.outcome != "killed"
              and later_cells is not None and earlier.cell not in later_cells)
    kept, other = (earlier, later) if stands else (later, earlier)
    if kept.unit is None:
        kept.unit, kept.unit_failed = other.unit, other.unit_failed
        kept.unit_wall_s = other.unit_wall_s
    return kept


def _report(args: argparse.Namespace, out: Path, mutants: list[Mutant],
            results: dict[str, Result], meta: dict[str, Any]) -> int:
    hand = _hand(args.classified)
    path = page.write(out, results, {m.id: m for m in mutants}, hand, meta)
    print(page.markdown(page.score_table(results, hand)))
    for key in ("search wall s", "mutants per hour (search)", "mutants per hour (with unit tests)"):
        if key in meta:
            print(f"{key}: {meta[key]}")
    print(path)
    baseline = results.get(BASELINE)
    if baseline is None:  # a campaign cut short before its end, rescored alone
        print("no result of the unmutated code (a campaign cut short)", file=sys.stderr)
        return Exit.VALID
    for note in baseline.notes:
        print(f"the unmutated code was invalid at {note}", file=sys.stderr)
    if baseline.outcome != "survived" or baseline.unit not in (None, "survived"):
        print(f"the unmutated code did not pass: {baseline}", file=sys.stderr)
        return Exit.ERROR  # every kill is suspect: the cell or the tests fail on their own
    return Exit.VALID


def _hand(path: Path) -> dict[str, dict[str, str]]:
    """The hand classifications keyed by stable id (an older id is found by its line); one
    that names no mutant of the code as it is now is left out, with a warning."""
    hand = {}
    for mutant_id, note in page.classified(path).items():
        try:
            hand[resolve(ROOT, mutant_id).id] = note
        except ValueError as e:
            print(f"{path}: {e}; its classification is left out", file=sys.stderr)
    return hand
