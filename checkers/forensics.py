"""Loss forensics: why each lost-write/unseen record is gone, as data and as a sentence.

Inputs are the lost records, the nemesis operations of the history, the run's merged
events.jsonl and the nodes' data files. These are small next to the history (one row per
lost record, one event per metadata change), so plain Python is the right tool here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

import runformat
from checkers.segments import find_on_disk
from checkers.verdict import py_scalar

NS = 1_000_000_000
FAULT_SLACK_NS = 5 * NS  # a fault that ended this shortly before the ack still counts
PARTITION_KINDS = {
    "partition-change", "unclean-election", "unclean-recovery", "truncate", "log-recovery",
}  # fmt: skip


@dataclass
class Fault:
    name: str  # e.g. "power-loss"
    target: str  # e.g. "n2" or the JSON of the nemesis value
    start: int
    end: int | None  # None: never stopped within the history

    def describe(self) -> str:
        name = self.name.replace("-", " ")
        return f"{name} of {self.target}" if self.target else name


def _target(value_json: str | None) -> str:
    if not value_json:
        return ""
    value = json.loads(value_json)
    if isinstance(value, dict) and isinstance(value.get("nodes"), list):
        return ", ".join(map(str, value["nodes"]))
    return value_json


def fault_windows(ops_path: Path) -> list[Fault]:
    """Pair nemesis start-X / stop-X operations into windows, in history order."""
    t = pq.read_table(
        ops_path, columns=["time", "f", "value_json"], filters=[("process", "=", "nemesis")]
    ).to_pandas()
    open_: dict[str, list[Fault]] = {}
    faults: list[Fault] = []
    for time, f, value_json in t.itertuples(index=False):
        kind, _, name = f.partition("-")
        if kind == "start":
            fault = Fault(name, _target(value_json), int(time), None)
            faults.append(fault)
            open_.setdefault(name, []).append(fault)
        elif kind == "stop" and open_.get(name):
            for fault in open_.pop(name):
                fault.end = int(time)
    return faults


def load_events(path: Path, topic: str | None, notes: list[str]) -> dict[int, list[dict]]:
    """Partition-scoped events (see docs/formats.md) by partition, in time order; lines
    runformat skips are named in `notes`."""
    by_part: dict[int, list[dict]] = {}
    tally = runformat.Tally(str(path))
    for ev in runformat.events(path, tally):
        kind, part = ev.get("kind"), ev.get("partition")
        if kind not in PARTITION_KINDS or part is None:
            continue
        if topic is not None and ev.get("topic", topic) != topic:
            continue
        by_part.setdefault(int(part), []).append(ev)
    notes += [f"{note}; skipped for forensics" for note in tally.notes()]
    for evs in by_part.values():
        evs.sort(key=lambda e: e["time"])
    return by_part


def _secs(ns: int) -> str:
    return f"{ns / NS:.3f} s"


def _state_at(events: list[dict], time: int) -> dict | None:
    last = None
    for ev in events:
        if ev["time"] > time:
            break
        if ev["kind"] == "partition-change":
            last = ev
    return last


def _removals(events: list[dict], offset: int, after: int) -> list[dict]:
    out = []
    for ev in events:
        if ev["time"] < after:
            continue
        if ev["kind"] == "truncate" and ev["to_offset"] <= offset < _log_end(ev, offset):
            out.append(ev)
        elif ev["kind"] == "log-recovery" and _cut_at(ev, offset) <= offset:
            out.append(ev)
    return out


def _log_end(ev: dict, offset: int) -> int:
    """A truncation's old log end; Kafka's logs do not say it (docs/kafka.md), and then the
    truncation is taken to remove everything from its target on."""
    return offset + 1 if ev.get("from_offset") is None else ev["from_offset"]


def _cut_at(ev: dict, offset: int) -> int:
    """Where a log recovery cut the log (past `offset` when the event does not say)."""
    cut = ev.get("log_end_offset")
    return offset + 1 if cut is None else cut


def _describe_removal(ev: dict, state: dict | None) -> str:
    epoch = f" at leader epoch {state['leader_epoch']}" if state else ""
    if ev["kind"] == "truncate":
        removed = (f"offsets {ev['to_offset']}-{ev['from_offset'] - 1} removed"
                   if ev.get("from_offset") is not None else f"cut to offset {ev['to_offset']}")
        return (
            f"truncated by broker {ev['node']}{epoch} ({removed}, "
            f"{ev.get('reason', '?')}) at {_secs(ev['time'])}"
        )
    return (
        f"log recovery on broker {ev['node']}{epoch} cut the log to offset "
        f"{ev['log_end_offset']} at {_secs(ev['time'])}"
    )


def _describe_unclean(ev: dict) -> str:
    if ev["kind"] == "unclean-election":
        return f"unclean election of broker {ev['leader']} at epoch {ev['leader_epoch']}"
    return (
        f"unclean recovery ({ev.get('strategy')}) chose broker {ev['leader']} at epoch "
        f"{ev['leader_epoch']}"
    )


def _relevant_faults(faults: list[Fault], ack: int, until: int | None) -> list[str]:
    out = []
    for f in faults:
        ends = f.end if f.end is not None else float("inf")
        if ends < ack - FAULT_SLACK_NS or (until is not None and f.start > until):
            continue
        if f.start <= ack <= ends:
            when = "active at the ack"
        elif f.start > ack:
            when = f"started {_secs(f.start - ack)} after the ack"
        else:
            when = f"ended {_secs(ack - ends)} before the ack"
        out.append(f"{f.describe()} ({when})")
    return out


def explain(rec: dict, faults: list[Fault], events: list[dict], disk_hosts: list[str] | None) -> dict:
    """Forensic fields and a one-line explanation for one lost record."""
    ack, offset = int(rec["ack_time"]), int(rec["offset"])
    state = _state_at(events, ack)
    removals = _removals(events, offset, ack)
    until = removals[0]["time"] if removals else None
    window = [e for e in events if e["time"] > ack and (until is None or e["time"] <= until)]
    changes = [e for e in window if e["kind"] == "partition-change"]
    unclean = [e for e in window if e["kind"] in ("unclean-election", "unclean-recovery")]
    fault_text = _relevant_faults(faults, ack, until)

    node, epoch = py_scalar(rec["node"]), py_scalar(rec["epoch"])
    # Kafka's delivery reports name neither the broker nor its epoch (docs/kafka.md)
    by = "" if node is None else f" by broker {node} at leader epoch {epoch}"
    parts = [f"acked{by} at {_secs(ack)}"]
    if state:
        parts[0] += f" (ISR {state.get('isr')})"
    parts += fault_text
    parts += [_describe_unclean(e) for e in unclean]
    leaders = [f"leader {e.get('leader')} at epoch {e.get('leader_epoch')}" for e in changes]
    if leaders:
        parts.append("then " + ", ".join(leaders[:4]) + (" ..." if len(leaders) > 4 else ""))
    parts += [_describe_removal(e, _state_at(events, e["time"])) for e in removals[:3]]
    if disk_hosts is None:
        storage = "unknown"
    elif disk_hosts:
        storage = "on-disk"
        parts.append(f"still on disk at {', '.join(disk_hosts)}")
    else:
        storage = "truncated/lost"
        parts.append("in no node's data files")
    return {
        "faults": fault_text,
        "isr_at_ack": json.dumps(state.get("isr")) if state else None,
        "leader_changes": json.dumps(changes),
        "unclean": json.dumps(unclean),
        "truncations": json.dumps(removals),
        "storage": storage,
        "on_disk_at": disk_hosts or [],
        "explanation": "; ".join(parts),
    }


def forensics(
    lost: pd.DataFrame, ops_path: Path, run_dir: Path, topic: str | None, notes: list[str]
) -> pd.DataFrame:
    """`lost` (one row per lost-write/unseen record) with forensic columns added."""
    if lost.empty:
        return lost.assign(
            faults=[], isr_at_ack=[], leader_changes=[], unclean=[], truncations=[],
            storage=[], on_disk_at=[], explanation=[],
        )  # fmt: skip
    faults = fault_windows(ops_path)
    events_path = run_dir / "events.jsonl"
    events = load_events(events_path, topic, notes) if events_path.exists() else {}
    if not events_path.exists():
        notes.append("no events.jsonl beside the history: loss forensics use nemesis ops only")
    nodes_dir = run_dir / "nodes"
    disk = None
    if nodes_dir.is_dir():
        wanted: dict[int, set[int]] = {}
        for p, v in zip(lost["partition"], lost["value"], strict=True):
            wanted.setdefault(int(p), set()).add(int(v))
        disk = find_on_disk(nodes_dir, wanted, topic)
    rows = []
    for rec in lost.to_dict("records"):
        key = (int(rec["partition"]), int(rec["value"]))
        hosts = None if disk is None else disk.get(key, [])
        rows.append(explain(rec, faults, events.get(key[0], []), hosts))
    return pd.concat([lost.reset_index(drop=True), pd.DataFrame(rows)], axis=1)
