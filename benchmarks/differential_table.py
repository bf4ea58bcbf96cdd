"""The weakness table of docs/differential.md: each minimal reproduction of campaigns/minimal/,
cast by role on each system N times, with its safe twin where it has one.

    .venv/bin/python benchmarks/differential_table.py [--systems sim,embedded,kafka:3.9.1,kafka:4.2.1]
        [--times 5] [--only no-elr,acks1] [--twins]

Each cell is `harness reproduce --schedule campaigns/minimal/NAME.json --system S --times N`
(the simulator replays exactly, so one run there); a twin adds the file's `against` settings.
Prints, per weakness and system, the runs that lost acknowledged records (lost-write or
unseen) of N and the median lost. Real runs take 40-100 s each: the whole table is hours on 2 cores."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MINIMAL = REPO / "campaigns" / "minimal"
# "run 2/5: DIR  lost-write or unseen 5  anomalies {...}" (harness/reproduce.py)
RUN_LINE = re.compile(r"^run \d+/\d+: \S+\s+lost-write or unseen (\d+)", re.M)


def cell(name: str, system: str, times: int, sets: list[str]) -> list[int]:
    """Lost-write counts of each run of one minimal schedule on one system."""
    argv = [sys.executable, "-m", "harness.cli", "reproduce", "--schedule",
            str(MINIMAL / f"{name}.json"), "--system", system,
            "--times", str(1 if system == "sim" else times)]
    for item in sets:
        argv += ["--set", item]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True).stdout
    return [int(n) for n in RUN_LINE.findall(out)]


def text(lost: list[int]) -> str:
    if not lost:
        return "error"
    losing = [n for n in lost if n]
    median = f" ({statistics.median(losing):g})" if losing else ""
    return f"{len(losing)}/{len(lost)}{median}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="sim,embedded,kafka:3.9.1,kafka:4.2.1")
    parser.add_argument("--times", type=int, default=5)
    parser.add_argument("--only", help="comma-separated minimal names (default: all)")
    parser.add_argument("--twins", action="store_true", help="also each file's safe twin")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else sorted(p.stem for p in MINIMAL.glob("*.json"))
    systems = args.systems.split(",")
    print("minimal schedule".ljust(28) + "".join(s.ljust(18) for s in systems), flush=True)
    for name in names:
        against = json.loads((MINIMAL / f"{name}.json").read_text()).get("against") or []
        rows = [(name, [])] + ([(f"{name} (twin)", against)] if args.twins and against else [])
        for label, sets in rows:
            cells = [text(cell(name, s, args.times, sets)) for s in systems]
            print(label.ljust(28) + "".join(c.ljust(18) for c in cells), flush=True)


if __name__ == "__main__":
    main()
