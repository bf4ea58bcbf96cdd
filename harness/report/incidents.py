"""Loss incidents: lost and unseen records grouped by the event that removed them.

The checker's forensics (loss.parquet, see checkers/forensics.py) explain each record on its
own: who acknowledged it, in which epoch, and which truncations, log recoveries or unclean
elections came after. Hundreds of records usually share one cause, so this module groups them
by that cause -- the first removal on the broker that acknowledged them (else the first
removal of the offset at all), else the unclean election or recovery, else the page-cache or
power loss active around the ack -- and tells each group as one headline and a short numbered
story built from events.jsonl and the fault windows. Records no event explains form their own
incident, said so plainly.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from harness.report.events import truncated
from runformat.effects import LOSES_UNSYNCED

NS = 1_000_000_000
ROWS_PER_INCIDENT = 200  # per-record rows shown in an incident's collapsed table
STORY_STEPS = 14
FOCUS_MARGIN_NS = NS // 2
ROW_COLUMNS = ("value", "partition", "offset", "ack_time", "node", "epoch", "kind", "storage",
               "explanation")


@dataclass
class Incident:
    number: int
    partition: int
    cause: str  # "truncate", "log-recovery", "unclean-election", "unclean-recovery", fault kind,
    #             or "unexplained"
    cause_event: dict[str, Any] | None
    count: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    first_ack_ns: int = 0
    last_ack_ns: int = 0
    min_offset: int = 0
    max_offset: int = 0
    headline: str = ""
    story: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    t0: float = 0.0  # focus window of the timeline, seconds
    t1: float = 0.0

    @property
    def anchor(self) -> str:
        return f"timeline.html#t0={self.t0:.3f}&t1={self.t1:.3f}&p={self.partition}&i={self.number}"

    def to_json(self) -> dict[str, Any]:
        return {"n": self.number, "p": self.partition, "cause": self.cause, "count": self.count,
                "t0": self.t0, "t1": self.t1, "o0": self.min_offset, "o1": self.max_offset,
                "headline": self.headline}


def _loads(text: Any) -> list[dict[str, Any]]:
    if not isinstance(text, str) or not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _cause(rec: dict[str, Any], faults: list[Any]) -> tuple[str, dict[str, Any] | None]:
    removals = _loads(rec.get("truncations"))
    node = _int(rec.get("node"))
    if removals:
        own = [e for e in removals if _int(e.get("node")) == node]
        ev = (own or removals)[0]
        return str(ev.get("kind", "truncate")), ev
    unclean = _loads(rec.get("unclean"))
    if unclean:
        return str(unclean[0].get("kind", "unclean-election")), unclean[0]
    ack = _int(rec.get("ack_time")) or 0
    for w in faults:  # a fault losing unsynced writes around or after the ack
        if LOSES_UNSYNCED in w.effects and w.end_ns is not None and w.end_ns >= ack - 5 * NS:
            return w.kind, {"kind": w.kind, "time": w.start_ns, "end": w.end_ns,
                            "values": w.values, "fault": True}
    return "unexplained", None


def _key(partition: int, cause: str, ev: dict[str, Any] | None) -> tuple:
    if ev is None:
        return (partition, cause)
    return (partition, cause, ev.get("time"), str(ev.get("node")), ev.get("leader"))


def _secs(ns: int | float) -> str:
    return f"{ns / NS:.2f} s"


def _set(values: Any) -> str:
    if isinstance(values, str):
        try:
            values = json.loads(values)
        except ValueError:
            return values
    if isinstance(values, list):
        return "{" + ",".join(str(v) for v in values) + "}"
    return str(values)


def _common(counter: Counter) -> str:
    if not counter:
        return "?"
    items = counter.most_common()
    if len(items) == 1:
        return str(items[0][0])
    return " / ".join(f"{k} ({n})" for k, n in items[:3]) + (" ..." if len(items) > 3 else "")


def _brokers_by_host(events: list[dict[str, Any]]) -> dict[str, str]:
    return {str(e["host"]): f"{e['host']} = broker {e['node']}" for e in events
            if isinstance(e.get("node"), int) and e.get("host")}


def _fault_target(w: Any, hosts: dict[str, str] | None = None) -> str:
    hosts = hosts or {}
    for value in w.values:
        if isinstance(value, dict) and isinstance(value.get("nodes"), list):
            return ", ".join(hosts.get(str(n), str(n)) for n in value["nodes"])
        if isinstance(value, dict) and "grudge" in value:
            return "grudge " + ", ".join(f"{k}|{','.join(map(str, v))}"
                                         for k, v in sorted(value["grudge"].items())
                                         if isinstance(v, list))[:80]
        if isinstance(value, dict) and value.get("isolate"):
            return "isolating " + ", ".join(map(str, value["isolate"]))
    return ""


def _faults_in(faults: list[Any], t0: int, t1: int) -> list[Any]:
    return [w for w in faults if w.start_ns <= t1 and (w.end_ns or w.start_ns) >= t0]


def _storage_text(storage: Counter) -> str:
    if not storage:
        return ""
    parts = []
    for value, n in storage.most_common():
        text = {"truncated/lost": "not on any disk", "on-disk": "still on some node's disk",
                "unknown": "disks not examined"}.get(str(value), str(value))
        parts.append(text if len(storage) == 1 else f"{text} ({n})")
    return "; " + ", ".join(parts)


def _last_election(events: list[dict[str, Any]], partition: int, after: int, before: int,
                   ) -> dict[str, Any] | None:
    found = None
    prev_leader = None
    for ev in events:
        if ev.get("partition") != partition or ev.get("kind") != "partition-change":
            continue
        if ev["time"] > before:
            break
        if ev["time"] >= after and ev.get("leader") is not None and ev.get("leader") != prev_leader:
            found = ev
        prev_leader = ev.get("leader")
    return found


def _state_at(events: list[dict[str, Any]], partition: int, t: int) -> dict[str, Any] | None:
    last = None
    for ev in events:
        if ev["time"] > t:
            break
        if ev.get("partition") == partition and ev.get("kind") == "partition-change":
            last = ev
    return last


def _headline(inc: Incident, recs: list[dict[str, Any]], events: list[dict[str, Any]],
              faults: list[Any], acks: str) -> str:
    nodes = Counter(str(r.get("node")) for r in recs)
    epochs = Counter(str(r.get("epoch")) for r in recs)
    isrs = Counter(_set(r.get("isr_at_ack")) for r in recs if r.get("isr_at_ack"))
    storage = Counter(str(r.get("storage")) for r in recs if r.get("storage") is not None)
    what = ", ".join(f"{n:,} {k}" for k, n in sorted(inc.kinds.items()))
    # Kafka's delivery reports name neither the broker nor its epoch (docs/kafka.md)
    by = (f" by broker {_common(nodes)} in epoch {_common(epochs)}"
          if any(r.get("node") is not None for r in recs) else "")
    acked = (f"{inc.count:,} record{'s' if inc.count != 1 else ''} ({what}) acknowledged"
             f"{f' at acks={acks}' if acks else ''}{by}"
             + (f" (ISR {_common(isrs)} at ack)" if isrs else "")
             + f" between {_secs(inc.first_ack_ns)} and {_secs(inc.last_ack_ns)}")
    ev = inc.cause_event
    cause_time = int(ev["time"]) if ev and isinstance(ev.get("time"), int) else inc.last_ack_ns
    if inc.cause == "truncate" and ev:
        how = (f"lost when broker {ev.get('node')} truncated {truncated(ev)} "
               f"({ev.get('reason', '?')}) at {_secs(cause_time)}")
    elif inc.cause == "log-recovery" and ev:
        how = (f"lost when log recovery on broker {ev.get('node')} cut the log to offset "
               f"{ev.get('log_end_offset')} ({ev.get('reason', '?')}) at {_secs(cause_time)}")
    elif inc.cause in ("unclean-election", "unclean-recovery") and ev:
        how = (f"lost in the {inc.cause.replace('-', ' ')} of broker {ev.get('leader')} in "
               f"epoch {ev.get('leader_epoch')} at {_secs(cause_time)}")
    elif ev and ev.get("fault"):
        hosts = _brokers_by_host(events)
        nodes = [hosts.get(str(n), str(n)) for v in ev.get("values", []) if isinstance(v, dict)
                 for n in (v.get("nodes") or [])]
        how = (f"lost in the {inc.cause.replace('-', ' ')} of {', '.join(nodes) or '?'} "
               f"at {_secs(cause_time)}")
    else:
        return (f"{acked}: lost, and no truncation, log recovery, unclean election or disk "
                f"fault in events.jsonl explains it" + _storage_text(storage))
    if inc.cause in ("truncate", "log-recovery"):
        elected = _last_election(events, inc.partition, inc.first_ack_ns, cause_time)
        if elected:
            how += (f" after broker {elected.get('leader')} was elected in epoch "
                    f"{elected.get('leader_epoch')}")
    during = _faults_in(faults, inc.first_ack_ns, cause_time)
    if during:
        how += " during the " + ", ".join(
            f"{w.kind} at {w.start_s:.2f}-{w.end_s:.2f} s" for w in during[:3])
    return f"{acked}, {how}{_storage_text(storage)}"


def _story(inc: Incident, events: list[dict[str, Any]], faults: list[Any]) -> list[str]:
    ev = inc.cause_event
    cause_time = int(ev["time"]) if ev and isinstance(ev.get("time"), int) else inc.last_ack_ns
    start = inc.first_ack_ns
    steps: list[tuple[int, str]] = []
    state = _state_at(events, inc.partition, start)
    if state:
        steps.append((start - 1, f"{_secs(start)} (first ack): broker {state.get('leader')} leads in "
                                  f"epoch {state.get('leader_epoch')}, ISR {_set(state.get('isr'))}"
                                  f", ELR {_set(state.get('elr'))}"))
    hosts = _brokers_by_host(events)
    for w in _faults_in(faults, start, cause_time):
        target = _fault_target(w, hosts)
        steps.append((w.start_ns, f"{_secs(w.start_ns)}: {w.kind} starts"
                                  + (f" ({target})" if target else "")))
        if w.end_ns is not None and w.end_ns <= cause_time + NS:
            steps.append((w.end_ns, f"{_secs(w.end_ns)}: {w.kind} ends"))
    steps.append((start, f"{_secs(start)}-{_secs(inc.last_ack_ns)}: {inc.count:,} records at "
                         f"offsets {inc.min_offset}-{inc.max_offset} are acknowledged"))
    brokers = set()
    for e in events:
        if e["time"] < start or e["time"] > cause_time:
            continue
        kind = e.get("kind")
        if e.get("partition") == inc.partition:
            if kind == "partition-change":
                # a Kafka run's changes are observed from outside: no reason, but a source
                why = e.get("reason") or e.get("source")
                steps.append((e["time"], f"{_secs(e['time'])}: controller: leader "
                                         f"{e.get('leader')} epoch {e.get('leader_epoch')}, ISR "
                                         f"{_set(e.get('isr'))}, ELR {_set(e.get('elr'))}"
                                         + (f" ({why})" if why else "")))
                brokers.add(e.get("leader"))
            elif kind in ("unclean-election", "unclean-recovery"):
                steps.append((e["time"], f"{_secs(e['time'])}: {kind.replace('-', ' ')} of broker "
                                         f"{e.get('leader')} in epoch {e.get('leader_epoch')}"))
            elif kind == "truncate" and not (ev and e["time"] == ev.get("time")
                                             and str(e.get("node")) == str(ev.get("node"))):
                steps.append((e["time"], f"{_secs(e['time'])}: broker {e.get('node')} truncates "
                                         f"{truncated(e)}"))
        elif kind in ("broker-fenced", "broker-unfenced", "broker-start"):
            who = e.get("broker", e.get("node"))
            extra = f" ({e['reason']})" if e.get("reason") else ""
            steps.append((e["time"], f"{_secs(e['time'])}: broker {who} "
                                     f"{kind.removeprefix('broker-')}{extra}"))
    if ev is not None:
        steps.append((cause_time, f"{_secs(cause_time)}: {_cause_text(inc)}: the "
                                  f"{inc.count:,} records are gone"))
    else:
        steps.append((inc.last_ack_ns + 1, "no event in events.jsonl removes these offsets: "
                                           "the loss is unexplained"))
    steps.sort(key=lambda s: s[0])
    # Too long: drop broker fencing first (the controller's partition changes say the same),
    # then elide the middle.
    minor = [i for i, (_, text) in enumerate(steps)
             if re.search(r": broker \S+ (fenced|unfenced|start)", text)]
    drop = set(minor[:max(0, len(steps) + 1 - STORY_STEPS)])
    if drop:
        steps = [s for i, s in enumerate(steps) if i not in drop]
        steps.insert(len(steps) - 1, (steps[-1][0], f"({len(drop)} broker fencing event(s) "
                                                    "left out; all are on the timeline)"))
    if len(steps) > STORY_STEPS:
        steps = steps[:STORY_STEPS - 2] + [(0, f"... {len(steps) - STORY_STEPS + 1} more "
                                               "events ...")] + steps[-1:]
    return [text for _, text in steps]


def _cause_text(inc: Incident) -> str:
    ev = inc.cause_event or {}
    if inc.cause == "truncate":
        return f"broker {ev.get('node')} truncates {truncated(ev)} ({ev.get('reason', '?')})"
    if inc.cause == "log-recovery":
        return f"log recovery on broker {ev.get('node')} cuts the log to {ev.get('log_end_offset')}"
    return inc.cause.replace("-", " ")


def group_records(recs: list[dict[str, Any]], faults: list[Any],
                  ) -> list[tuple[Incident, list[dict[str, Any]]]]:
    """loss.parquet's records grouped into incidents (numbered, biggest first, explained ones
    before the rest), each with its members in ack order and its focus window."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    causes: dict[tuple, tuple[str, dict[str, Any] | None]] = {}
    for rec in recs:
        partition = _int(rec.get("partition")) or 0
        cause, ev = _cause(rec, faults)
        key = _key(partition, cause, ev)
        groups.setdefault(key, []).append(rec)
        causes.setdefault(key, (cause, ev))
    incidents = [_incident(key, causes[key], members) for key, members in groups.items()]
    incidents.sort(key=lambda im: (im[0].cause == "unexplained", -im[0].count,
                                   im[0].first_ack_ns))
    for number, (inc, _) in enumerate(incidents, 1):
        inc.number = number
    return incidents


def _incident(key: tuple, cause: tuple[str, dict[str, Any] | None],
              members: list[dict[str, Any]]) -> tuple[Incident, list[dict[str, Any]]]:
    members.sort(key=lambda r: (_int(r.get("ack_time")) or 0, _int(r.get("offset")) or 0))
    acks_ns = [_int(r.get("ack_time")) or 0 for r in members]
    offsets = [_int(r.get("offset")) or 0 for r in members]
    inc = Incident(number=0, partition=key[0], cause=cause[0], cause_event=cause[1],
                   count=len(members),
                   kinds=dict(Counter(str(r.get("kind") or "lost") for r in members)),
                   first_ack_ns=min(acks_ns), last_ack_ns=max(acks_ns),
                   min_offset=min(offsets), max_offset=max(offsets))
    ev = inc.cause_event
    until = int(ev["time"]) if ev and isinstance(ev.get("time"), int) else inc.last_ack_ns
    until = max(until, inc.last_ack_ns)
    inc.t0 = max(0.0, (inc.first_ack_ns - FOCUS_MARGIN_NS) / NS)
    inc.t1 = (until + FOCUS_MARGIN_NS) / NS
    return inc, members


def detail_windows(recs: list[dict[str, Any]], margin_ns: int) -> list[tuple[int, int, int]]:
    """(partition, t0_ns, t1_ns) around each incident, for the timeline's full-detail view,
    known before the history is read: without the fault windows, which only explain records
    no event does (their window then ends `margin_ns` after the last ack, not at the fault)."""
    return [(inc.partition, int(inc.t0 * NS) - margin_ns, int(inc.t1 * NS) + margin_ns)
            for inc, _ in group_records(recs, [])]


def build_incidents(recs: list[dict[str, Any]], events: list[dict[str, Any]],
                    faults: list[Any], acks: str = "", end_ns: int = 0) -> list[Incident]:
    """loss.parquet's records (`read_records`) as incidents, biggest first, each told as a
    headline and a story."""
    out = []
    for inc, members in group_records(recs, faults):
        inc.headline = _headline(inc, members, events, faults, acks)
        inc.story = _story(inc, events, faults)
        if end_ns:
            inc.t1 = min(inc.t1, max(end_ns / NS, inc.t0 + 0.1))
        inc.rows = [{c: r.get(c) for c in ROW_COLUMNS if c in r}
                    for r in members[:ROWS_PER_INCIDENT]]
        out.append(inc)
    return out


def read_records(loss_path: Path) -> list[dict[str, Any]]:
    """loss.parquet's rows."""
    return pq.ParquetFile(loss_path).read().to_pylist()
