"""Real-host runs: protocol invariants on the trace against lost records, per weakness.

    .venv/bin/python benchmarks/real_detection.py CAMPAIGN_FOLDER... [--json out.json]

Reads the runs a campaign already made and checked (their results.json: the lost-record checks
and the trace invariants of checkers/trace.py, which `harness check` runs on every real run)
and prints per config: runs, runs that lost an acknowledged record, runs with an invariant
violation, runs with both, with only one, and the invariants violated. Then, over the runs with
both, when each detection was possible, in seconds from the start of the run:
- `violation`: the first invariant violation on the trace (the earliest example in results.json);
- `truncation`: the first truncation that removed a record the run lost (loss.parquet): the
  moment the loss happened, which the lost-record check can only see afterwards;
- `loss known`: the end of the final read, the earliest a lost record can be told from one
  still in flight.
Several campaign folders (e.g. two invocations over different seed ranges) are merged by config.
No assertions: a measurement.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd


def count(value: Any) -> int:
    return int(value.get("count", 0) if isinstance(value, dict) else value or 0)


def _last_history_time_s(run_dir: Path) -> float:
    """The time of the history's last line (the end of the final read), read from the end of
    the file: a final poll's line can be megabytes long, and its `time` comes first."""
    with open(run_dir / "history.jsonl", "rb") as f:
        end = f.seek(0, 2)
        tail = b""
        while end > 0 and tail.rstrip(b"\n").count(b"\n") == 0:
            start = max(0, end - (1 << 16))
            f.seek(start)
            tail = f.read(end - start) + tail
            end = start
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    m = re.match(rb'\{"index": \d+, "time": (\d+)', last)
    return int(m.group(1)) / 1e9 if m else float("nan")


def first_lost_truncation_s(run_dir: Path) -> float | None:
    path = run_dir / "loss.parquet"
    if not path.exists():
        return None
    lost = pd.read_parquet(path, columns=["truncations"])
    # Each cell is the JSON list of the truncation events that removed that record.
    stamps = [t["time"] / 1e9 for cell in lost["truncations"] if cell
              for t in json.loads(cell) if "time" in t]
    return min(stamps) if stamps else None


def run_row(config: str, run_dir: Path) -> dict[str, Any]:
    results = json.loads((run_dir / "results.json").read_text())
    anomalies = {k: count(v) for k, v in (results.get("anomalies") or {}).items()}
    invariants = {k: v for k, v in anomalies.items() if k.startswith("invariant:") and v}
    lost = count(results.get("lost") or 0)
    row: dict[str, Any] = {"config": config, "run": str(run_dir), "lost": lost,
                           "invariants": sorted(invariants)}
    times = [ex["time"] / 1e9 for k in invariants
             for ex in (results["anomalies"][k].get("examples") or []) if "time" in ex]
    row["violation_s"] = min(times) if times else None
    if lost:
        row["truncation_s"] = first_lost_truncation_s(run_dir)
        row["loss_known_s"] = _last_history_time_s(run_dir)
    return row


def runs(folder: Path) -> list[tuple[str, Path]]:
    state = json.loads((folder / "campaign.json").read_text())
    return [(c["config"], (folder / c["run_dir"]).resolve()) for c in state["cells"]
            if c.get("run_dir") and (folder / c["run_dir"] / "results.json").exists()]


def _median(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    return f"{statistics.median(vals):6.1f}" if vals else "     -"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [run_row(config, run_dir) for folder in args.folders for config, run_dir in runs(folder)]
    by_config: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_config[row["config"]].append(row)
    print(f"{'config':22s} {'runs':>4s} {'lost':>4s} {'inv':>4s} {'both':>4s} {'inv only':>8s} "
          f"{'lost only':>9s}   median s: {'violation':>9s} {'truncation':>10s} {'loss known':>10s}")
    for config, group in by_config.items():
        lost = [r for r in group if r["lost"]]
        inv = [r for r in group if r["invariants"]]
        both = [r for r in group if r["lost"] and r["invariants"]]
        print(f"{config:22s} {len(group):4d} {len(lost):4d} {len(inv):4d} {len(both):4d} "
              f"{len(inv) - len(both):8d} {len(lost) - len(both):9d}   "
              f"          {_median([r['violation_s'] for r in both]):>9s} "
              f"{_median([r.get('truncation_s') for r in both]):>10s} "
              f"{_median([r.get('loss_known_s') for r in both]):>10s}")
        timed = [r for r in both if r["violation_s"] is not None and r.get("truncation_s")]
        if timed:
            first = sum(r["violation_s"] <= r["truncation_s"] for r in timed)
            ahead = [r["loss_known_s"] - r["violation_s"] for r in both if r["violation_s"]]
            print(f"{'':22s} violation no later than the first lost truncation in {first}/"
                  f"{len(timed)} runs; median lead over `loss known`: {_median(ahead).strip()} s")
        names = Counter(name for r in group for name in r["invariants"])
        if names:
            print(f"{'':22s} violated: " + ", ".join(f"{n[len('invariant:'):]} {c}"
                                                      for n, c in names.most_common()))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
