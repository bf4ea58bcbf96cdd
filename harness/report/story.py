"""The minimal reproduction of a run as numbered steps, for the top of its report.

A folder written by `harness shrink` holds minimal.json; the original run holds shrunk.json,
pointing at it. The steps come from the minimal run's own files: schedule.json (the faults,
their times and the nodes they hit), events.jsonl (leader and ISR changes, fencing, elections,
truncations, log recovery; see docs/formats.md), history.jsonl (to put the node events on the
schedule's time axis, and what a power loss dropped) and results.json (what was lost):

    1. broker 1 leads epoch 0, ISR {1,2,3}
    2. at 1.00 s brokers 2, 3 (n3, n4) are paused for 5.10 s
    ...
    9. broker 3 truncates offsets 0-37: 38 records removed (leader-epoch)
    10. the final read misses 38 acknowledged records (lost-write)

Reads files only (harness.report imports nothing else from harness)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.report.events import truncated
from nemesis.kinds import lookup
from runformat import Event, Op, history, read_events

MINIMAL = "minimal.json"
SHRUNK = "shrunk.json"
MAX_STEPS = 30
_DAMAGE = ("truncate", "log-recovery", "unclean-election", "unclean-recovery")
_LOSS = ("lost-write", "unseen", "inconsistent-offsets")


@dataclass
class Story:
    minimal_dir: Path
    steps: list[str]
    replay: str
    anomaly: str | None
    shrink: dict[str, Any] = field(default_factory=dict)
    is_self: bool = True  # the report is of the minimal run itself
    link: str | None = None  # from the original run's report to the minimal one's


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class RunLines:
    """What a story needs of a run's JSONL files: its events, its fault operations and when
    its first workload operation happened (the report's one pass collects the same)."""

    events: list[Event]
    nemesis: list[Op]
    first_op_ns: int | None


def read_lines(folder: Path) -> RunLines:
    """A folder's RunLines, each file read once (a missing file reads as empty)."""
    nemesis: list[Op] = []
    first: int | None = None
    path = folder / "history.jsonl"
    for op in history(path) if path.is_file() else ():
        if op.get("process") == "nemesis":
            nemesis.append(op)
        elif first is None:
            first = op["time"]
    return RunLines(read_events(folder / "events.jsonl"), nemesis, first)


def find_minimal(run_dir: Path) -> tuple[Path, bool] | None:
    """(the minimal run folder, whether it is `run_dir` itself), or None."""
    run_dir = Path(run_dir)
    if (run_dir / MINIMAL).is_file():
        return run_dir, True
    pointer = _json(run_dir / SHRUNK)
    if isinstance(pointer, dict) and pointer.get("minimal_dir"):
        folder = (run_dir / pointer["minimal_dir"]).resolve()
        if (folder / MINIMAL).is_file():
            return folder, False
    return None


def _host(name: str) -> str:
    """n1 runs the controller, nK broker K-1."""
    if name == "n1":
        return "the controller (n1)"
    try:
        return f"broker {int(name[1:]) - 1} ({name})"
    except ValueError:
        return name


def _hosts(names: list[str]) -> str:
    names = sorted(names, key=lambda n: (len(n), n))
    if len(names) == 1:
        return _host(names[0])
    brokers = [n for n in names if n != "n1"]
    ids = ", ".join(str(int(n[1:]) - 1) for n in brokers)
    text = f"brokers {ids} ({', '.join(brokers)})"
    return text + (" and the controller (n1)" if "n1" in names else "")


def _set(values: Any) -> str:
    return "{" + ",".join(str(v) for v in (values or [])) + "}"


def _tell(kind: str, nodes: list[str], healed: bool = False) -> str | None:
    """The kind's own phrase (FaultKind.phrase, .heal_phrase) for the hosts it hit; a kind no
    longer registered (an old run's) is told plainly, its heal not at all."""
    who = _hosts(nodes) if nodes else "nobody"
    try:
        return lookup(kind).tell(nodes, who, healed)
    except ValueError:
        return None if healed else f"{who} {'is' if len(nodes) == 1 else 'are'} hit by {kind}"


def _sides(grudge: dict[str, Any], pairs: list[tuple[str, str]]) -> list[list[str]]:
    """The groups of nodes that can still reach each other, if the cut splits them."""
    nodes = sorted(set(grudge) | {b for bs in grudge.values() for b in bs})
    group = {n: n for n in nodes}

    def root(n: str) -> str:
        while group[n] != n:
            n = group[n]
        return n

    cut = set(pairs)
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            if (a, b) not in cut:
                group[root(a)] = root(b)
    out: dict[str, list[str]] = {}
    for n in nodes:
        out.setdefault(root(n), []).append(n)
    return sorted(out.values())


def _fault_text(fault: dict[str, Any], lost: dict[str, Any] | None) -> str:
    kind, resolved = fault["kind"], fault.get("resolved") or {}
    dur = (fault["ended_s"] - fault["started_s"]) if fault.get("ended_s") is not None \
        else fault.get("duration_s", 0)
    if "grudge" in resolved:
        grudge = resolved["grudge"]
        pairs = sorted({tuple(sorted((a, b))) for a, bs in grudge.items() for b in bs})
        common = set(pairs[0]).intersection(*pairs) if pairs else set()
        if len(pairs) > 1 and common:  # one node cut off from the others
            node = sorted(common)[0]
            others = [b if a == node else a for a, b in pairs]
            text = f"{_host(node)} is cut off from {', '.join(others)}"
        elif len(pairs) > 1 and len(groups := _sides(grudge, pairs)) > 1:
            text = "the network is split: " + " | ".join(
                "{" + ", ".join(g) + "}" for g in groups)
        else:
            cut = ", ".join(f"{a}<->{b}" for a, b in pairs)
            text = f"the network is cut: link{'s' if len(pairs) > 1 else ''} {cut}"
    else:
        text = _tell(kind, list(resolved.get("nodes") or [])) or kind
    text += f" for {dur:.2f} s"
    if lost:
        records = sum(int((v or {}).get("lost_records", 0) or 0) for v in lost.values()
                      if isinstance(v, dict))
        if records:
            text += f", losing {records} unflushed record{'s' if records != 1 else ''}"
    return text


def _event_text(e: dict[str, Any], multi: bool, prev: dict[Any, Any]) -> str | None:
    kind = e.get("kind")
    part = f" partition {e.get('partition')}" if multi else ""
    if kind == "partition-change":
        key = (e.get("leader"), e.get("leader_epoch"), tuple(e.get("isr") or ()),
               tuple(e.get("elr") or ()))
        p = e.get("partition", 0)
        if prev.get(p) == key:
            return None
        prev[p] = key
        elr = f", ELR {_set(e.get('elr'))}" if e.get("elr") else ""
        reason = e.get("reason")
        if e.get("leader") is None:
            return (f"{part.strip() or 'the partition'} has no leader (epoch "
                    f"{e.get('leader_epoch')}), ISR {_set(e.get('isr'))}{elr} ({reason})")
        return (f"broker {e['leader']} leads{part} epoch {e.get('leader_epoch')}, "
                f"ISR {_set(e.get('isr'))}{elr} ({reason})")
    if kind == "broker-start":
        prev[("start", e.get("node"))] = e.get("clean_shutdown")
        return None
    if kind == "broker-registered":
        if e.get("clean") and prev.get(("start", e.get("broker"))) is False:
            return (f"broker {e.get('broker')} comes back without its clean-shutdown marker "
                    "but registers as cleanly shut down")
        return None
    if kind == "broker-fenced":
        return f"the controller fences broker {e.get('broker')} ({e.get('reason')})"
    if kind == "truncate":
        removed = e.get("removed")
        count = (f": {removed} record{'' if removed == 1 else 's'} removed"
                 if removed is not None else "")
        return f"broker {e.get('node')} truncates{part} {truncated(e)}{count} ({e.get('reason')})"
    if kind == "log-recovery":
        return (f"broker {e.get('node')} recovers its log{part}: {e.get('truncated_bytes')} bytes "
                f"cut, log end {e.get('log_end_offset')} ({e.get('reason')})")
    if kind == "unclean-election":
        return f"unclean election: broker {e.get('leader')} leads{part} epoch {e.get('leader_epoch')}"
    if kind == "unclean-recovery":
        return (f"unclean recovery ({e.get('strategy')}): broker {e.get('leader')} leads{part} "
                f"epoch {e.get('leader_epoch')}")
    return None


def _workload_offset(lines: RunLines, faults: list[dict[str, Any]]) -> float:
    """Seconds from the run clock's zero (history and events) to the workload's start (the
    schedule's time axis): the first nemesis start matched with its fault."""
    started = [f for f in faults if f.get("started_s") is not None]
    for op in lines.nemesis:
        if str(op.get("f", "")).startswith("start-"):
            kind = op["f"][len("start-"):]
            first = next((f for f in sorted(started, key=lambda f: f["started_s"])
                          if f["kind"] == kind), None)
            if first is not None:
                return op["time"] / 1e9 - first["started_s"]
    return (lines.first_op_ns or 0) / 1e9


def build_steps(folder: Path, lines: RunLines | None = None) -> list[str]:
    schedule = _json(folder / "schedule.json") or {}
    faults = [f for f in schedule.get("faults", []) if f.get("started_s") is not None]
    lines = lines or read_lines(folder)
    events = lines.events
    results = _json(folder / "results.json") or {}
    offset = _workload_offset(lines, faults)
    multi = len({e.get("partition") for e in events if e.get("kind") == "partition-change"}) > 1
    lost_by_kind: dict[str, dict] = {}
    for op in lines.nemesis:
        if isinstance(op.get("value"), dict) and "lost" in op["value"]:
            lost_by_kind.setdefault(op["f"], op["value"]["lost"])
    first_s = min((f["started_s"] for f in faults), default=0.0)
    last_fault = max((f.get("ended_s") or f["started_s"] for f in faults), default=0.0)
    timeline: list[tuple[float, int, str]] = []
    for f in faults:
        lost = lost_by_kind.pop(f"start-{f['kind']}", None)
        timeline.append((f["started_s"], 0, _fault_text(f, lost)))
        healed = f.get("ended_s") is not None and _tell(
            f["kind"], list((f.get("resolved") or {}).get("nodes") or []), healed=True)
        if healed:
            timeline.append((f["ended_s"], 0, healed))
    # The partition's state when the first fault hits.
    prev: dict[Any, Any] = {}
    initial: list[str] = []
    for e in events:
        t = e.get("time", 0) / 1e9 - offset
        if e.get("kind") == "partition-change" and t <= first_s:
            text = _event_text(e, multi, prev)
            if text:
                initial = [text.rsplit(" (", 1)[0]]
    later = [e for e in events if e.get("time", 0) / 1e9 - offset > first_s]
    damage = [e.get("time", 0) / 1e9 - offset for e in later if e.get("kind") in _DAMAGE]
    horizon = max(damage) if damage else last_fault + 5.0
    for e in later:
        t = e.get("time", 0) / 1e9 - offset
        if t > horizon:
            break
        text = _event_text(e, multi, prev)
        if text:
            timeline.append((t, 1, text))
    timeline.sort(key=lambda x: (x[0], x[1]))
    steps = initial + [f"at {t:.2f} s {text}" for t, order, text in timeline
                       if t <= horizon or order == 0]
    if len(steps) > MAX_STEPS:
        steps = steps[:MAX_STEPS - 1] + [f"... {len(steps) - MAX_STEPS + 1} more steps"]
    steps.append(_outcome(results))
    return steps


def _outcome(results: dict[str, Any]) -> str:
    anomalies = {k: (v or {}).get("count", 0) for k, v in (results.get("anomalies") or {}).items()}
    anomalies = {k: v for k, v in anomalies.items() if v}
    if not anomalies:
        return "the checker finds no anomaly" if results else "(the run was not checked)"
    loss = [(k, anomalies[k]) for k in _LOSS if k in anomalies]
    lost = (results.get("lost") or {}).get("count")
    if lost:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(
            ((results.get("lost") or {}).get("by_kind") or {}).items()))
        text = f"the final read misses {lost} acknowledged record{'s' if lost != 1 else ''} ({kinds})"
    elif loss:
        text = f"{loss[0][1]} {loss[0][0]}"
    else:
        text = "the checker reports"
    others = [f"{k} {v}" for k, v in sorted(anomalies.items()) if k not in _LOSS]
    return text + (f"; also {', '.join(others)}" if others else "")


def build_story(run_dir: Path, lines: RunLines | None = None) -> Story | None:
    """The story of `run_dir`'s minimal reproduction, or None if it has none. `lines`: what
    the report already read of `run_dir`'s own files, used when it is the minimal run."""
    found = find_minimal(run_dir)
    if found is None:
        return None
    folder, is_self = found
    doc = _json(folder / MINIMAL) or {}
    try:
        steps = build_steps(folder, lines if is_self else None)
    except Exception as e:  # a report never fails over its story
        steps = [f"(the steps could not be built: {type(e).__name__}: {e})"]
    replay = f"harness simulate --replay {folder / MINIMAL}"
    link = None if is_self else os.path.relpath(folder / "report.html", Path(run_dir))
    return Story(folder, steps, replay, doc.get("anomaly"), dict(doc.get("shrink") or {}),
                 is_self, link)
