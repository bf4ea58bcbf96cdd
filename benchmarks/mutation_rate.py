"""Mutants per hour of one small `harness mutate` campaign on Spark `local[2]` and on a
standalone cluster of two one-core workers (tests/support/spark_cluster.py, on 127.0.0.1),
alternated in one run, with each run's outcomes so that a cluster running other code than
this checkout (its executors not importing the mutant) shows as a different outcome.

    .venv/bin/python benchmarks/mutation_rate.py [--rounds 2] [--seeds 1-5]

Prints, per run: the master, the search's wall time, mutants per hour (search) and each
mutant's outcome; then the ratio of the medians. Each run gets its own results folder under
a private temporary directory."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support: scaffolding
from support import spark_cluster  # noqa: E402

# One killed at once (the HWM as a max), one killed only by a truncation check, two that the
# unmutated code's runs decide (they survive every seed: the search's full cost).
MUTANTS = ("replication/partition.py:Replica._advance_hwm:min-max:d4fa4740:0",
           "replication/partition.py:Replica._truncate:min-max:e21792d9:0",
           "replication/client.py:Client.produce:drop-stmt:cc56d24d:0",
           "replication/client.py:Client.produce:drop-stmt:8746e430:0")


def campaign(master: str, env: dict[str, str], results: Path, seeds: str) -> dict:
    cmd = [sys.executable, "-m", "harness.cli", "mutate",
           *(a for m in MUTANTS for a in ("--mutant", m)),
           "--campaign", "campaigns/mutation.toml", "--cell", "safe/safe-mix", "--seeds", seeds,
           "--block", "5", "--jobs", "2", "--unit-tests", "none", "--spark-master", master]
    done = subprocess.run(cmd, cwd=ROOT, env={**env, "HARNESS_RESULTS": str(results)},
                          capture_output=True, text=True, timeout=3600, check=False)
    rate = re.search(r"mutants per hour \(search\): ([0-9.]+)", done.stdout)
    wall = re.search(r"search wall s: ([0-9.]+)", done.stdout)
    if rate is None or wall is None:
        raise SystemExit(f"{master}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    (saved,) = results.glob("mutation/*/mutants.json")
    outcomes = {r["id"]: r["outcome"] for r in json.loads(saved.read_text())["results"]}
    return {"rate": float(rate.group(1)), "wall_s": float(wall.group(1)), "outcomes": outcomes}


def show(master: str, run: dict) -> None:
    print(f"{master:<28} search {run['wall_s']:6.1f} s  {run['rate']:7.1f} mutants/hour", flush=True)
    for mutant in MUTANTS:
        print(f"    {run['outcomes'].get(mutant, '?'):<10} {mutant}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seeds", default="1-5")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"local[2]": [], "standalone": []}
    outcomes: dict[str, list[dict]] = {"local[2]": [], "standalone": []}
    with tempfile.TemporaryDirectory(prefix="mutation-rate-") as tmp:
        work = Path(tmp)
        with spark_cluster.standalone(work, workers=2, cores=1, memory="2g") as cluster:
            for n in range(args.rounds):
                for name, master, env in (("local[2]", "local[2]", dict(os.environ)),
                                          ("standalone", cluster.url, {**os.environ, **cluster.env})):
                    run = campaign(master, env, work / f"{name}-{n}", args.seeds)
                    show(f"{name} (round {n + 1})", run)
                    rates[name].append(run["rate"])
                    outcomes[name].append(run["outcomes"])
    local, standalone = (statistics.median(rates[k]) for k in ("local[2]", "standalone"))
    print(f"median mutants/hour: local[2] {local:.1f}, standalone {standalone:.1f} "
          f"(standalone {standalone / local:.2f}x)")
    same = all(o == outcomes["local[2]"][0] for k in outcomes for o in outcomes[k])
    print("outcomes the same on both masters" if same else "OUTCOMES DIFFER between the masters")


if __name__ == "__main__":
    main()
