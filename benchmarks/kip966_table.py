"""KIP-966's tolerance claim, measured: with ELR and balanced unclean recovery, a partition
survives MinISR-1 concurrent unclean (lossy) shutdowns without losing acknowledged records,
and when MinISR of them happen at once, recovery picks the longest surviving log and reports
the potential data loss instead of losing records silently.

    HARNESS_RESULTS=/tmp/kip966 .venv/bin/python benchmarks/kip966_table.py [--layouts 3:2,5:3] [--seconds 24]

Each row is one real run (netns hosts, lazyfs, acks=all, async flush, the fast profile) of
this scripted worst case for partition 0 (replicas 1..RF, broker 1 leading at the start):

  1. the RF-MinISR highest-numbered replicas are paused until they are fenced, so the ISR is
     exactly MinISR brokers while the producers keep writing;
  2. k of those ISR members, the leader first, lose power together (an `outage`: processes
     killed, unsynced page cache dropped), while the paused replicas are still stalled;
  3. the paused replicas resume, then the outage ends and every broker restarts.

The plan is fixed (k must be exact); the rest (leader changes, recovery) is the system's own.
A row's verdict: `no loss`; `loss, reported` (lost records, and the controller logged an
unclean recovery with potential_data_loss); or `SILENT LOSS` (lost records with no report).
Records count as lost when the checker reports them lost-write or unseen, or when an offset was
read with two values (inconsistent-offsets: a committed record replaced).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from harness.config import load_config
from harness.report.outcome import read_outcome
from harness.runner import run_test
from harness.test import Plan, Test

PAUSE_AT_S = 3.0
OUTAGE_AT_S = 8.0  # the paused replicas are fenced after 2 s (fast profile) and leave the ISR
OUTAGE_S = 6.0


def scenario(rf: int, min_isr: int, k: int) -> list[dict[str, Any]]:
    """The fixed plan: hosts n2..n(RF+1) run brokers 1..RF; broker 1 leads partition 0."""
    paused = [f"n{b + 1}" for b in range(min_isr + 1, rf + 1)]
    hit = [f"n{b + 1}" for b in range(1, k + 1)]
    plan: list[dict[str, Any]] = []
    if paused:
        plan.append({"id": 0, "kind": "pause", "start_s": PAUSE_AT_S,
                     "duration_s": OUTAGE_AT_S - PAUSE_AT_S + OUTAGE_S / 2,
                     "target": {"fixed": {"nodes": paused}}})
    plan.append({"id": len(plan), "kind": "outage", "start_s": OUTAGE_AT_S, "duration_s": OUTAGE_S,
                 "target": {"fixed": {"nodes": hit}}})
    return plan


def _events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def measure(rf: int, min_isr: int, k: int, seconds: float, root: Path) -> dict[str, Any]:
    config = load_config("fast", [
        f"nodes={rf + 1}", f"time_limit={seconds}", "topic.partitions=1",
        f"topic.replication_factor={rf}", f"system.min.insync.replicas={min_isr}",
        "system.eligible.leader.replicas.enable=true", "system.unclean.recovery.strategy=balanced",
        "workload.acks=all", "workload.rate=300", "workload.producers=16",
        "workload.final_read_timeout=60",
        "nemesis.faults=['outage', 'pause']", f"seed={k}",
        f"name=kip966-rf{rf}-minisr{min_isr}-k{k}"])
    run_dir = run_test(Test.of(config, root, plan=Plan.scripted(scenario(rf, min_isr, k))))
    outcome = read_outcome(run_dir)
    events = _events(run_dir)
    recoveries = [e for e in events if e.get("kind") == "unclean-recovery"]
    reported = [e for e in recoveries if e.get("potential_data_loss")]
    # A committed record replaced at its offset is a loss too (see harness.report.detection).
    replaced = outcome.anomalies.get("inconsistent-offsets", 0)
    if not outcome.checked:
        verdict = f"not checked: {outcome.error}"
    elif outcome.lost == 0 and replaced == 0:
        verdict = "no loss"
    else:
        verdict = "loss, reported" if reported else "SILENT LOSS"
    return {"rf": rf, "min_isr": min_isr, "k": k, "lost": outcome.lost if outcome.checked else None,
            "replaced": replaced,
            "recoveries": len(recoveries), "reported": len(reported), "verdict": verdict,
            "run": str(run_dir)}


def _row(r: dict[str, Any]) -> str:
    ok = r["verdict"] == "no loss" or (r["k"] >= r["min_isr"] and r["verdict"] == "loss, reported")
    return (f"| {r['rf']} | {r['min_isr']} | {r['k']} | {r['lost']} | {r['replaced']} "
            f"| {r['recoveries']} "
            f"({r['reported']} with potential_data_loss) | {r['verdict']} | "
            f"{'as KIP-966 says' if ok else 'CONTRADICTS KIP-966'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layouts", default="3:2,5:3", help="RF:MinISR pairs, comma-separated")
    ap.add_argument("--seconds", type=float, default=24, help="workload seconds per run")
    args = ap.parse_args()
    root = Path(os.environ.get("HARNESS_RESULTS", "results"))
    print("| RF | MinISR | k lossy shutdowns | lost-write + unseen | inconsistent-offsets "
          "| unclean recoveries | verdict | check |\n|---|---|---|---|---|---|---|---|", flush=True)
    runs = []
    for layout in args.layouts.split(","):
        rf, min_isr = (int(x) for x in layout.split(":"))
        for k in range(1, min_isr + 1):
            result = measure(rf, min_isr, k, args.seconds, root)
            print(_row(result), flush=True)
            runs.append(result["run"])
    print("\nruns:\n" + "\n".join(runs), flush=True)


if __name__ == "__main__":
    main()
