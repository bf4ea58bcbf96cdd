"""The table of a results root's runs, cell by cell: runs, runs that lost acknowledged
records, median lost, and the time to first detection (the wall time of the cell's runs, in
the order they ran, up to the end of the first that lost records), from each run's test.json
and results.json. docs/kafka.md's table is this script's output.

    .venv/bin/python benchmarks/campaign_table.py RESULTS_ROOT [--prefix kafka-]"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

LOSS = ("lost-write", "unseen")


def _run(folder: Path) -> dict | None:
    try:
        test = json.loads((folder / "test.json").read_text())
        results = json.loads((folder / "results.json").read_text())
    except (OSError, ValueError):
        return None
    started = float(test["started_at"])  # wall-clock seconds
    lost = sum(results.get("anomalies", {}).get(k, {}).get("count", 0) for k in LOSS)
    others = sorted(k for k in results.get("anomalies", {}) if k not in LOSS)
    return {"started": started, "ended": (folder / "results.json").stat().st_mtime,
            "lost": lost, "valid": results.get("valid"), "others": others,
            "version": test["config"].get("kafka", {}).get("version"),
            "seed": test["seed"]}


def _cell(runs: list[dict]) -> dict:
    runs.sort(key=lambda r: r["started"])
    lossy = [r for r in runs if r["lost"]]
    spent, first = 0.0, None
    for r in runs:
        spent += r["ended"] - r["started"]
        if r["lost"]:
            first = spent
            break
    return {"runs": len(runs), "lossy": len(lossy),
            "median_lost": statistics.median(r["lost"] for r in lossy) if lossy else 0,
            "first_s": first, "others": sorted({a for r in runs for a in r["others"]}),
            "version": runs[0]["version"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("--prefix", default="")
    args = ap.parse_args()
    cells: dict[str, list[dict]] = {}
    for folder in sorted(args.root.glob(f"{args.prefix}*/*")):
        run = _run(folder)
        if run is not None:
            cells.setdefault(folder.parent.name, []).append(run)
    print("| cell | Kafka | runs | runs that lost acknowledged records | median lost | "
          "time to first detection | other anomalies |")
    print("|---|---|---|---|---|---|---|")
    for name, runs in sorted(cells.items()):
        c = _cell(runs)
        first = "-" if c["first_s"] is None else f"{c['first_s']:.0f} s"
        print(f"| {name.removeprefix(args.prefix)} | {c['version']} | {c['runs']} | "
              f"{c['lossy']} | {c['median_lost']:g} | {first} | "
              f"{', '.join(c['others']) or '-'} |")


if __name__ == "__main__":
    main()
