#!/usr/bin/env python3
"""Protocol invariants against lost records: how often each weakness shows as each.

For every weakness, simulate the same seeds with the invariants checked after every step
(keep going after a violation, so the run reaches its final read) and count, over those
seeds, the runs with an invariant violation, the runs that lost an acknowledged record (the
final read lacks an acknowledged value: support.scenarios.acknowledged_loss), and both.

    .venv/bin/python benchmarks/invariant_detection.py [--seeds 1-20] [--mode episodes|campaign]
        [--only NAME,...] [--trace]

`--mode episodes` (default) uses the scripted episode aimed at each weakness (the twins of
tests/simulation/test_invariants_sim.py); `--mode campaign` uses campaigns/validation.toml's configs
under their own randomised nemesis mix (harness.simulate), the safe one included. `--trace`
also runs the trace checker (checkers/trace.py) on each run's events.jsonl and history.jsonl,
counts the runs where it found a violation, prints the invariants it found (runs) and the
runs where its set of violated invariants differs from the simulator's. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support: scaffolding
sys.path.insert(0, str(ROOT / "tests" / "simulation"))  # the twins of test_invariants_sim

from support.scenarios import acknowledged_loss  # noqa: E402

from checkers.trace import check_run  # noqa: E402
from runformat.run_config import RunConfig  # noqa: E402


def seeds_of(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def episodes() -> list[tuple[str, dict, str, object]]:
    from test_invariants_sim import TWINS

    return [(name, system, acks, episode) for name, system, acks, episode, _ in TWINS] + [
        ("safe (each episode)", {}, "all", None)]


def run_episode(folder: Path, seed: int, system: dict, acks: str, episode) -> tuple[set, int, dict]:
    from test_invariants_sim import SAFE, simulate

    r = simulate(folder, seed, system, acks, episode(folder))
    config = {"system": {**SAFE, **system}, "workload": {"acks": acks}, "topic": {"name": "chaos"}}
    return ({v["name"] for v in r.invariants}, len(acknowledged_loss(r.history).lost), config)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-20")
    ap.add_argument("--mode", choices=("episodes", "campaign"), default="episodes")
    ap.add_argument("--only", default=None)
    ap.add_argument("--trace", action="store_true")
    args = ap.parse_args()
    seeds = seeds_of(args.seeds)
    only = set(args.only.split(",")) if args.only else None
    print(f"{'weakness':40} {'runs':>4} {'invariant':>9} {'lost':>5} {'both':>5} "
          f"{'lost, no inv':>12}{'  trace':>8}  invariants (runs)", flush=True)
    for name, runner in _rows(args.mode):
        if only and name.split(" ")[0] not in only:
            continue
        started = time.perf_counter()
        violated = lost = both = missed = traced = 0
        classes: Counter = Counter()
        trace_classes: Counter = Counter()
        differ = 0
        runs = 0
        for seed in seeds:
            for _seed, (found, n_lost, config, folder) in runner(seed):
                runs += 1
                violated += bool(found)
                lost += bool(n_lost)
                both += bool(found and n_lost)
                missed += bool(n_lost and not found)
                classes.update(x.removeprefix("invariant:") for x in found)
                if args.trace:
                    report = check_run(folder, RunConfig.of(config))
                    traced += bool(report and report.violations)
                    seen = {str(v["name"]).removeprefix("invariant:")
                            for v in (report.violations if report else [])}
                    trace_classes.update(seen)
                    differ += seen != {x.removeprefix("invariant:") for x in found}
                shutil.rmtree(folder, ignore_errors=True)
        trace = f"{traced:>8}" if args.trace else f"{'':>8}"
        print(f"{name:40} {runs:>4} {violated:>9} {lost:>5} {both:>5} {missed:>12}{trace}  "
              f"{dict(sorted(classes.items()))}  ({time.perf_counter() - started:.0f} s)", flush=True)
        if args.trace:
            print(f"{'':40} trace: {dict(sorted(trace_classes.items()))}; runs whose trace found "
                  f"another set of invariants than the simulator: {differ}", flush=True)
    return 0


def _rows(mode: str):
    if mode == "episodes":
        for name, system, acks, episode in episodes():
            def runner(seed, system=system, acks=acks, episode=episode):
                eps = [episode] if episode is not None else [t[3] for t in episodes()[:-1]]
                for ep in eps:
                    folder = Path(tempfile.mkdtemp(prefix=f"inv-s{seed}-"))
                    found, n_lost, config = run_episode(folder, seed, system, acks, ep)
                    yield seed, (found, n_lost, config, folder)
            yield name, runner
        return
    from harness.campaign_spec import load_spec
    from harness.config import typed
    from harness.sim_run import simulate_into, with_seed
    from harness.test import Test

    _, cells = load_spec(ROOT / "campaigns" / "validation.toml")
    seen = set()
    for cell in cells:
        if cell.config in seen:
            continue
        seen.add(cell.config)

        def runner(seed, cell=cell):
            folder = Path(tempfile.mkdtemp(prefix=f"inv-{cell.config}-s{seed}-"))
            config = with_seed(typed(cell.resolved), seed)
            result = simulate_into(Test.of(config, folder, check=False), folder, keep_going=True)
            found = {v["name"] for v in result.invariants or ()}
            n_lost = sum(len(acknowledged_loss(result.history, p).lost)
                         for p in range(config.topic.partitions))
            yield seed, (found, n_lost, config.record(), folder)  # RunConfig.of reads the record
        yield f"{cell.config} ({cell.expect})", runner


if __name__ == "__main__":
    sys.exit(main())
