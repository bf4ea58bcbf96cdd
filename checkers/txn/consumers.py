"""Each consumer judged by what it may see: its isolation level, and its group.

- **Read-uncommitted** polls (`"isolation": "read_uncommitted"`) may return records of
  aborted transactions and of transactions not yet committed: for them that is no anomaly,
  so they are taken out of everything that judges read-committed reads (the per-partition
  checks read `committed_view`, and the transactional analysis `split`), and judged here
  against the log alone: a value where the log holds another (`inconsistent-offsets`), a
  value at a second offset (`duplicate`), a poll that starts below the offset it asked for
  or goes back inside itself (`nonmonotonic-poll`, `int-nonmonotonic-poll`), or jumps over a
  record known to be in the log (`poll-skip`, `int-poll-skip`). A read-uncommitted consumer
  sees every record of the log, so any known record is one it must not jump over. What they
  read of aborted and of not-yet-committed transactions is counted in the stats.
- **A consumer group** (polls carrying `group`): a member reads a partition on from the
  group's committed offset, which never passes what some member returned, so the group as a
  whole must return every committed record below the highest offset it read, across every
  rebalance; a committed record no member ever returned is a `poll-skip` of the group.
  Records the group returned twice (a rebalance before their offsets were committed) are
  at-least-once delivery, counted in the stats.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from checkers.txn.ops import UNCOMMITTED, Poll, Txn
from runformat.jsonl import history_line

if TYPE_CHECKING:
    from checkers.txn.analysis import Findings

_MARK = b'"read_uncommitted"'


def committed_view(history: Path, scratch: Path) -> Path:
    """The history the per-partition checks read: `history` itself, or when some polls are
    read-uncommitted, a copy in `scratch` where those polls returned nothing (every line
    kept, so indexes and times stay as they were)."""
    if not _marked(history):
        return history
    view = scratch / "history.committed.jsonl"
    with history.open("rb") as src, view.open("wb") as dst:
        for line in src:
            dst.write(_emptied(line) if _MARK in line else line)
    return view


def _marked(history: Path, block: int = 1 << 22) -> bool:
    """Whether `history` holds the mark of a read-uncommitted poll anywhere, read in blocks
    (a block's search is one C call; a line at a time, 10M operations took 6.9 s, not 0.8)."""
    with history.open("rb") as fh:
        tail = b""
        while chunk := fh.read(block):
            if _MARK in tail + chunk[: len(_MARK) - 1] or _MARK in chunk:
                return True
            tail = (tail + chunk[-(len(_MARK) - 1) :])[-(len(_MARK) - 1) :]
    return False


def _emptied(line: bytes) -> bytes:
    op = history_line(line)
    if op is None:
        return line  # malformed: kept as it is, for the ingest to say what is wrong with it
    if not (op.get("isolation") == UNCOMMITTED and "records" in op):
        return line
    return (json.dumps({**op, "records": []}) + "\n").encode()


def split(txns: list[Txn]) -> tuple[list[Txn], list[tuple[Txn, Poll]]]:
    """The transactions without their read-uncommitted polls (those left with nothing are
    dropped), and those polls with their transactions."""
    kept: list[Txn] = []
    uncommitted: list[tuple[Txn, Poll]] = []
    for t in txns:
        ru = [p for p in t.polls if p.isolation == UNCOMMITTED]
        if not ru:
            kept.append(t)
            continue
        uncommitted += [(t, p) for p in ru]
        rest = [p for p in t.polls if p.isolation != UNCOMMITTED]
        if rest or t.sends:
            kept.append(replace(t, polls=rest))
    return kept, uncommitted


class Log:
    """What the history shows each partition holds: committed records by offset (acked by
    an ok send, read by a read-committed poll, ok or not), and each partition's completed
    final read, when there is one."""

    def __init__(self, txns: Iterable[Txn]) -> None:
        self.at: dict[tuple[int, int], set[int]] = defaultdict(set)  # (key, offset) -> values
        self.offsets: dict[int, set[int]] = defaultdict(set)  # key -> its offsets in `at`
        self.final: dict[int, dict[int, int]] = {}  # key -> offset -> value
        for t in txns:
            for s in t.sends:
                if t.type == "ok" and s.offset is not None:
                    self._add(s.key, s.offset, s.value)
            for p in t.polls:
                for o, v in p.records:
                    self._add(p.key, o, v)
                if p.final:
                    self.final[p.key] = dict(p.records)

    def _add(self, key: int, offset: int, value: int) -> None:
        self.at[(key, offset)].add(value)
        self.offsets[key].add(offset)

    def known(self, key: int, offset: int) -> bool:
        """A committed record is known at the offset, and not lost (the loss check reports
        a record its partition's completed final read misses, once)."""
        if (key, offset) not in self.at:
            return False
        return key not in self.final or offset in self.final[key]


def judge_uncommitted(txns: list[Txn], uncommitted: list[tuple[Txn, Poll]],
                      findings: Findings) -> None:
    """Read-uncommitted polls against the log; `txns` without them (split)."""
    log = Log(txns)
    seen_at: dict[tuple[int, int], set[int]] = defaultdict(set)  # RU: (key, offset) -> values
    for t, p in uncommitted:
        _order(t, p, log, seen_at, findings)
    _against_log(log, seen_at, findings)
    findings.stats["read_uncommitted"] = _what_they_read(txns, uncommitted)


def _order(t: Txn, p: Poll, log: Log, seen_at: dict[tuple[int, int], set[int]],
           findings: Findings) -> None:
    """Each record against the offset expected next: the one the poll asked for, then the
    record before it + 1."""
    example = {"txn": t.id, "process": p.process, "partition": p.key,
               "isolation": UNCOMMITTED}
    expected = p.start
    for i, (o, v) in enumerate(p.records):
        seen_at[(p.key, o)].add(v)
        prefix = "int-" if i else ""
        if expected is not None and o < expected:
            findings.add(f"{prefix}nonmonotonic-poll", {**example, "offset": o,
                                                        "expected": expected})
        elif expected is not None:
            gap = [x for x in range(expected, o) if log.known(p.key, x)]
            if gap:
                findings.add(f"{prefix}poll-skip", {**example, "offset": o,
                                                    "skipped_offsets": gap[:8]})
        expected = o + 1


def _against_log(log: Log, seen_at: dict[tuple[int, int], set[int]],
                 findings: Findings) -> None:
    """Offsets where a read-uncommitted poll saw another value than the rest of the history
    (or than another such poll), and values it saw at a second offset; what the
    read-committed reads show alone is the per-partition checks' to report."""
    for (k, o), values in sorted(seen_at.items()):
        committed = log.at.get((k, o), set())
        if len(committed) < 2 <= len(values | committed):
            findings.add("inconsistent-offsets", {"partition": k, "offset": o,
                                                  "values": sorted(values | committed),
                                                  "seen_in": "a read-uncommitted poll"})
    offsets: dict[tuple[int, int], set[int]] = defaultdict(set)
    for (k, o), values in log.at.items():
        for v in values:
            offsets[(k, v)].add(o)
    extra: dict[tuple[int, int], set[int]] = defaultdict(set)
    for (k, o), values in seen_at.items():
        for v in values:
            extra[(k, v)].add(o)
    for (k, v), more in sorted(extra.items()):
        there = offsets.get((k, v), set())
        if len(there) < 2 <= len(there | more):
            findings.add("duplicate", {"partition": k, "value": v,
                                       "offsets": sorted(there | more),
                                       "seen_in": "a read-uncommitted poll"})


def _what_they_read(txns: list[Txn], uncommitted: list[tuple[Txn, Poll]]) -> dict[str, int]:
    """Records read-uncommitted polls returned: of aborted transactions, of transactions
    that had not yet completed their commit when the poll completed, and the others."""
    writer = {(s.key, s.value): t for t in txns for s in t.sends}
    counts = {"polls": len(uncommitted), "records": 0, "aborted": 0,
              "before_commit": 0}
    for t, p in uncommitted:
        for _, v in p.records:
            counts["records"] += 1
            w = writer.get((p.key, v))
            if w is not None and w.type == "fail":
                counts["aborted"] += 1
            elif w is not None and t.complete is not None and (
                    w.complete is None or w.complete > t.complete):
                counts["before_commit"] += 1
    return counts


def group_skips(txns: list[Txn], findings: Findings) -> None:
    """Committed records below the highest offset a group read that none of its members
    returned (a poll-skip of the group, across its rebalances); and how many records it
    returned more than once. A crashed transaction's polls count as returned: it may have
    committed the group's offsets past them (a consume-transform-produce transaction whose
    commit timed out), and then no member returns them again; an aborted one's do not."""
    log = Log(txns)
    read: dict[tuple[str, int], list[int]] = defaultdict(list)  # (group, key) -> offsets
    for t in txns:
        for p in t.polls:
            if p.group is not None and t.type != "fail":
                read[(p.group, p.key)] += [o for o, _ in p.records]
    again = 0
    for (group, k), offsets in sorted(read.items()):
        got = set(offsets)
        again += len(offsets) - len(got)
        top = max(got, default=-1)
        missed = sorted(o for o in log.offsets[k] - got if o < top and log.known(k, o))
        if missed:
            findings.add("poll-skip", {
                "group": group, "partition": k, "read_up_to": top, "count": len(missed),
                "skipped": [[o, min(log.at[(k, o)])] for o in missed[:8]],
                "across": "the group's members and rebalances"})
    if read:
        findings.stats["group_redelivered"] = again
