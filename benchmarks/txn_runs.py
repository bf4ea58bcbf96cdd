"""One line per transactional run under a results root (docs/kafka.md's tables of
campaigns/kafka-txn.toml): its cell, version and seed, the transactions committed, aborted
and crashed, the faults that started (and on whom, by role), the verdict and the anomalies,
what read-uncommitted consumers read of aborted transactions, the group's re-deliveries, the
consume-transform-produce transactions' exactly-once counts (when the run had some), how
often the group coordinator moved, what the transformers committed in their catch-up after
the faults were healed, and the longest stretch of the workload without a committed transaction (availability under the
faults; not an anomaly), and the transformers' stalls (transactions open longer than
STALL_S) with the share of each spent while the transaction log's ISR was below
`min.insync.replicas` (from the brokers' logs: the coordinator can then write nothing).

    .venv/bin/python benchmarks/txn_runs.py RESULTS_ROOT [--prefix kafka-txn-]"""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime
from pathlib import Path


def _commits(history: Path) -> tuple[dict[str, int], list[float]]:
    """Transactions by outcome, and the times (s) their commits completed."""
    outcome: dict[int, str] = {}
    done: dict[int, float] = {}
    first = None
    with history.open() as fh:
        for line in fh:
            op = json.loads(line)
            first = op["time"] if first is None else first
            if op.get("f") == "send" and op["type"] != "invoke" and "txn" in op:
                outcome[op["txn"]] = op["type"]
                done[op["txn"]] = (op["time"] - first) / 1e9
    counts = {k: list(outcome.values()).count(k) for k in ("ok", "fail", "info")}
    return counts, sorted(done[t] for t, o in outcome.items() if o == "ok")


def _catch_up(history: Path) -> dict[str, float] | None:
    """The transformers' transactions committed after the heal (their catch-up before the
    final read: workloads/rdkafka_ctp.py), the inputs they transformed, and the seconds from
    the heal to the last one."""
    healed, done, inputs = None, {}, 0
    with history.open() as fh:
        for line in fh:
            op = json.loads(line)
            if op.get("f") == "stop-all":
                healed = op["time"]
            elif (healed is not None and op.get("f") == "send" and "sources" in op
                  and op["type"] == "ok"):
                done[op["txn"]] = op["time"]
                inputs += len(op["sources"])
    if healed is None:
        return None
    last = max(done.values(), default=healed)
    return {"transactions": len(done), "inputs": inputs,
            "seconds": round((last - healed) / 1e9, 1)}


def _longest_gap(times: list[float], end: float) -> float:
    marks = [0.0, *times, end]
    return max(b - a for a, b in zip(marks, marks[1:], strict=False))


def _faults(schedule: dict) -> str:
    out = []
    for f in schedule["faults"]:
        if f["outcome"] != "ok":
            continue
        roles = f.get("roles") or {}
        hit = f["resolved"].get("nodes") or sorted(f["resolved"].get("grudge", {}))
        out.append(f"{f['kind']}@{f['started_s']:.0f}s:"
                   + "+".join(roles.get(n, n).split("#")[0] for n in hit))
    return " ".join(out) or "-"


STALL_S = 3.0
MIN_ISR = 2  # the campaign's: transaction.state.log.min.isr and min.insync.replicas
# A broker's log line on the transaction log's partition with its ISR then, in any of the
# three ways Kafka writes one (a new leader's, an applied AlterPartition's, a registration's)
_TXN_LOG_ISR = re.compile(r"^\[(\S+)\].*__transaction_state-0.*?"
                          r"(?:ISR updated to ([\d,]+)|ISR \[([\d,]+)\]|isr=\[([\d, ]+)\])")


def _isr_sizes(run: Path) -> list[tuple[float, int]]:
    """(wall time, ISR size) of the transaction log's partition, in time order."""
    points = []
    for log in run.glob("nodes/*/node.log"):
        for line in log.read_text(errors="replace").splitlines():
            if (m := _TXN_LOG_ISR.match(line)) is not None:
                isr = next(g for g in m.groups()[1:] if g is not None)
                when = datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
                points.append((when, len([b for b in isr.split(",") if b.strip()])))
    return sorted(points)


def _below_min_isr(points: list[tuple[float, int]], start: float, end: float) -> float:
    """Seconds of [start, end] (wall) the transaction log's ISR was below MIN_ISR."""
    below, size, since = 0.0, MIN_ISR, start
    for when, n in [*points, (end, MIN_ISR)]:
        a, b = max(since, start), min(when, end)
        if size < MIN_ISR and b > a:
            below += b - a
        size, since = n, when
    return below


def _stalls(history: Path, run: Path) -> list[dict[str, float]]:
    """The transformers' transactions open longer than STALL_S: when (s into the run), how
    long, and the share of it the transaction log spent below MIN_ISR."""
    ops = [json.loads(line) for line in history.open()]
    events = [json.loads(line) for line in (run / "events.jsonl").open()]
    timed = next((e for e in events if "ts" in e and "time" in e), None)
    if not ops or timed is None:
        return []
    t0 = ops[0]["time"]
    wall = timed["ts"] + (t0 - timed["time"]) / 1e9  # the history's first op, on the wall clock
    begun, out, points = {}, [], _isr_sizes(run)
    for op in ops:
        if op.get("f") != "send" or "sources" not in op:
            continue
        if op["type"] == "invoke":
            begun.setdefault(op["txn"], op["time"])
        elif op["txn"] in begun and (op["time"] - begun[op["txn"]]) / 1e9 > STALL_S:
            a, b = [(t - t0) / 1e9 for t in (begun.pop(op["txn"]), op["time"])]
            out.append({"at": round(a, 1), "s": round(b - a, 1), "client": op["client"],
                        "below_min_isr": round(_below_min_isr(points, wall + a, wall + b)
                                               / (b - a), 2)})
    return out


# A broker's log says when it became the group coordinator (4.x, then 3.x's wording)
_GROUP_LOADED = re.compile(r"Finished loading (of metadata|offsets and group metadata) from "
                           r"__consumer_offsets-0")


def _group_coordinator_moves(run: Path) -> int:
    """How often the group coordinator (the leader of __consumer_offsets' one partition)
    moved: every broker that took it logged a load, the first one included."""
    loads = sum(len(_GROUP_LOADED.findall(log.read_text(errors="replace")))
                for log in run.glob("nodes/*/node.log"))
    return max(0, loads - 1)


def row(run: Path) -> dict | None:
    try:
        test = json.loads((run / "test.json").read_text())
        results = json.loads((run / "results.json").read_text())
        schedule = json.loads((run / "schedule.json").read_text())
    except (OSError, ValueError):
        return None
    counts, commits = _commits(run / "history.jsonl")
    stats = results.get("stats", {}).get("transactions", {})
    found = {k: v["count"] for k, v in results["anomalies"].items() if v["count"]}
    return {"run": run.parent.name, "seed": test["seed"],
            "version": test["config"]["kafka"]["version"], **counts,
            "faults": _faults(schedule), "valid": results["valid"], "anomalies": found,
            "ru_aborted": stats.get("read_uncommitted", {}).get("aborted"),
            "redelivered": stats.get("group_redelivered"),
            "exactly_once": stats.get("exactly_once"),  # with consume-transform-produce
            "group_coordinator_moves": _group_coordinator_moves(run),
            "catch_up": _catch_up(run / "history.jsonl") if stats.get("exactly_once") else None,
            "stalls": _stalls(run / "history.jsonl", run) if stats.get("exactly_once") else None,
            "longest_gap_s": round(_longest_gap(commits, float(test["config"]["time_limit"])), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--prefix", default="kafka-txn-")
    args = parser.parse_args()
    for folder in sorted(args.root.glob(f"{args.prefix}*/*-s*")):
        r = row(folder)
        if r is not None:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
