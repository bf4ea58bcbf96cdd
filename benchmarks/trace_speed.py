"""The trace check in one process against the same on Spark, on one long trace.

    .venv/bin/python benchmarks/trace_speed.py [RUN_FOLDER] [--cell unclean-election]
        [--partitions 8] [--time-limit 300] [--seed 1] [--master local[2]] [--runs 3]

Without RUN_FOLDER, simulates a cell of campaigns/validation.toml over `--partitions`
partitions for `--time-limit` seconds (its invariants.jsonl removed, so the trace is what is
checked, as for a real run) into a temporary folder. Then times checkers.trace.check_run and
checkers.trace_spark.check_run_spark (after a warm-up that starts the session), `--runs`
times each, prints the medians, the trace's size and whether the two reports are equal. No
assertions.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkers.spark import get_session  # noqa: E402
from checkers.trace import check_run  # noqa: E402
from checkers.trace_spark import check_run_spark  # noqa: E402
from harness.campaign_spec import load_spec  # noqa: E402
from harness.sim_run import as_simulated, simulate_into  # noqa: E402
from harness.test import Test  # noqa: E402
from runformat.run_config import RunConfig  # noqa: E402


def simulate(folder: Path, cell: str, partitions: int, time_limit: float, seed: int) -> dict:
    _, cells = load_spec(ROOT / "campaigns" / "validation.toml")
    config = copy.deepcopy(next(c.resolved for c in cells if c.config == cell))
    config["topic"]["partitions"] = partitions
    config["time_limit"] = time_limit
    config["seed"] = seed
    config = as_simulated(config)
    started = time.perf_counter()
    simulate_into(Test.of(config, folder, check=False), folder, keep_going=True)
    (folder / "invariants.jsonl").unlink()
    print(f"simulated {cell} over {partitions} partitions for {time_limit:g} s in "
          f"{time.perf_counter() - started:.1f} s")
    return config


def summary(report) -> tuple:
    return (sorted((v["name"], v["partition"], v["time"], v["detail"]) for v in report.violations),
            report.checks, report.events)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", type=Path)
    ap.add_argument("--cell", default="unclean-election")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--time-limit", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="trace-speed-") as tmp:
        folder = args.run or Path(tmp)
        if args.run:
            config = json.loads((folder / "test.json").read_text())["config"]
        else:
            config = simulate(folder, args.cell, args.partitions, args.time_limit, args.seed)
        config = RunConfig.of(config)
        sizes = {name: (folder / name).stat().st_size / 2**20 for name in ("events.jsonl", "history.jsonl")}
        lines = {name: sum(1 for _ in open(folder / name, "rb")) for name in sizes}
        print("trace: " + ", ".join(f"{name} {lines[name]:,} lines ({sizes[name]:.1f} MiB)" for name in sizes))
        spark = get_session(args.master)
        check_run_spark(spark, folder, config)  # warm-up
        times: dict[str, list[float]] = {"one process": [], f"Spark {args.master}": []}
        reports = {}
        for _ in range(args.runs):
            for name, run in (("one process", lambda: check_run(folder, config)),
                              (f"Spark {args.master}", lambda: check_run_spark(spark, folder, config))):
                started = time.perf_counter()
                reports[name] = run()
                times[name].append(time.perf_counter() - started)
        for name, ts in times.items():
            print(f"{name}: median {statistics.median(ts):.1f} s ({', '.join(f'{t:.1f}' for t in ts)})")
        one, other = (summary(r) for r in reports.values())
        print(f"violations {len(one[0])}, states judged {max(one[1].values(), default=0):,}; "
              f"reports {'equal' if one == other else 'DIFFER'}")


if __name__ == "__main__":
    main()
