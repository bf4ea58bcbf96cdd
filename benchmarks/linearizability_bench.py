"""Time the linearizability checker on simulated cas-register histories.

    .venv/bin/python benchmarks/linearizability_bench.py [--sizes 1000,10000,100000]
        [--processes 5,50] [--budget-s 120] [--max-states 10000000] [--seed 1]

Histories come from support.linear_simulate: a real register accessed by concurrent
clients, so every one is linearizable and any verdict but "valid" is the search giving up
within its budget (reported as "unknown", never hidden). ``ops`` counts operations invoked
in the history; ``checked`` those left once failed cas ops (which did not happen) are dropped.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from checkers.linear import Budget, CASRegister, check, pair_events

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/support: scaffolding
from support.linear_simulate import simulate  # noqa: E402


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def bench_one(n: int, processes: int, budget: Budget, seed: int) -> dict:
    started = time.perf_counter()
    events = simulate(random.Random(seed), n, processes)
    ops = pair_events(events)
    generated = time.perf_counter() - started
    started = time.perf_counter()
    verdict = check(ops, CASRegister(), budget)
    checked = time.perf_counter() - started
    return {"ops": n, "processes": processes, "checked": verdict["ops"],
            "valid": verdict["valid"], "explored": verdict["explored"],
            "generate_s": generated, "check_s": checked,
            "note": (verdict.get("unknown") or {}).get("reason", "")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=_ints, default=[1000, 10000, 100000])
    p.add_argument("--processes", type=_ints, default=[5, 50])
    p.add_argument("--budget-s", type=float, default=120.0)
    p.add_argument("--max-states", type=int, default=10_000_000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    header = (f"{'ops':>7} {'procs':>5} {'checked':>7} {'verdict':>8} {'explored':>9} "
              f"{'gen_s':>7} {'check_s':>8} {'ops/s':>8}  note")
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        for procs in args.processes:
            budget = Budget.of(args.budget_s, args.max_states)
            r = bench_one(n, procs, budget, args.seed)
            rate = f"{r['checked'] / r['check_s']:8.0f}" if r["valid"] is True else f"{'-':>8}"
            print(f"{r['ops']:>7} {procs:>5} {r['checked']:>7} {str(r['valid']):>8} "
                  f"{r['explored']:>9} {r['generate_s']:>7.2f} {r['check_s']:>8.2f} {rate}  "
                  f"{r['note']}", flush=True)


if __name__ == "__main__":
    main()
