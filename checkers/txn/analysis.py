"""The transactional anomalies of a Kafka history, as Jepsen's Kafka checker defines them.

Version orders: a key's values in the order of the lowest offset each was seen at (acked by
a send that did not fail, or returned by any poll: a failed transaction's poll returned what
the log held). The dependency graph (graph.py) links transactions that committed or may have
(ok and info):

- ww (only when asked, `ww=True`, as Jepsen's `:ww-deps`): T1 sent v1 and T2 sent v2 to one
  key, and v2 is the next version after v1 that a committed-or-crashed transaction sent.
  Kafka appends a transaction's records as they are produced, not at its commit, so
  concurrent transactions from different producers interleave in different orders on
  different partitions: by design, a Kafka maintainer says, so offset order is no write
  order between transactions and, by default, gives no edge (docs/kafka.md, "Transactions");
- wr: T1 sent v and T2 polled it;
- process: T2 is the next transaction of T1's client;
- realtime: T1 completed before T2 was invoked (Elle's reduction: each transaction is linked
  from the frontier of transactions completed before it started, not from all of them).

A cycle is G0 (ww edges only), G1c (ww and wr, at least one wr), and their -process and
-realtime variants when some edge has only process order or real time to explain it. A
cycle whose data edges are all ww on one key is a send-order anomaly that the per-partition
checks report already (nonmonotonic-send, realtime-send-order, int-send-skip): it is left out.

Besides cycles: precommitted-read (a transaction polled a value it sent itself: a
read-committed consumer never sees a record before its transaction commits),
torn-transaction (a crashed transaction that a read proves committed, missing a send from a
completed final read: a transaction commits whole), and what failed
and crashed transactions' polls prove (`evidence`): a duplicate seen only there, and a poll
that skips, or goes back, from the client's last committed read. A transactional consumer
that aborts rewinds to its last committed position, so each poll is compared with the last
ok one, as in Jepsen. A consume-transform-produce group's transactions are judged for
exactly-once delivery (exactly_once.py: duplicate-output, lost-output).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from checkers.txn.consumers import group_skips, judge_uncommitted, split
from checkers.txn.exactly_once import NAMES as EXACTLY_ONCE
from checkers.txn.exactly_once import exactly_once
from checkers.txn.graph import ALL, NAMES, PROCESS, REALTIME, WR, WW, Graph, components, cycle_in
from checkers.txn.ops import Poll, Txn, base_process

EXAMPLES = 8
# name, edge kinds searched, kinds the cycle must use (the first is the one it is sought through)
CYCLES = (
    ("G0", WW, (WW,)),
    ("G1c", WW | WR, (WR,)),
    ("G0-process", WW | PROCESS, (PROCESS,)),
    ("G1c-process", WW | WR | PROCESS, (PROCESS, WR)),
    ("G0-realtime", WW | PROCESS | REALTIME, (REALTIME,)),
    ("G1c-realtime", ALL, (REALTIME, WR)),
)
NAMES_FOUND = tuple(name for name, _, _ in CYCLES) + (
    "precommitted-read", "torn-transaction", "poll-skip", "nonmonotonic-poll", "duplicate",
    "int-poll-skip", "int-nonmonotonic-poll", "inconsistent-offsets", *EXACTLY_ONCE)


@dataclass
class Findings:
    found: dict[str, tuple[int, list[dict[str, Any]]]] = field(default_factory=dict)
    witnessed: set[tuple[int, int, int]] = field(default_factory=set)  # (key, offset, value)
    notes: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    complete: bool = True  # False: the cycle search ran out of time

    def add(self, name: str, example: dict[str, Any]) -> None:
        count, examples = self.found.get(name, (0, []))
        if len(examples) < EXAMPLES:
            examples.append(example)
        self.found[name] = (count + 1, examples)


class Orders:
    """Each key's version order: values by the lowest offset they were seen at."""

    def __init__(self, txns: list[Txn]) -> None:
        first: dict[int, dict[int, int]] = defaultdict(dict)
        for t in txns:
            for s in t.sends:
                if t.type != "fail" and s.offset is not None:
                    _lowest(first[s.key], s.value, s.offset)
            for p in t.polls:
                seen = first[p.key]
                for o, v in p.records:  # _lowest, inlined: a million histories' hot loop
                    if o < seen.get(v, o + 1):
                        seen[v] = o
        self.order = {k: sorted(d, key=lambda v, d=d: (d[v], v)) for k, d in first.items()}
        self.index = {k: {v: i for i, v in enumerate(vs)} for k, vs in self.order.items()}


def _lowest(seen: dict[int, int], value: int, offset: int) -> None:
    if value not in seen or offset < seen[value]:
        seen[value] = offset


class Dependencies:
    """The graph over the transactions that committed or may have (ok and info). Nodes are
    ranked by invocation, which real-time and process edges follow (graph.py: components
    are looked for only around the edges against it). What gave an edge (its key and
    values) is looked up when a cycle is reported (`why`), not kept for every edge."""

    def __init__(self, txns: list[Txn], orders: Orders, ww: bool = False) -> None:
        self.nodes = [t for t in txns if t.type in ("ok", "info")]
        self.orders = orders
        by_invoke = sorted(range(len(self.nodes)),
                           key=lambda i: (self.nodes[i].invoke, self.nodes[i].id))
        rank = [0] * len(by_invoke)
        for r, i in enumerate(by_invoke):
            rank[i] = r
        self.g = Graph(len(self.nodes), rank)
        self.writer: dict[tuple[int, int], int] = {}
        for i, t in enumerate(self.nodes):
            for s in t.sends:
                self.writer[(s.key, s.value)] = i
        if ww:
            self._ww(orders)
        self._wr()
        self._process(by_invoke)
        self._realtime()

    def _ww(self, orders: Orders) -> None:
        self.g.link_all(self._ww_pairs(orders), WW)

    def _ww_pairs(self, orders: Orders) -> Iterator[tuple[int, int]]:
        writer = self.writer
        for k, values in orders.order.items():
            last = None  # the writer of the last value that had one
            for v in values:
                w = writer.get((k, v))
                if w is None:
                    continue
                if last is not None and last != w:
                    yield last, w
                last = w

    def _wr(self) -> None:
        # a transaction's read of its own send links nothing (Graph.link_all)
        writer = self.writer
        self.g.link_all(((w, i) for i, t in enumerate(self.nodes) for p in t.polls
                         for _, v in p.records if (w := writer.get((p.key, v))) is not None),
                        WR)

    def _process(self, by_invoke: list[int]) -> None:
        self.g.link_all(self._process_pairs(by_invoke), PROCESS)

    def _process_pairs(self, by_invoke: list[int]) -> Iterator[tuple[int, int]]:
        last: dict[str, int] = {}  # client -> its latest transaction so far, by invocation
        for i in by_invoke:
            client = base_process(self.nodes[i].process)
            if client in last:
                yield last[client], i
            last[client] = i

    def _realtime(self) -> None:
        self.g.link_all(self._realtime_pairs(), REALTIME)

    def _realtime_pairs(self) -> Iterator[tuple[int, int]]:
        """Elle's reduction: each transaction linked from the frontier of those completed
        before its invocation, not from all of them."""
        events = [(t.invoke, 0, i) for i, t in enumerate(self.nodes)]
        events += [(t.complete, 1, i) for i, t in enumerate(self.nodes) if t.complete is not None]
        events.sort()
        frontier: set[int] = set()
        before: dict[int, list[int]] = {}
        for _, completes, i in events:
            if completes:
                frontier.difference_update(before.pop(i, ()))
                frontier.add(i)
            else:
                before[i] = list(frontier)
                for a in before[i]:
                    yield a, i

    def why(self, a: int, b: int, kind: int) -> dict[str, Any]:
        """What gave edge a -> b its `kind`: for ww the key and the two values (the first
        key, in version-order order, and the first place where b's value follows a's), for
        wr the key and the value b read of a's (b's first such read); {} for the others."""
        if kind == WW:
            return self._ww_why(a, b)
        if kind == WR:
            return next(({"key": p.key, "value": v} for p in self.nodes[b].polls
                         for _, v in p.records if self.writer.get((p.key, v)) == a), {})
        return {}

    def _ww_why(self, a: int, b: int) -> dict[str, Any]:
        keys = {s.key for s in self.nodes[a].sends} & {s.key for s in self.nodes[b].sends}
        for k in (k for k in self.orders.order if k in keys):
            values, index = self.orders.order[k], self.orders.index[k]
            mine = sorted(index[s.value] for s in self.nodes[a].sends
                          if s.key == k and s.value in index)
            for i in mine:
                j = i + 1
                while j < len(values) and (k, values[j]) not in self.writer:
                    j += 1
                if j < len(values) and self.writer[(k, values[j])] == b:
                    return {"key": k, "value": values[i], "value'": values[j]}
        return {}


def _single_key_sends(deps: Dependencies, steps: list[tuple[int, int, int]]) -> bool:
    keys = {deps.why(a, b, kind)["key"] for a, b, kind in steps if kind == WW}
    return len(keys) == 1 and not any(kind == WR for _, _, kind in steps)


def _cycle_example(name: str, deps: Dependencies, steps: list[tuple[int, int, int]]
                   ) -> dict[str, Any]:
    def txn(i: int) -> dict[str, Any]:
        t = deps.nodes[i]
        return {"txn": t.id, "process": t.process, "type": t.type}

    return {"type": name, "cycle": [txn(a) for a, _, _ in steps] + [txn(steps[0][0])],
            "steps": [{"type": NAMES[kind], **deps.why(a, b, kind)} for a, b, kind in steps]}


def find_cycles(deps: Dependencies, findings: Findings, deadline: float) -> None:
    for name, allowed, needs in CYCLES:
        for scc in components(deps.g, allowed):
            if time.monotonic() > deadline:
                findings.complete = False
                return
            steps = cycle_in(deps.g, scc, allowed, needs)
            if steps is not None and not _single_key_sends(deps, steps):
                findings.add(name, _cycle_example(name, deps, steps))


def precommitted_reads(txns: list[Txn], findings: Findings) -> None:
    for t in txns:
        if t.type == "fail" or not t.sends or not t.polls:
            continue
        sent = {(s.key, s.value) for s in t.sends}
        for p in t.polls:
            for o, v in p.records:
                if (p.key, v) in sent:
                    findings.add("precommitted-read", {"txn": t.id, "process": t.process,
                                                       "partition": p.key, "offset": o,
                                                       "value": v})


def torn_transactions(txns: list[Txn], findings: Findings) -> None:
    """A crashed (info) transaction one of whose sends an ok poll returned committed, all of
    it; a send of it missing from its partition's completed final read is then lost. (An ok
    transaction's missing send is a lost-write already; an info send is judged alone there.)"""
    read = {(p.key, v) for t in txns if t.type == "ok" for p in t.polls for _, v in p.records}
    final: dict[int, set[int]] = defaultdict(set)
    for t in txns:
        for p in t.polls:
            if p.final:
                final[p.key] |= {v for _, v in p.records}
    for t in txns:
        if t.type != "info" or not any((s.key, s.value) in read for s in t.sends):
            continue
        for s in t.sends:
            if s.key in final and s.value not in final[s.key]:
                findings.add("torn-transaction", {
                    "txn": t.id, "process": t.process, "partition": s.key, "value": s.value,
                    "read": sorted([x.key, x.value] for x in t.sends
                                   if (x.key, x.value) in read)})


def evidence(txns: list[Txn], orders: Orders, findings: Findings) -> None:
    """What the polls of failed and crashed transactions prove, beyond the ok ones."""
    unsure = [p for t in txns if t.type != "ok" for p in t.polls]
    findings.witnessed = {(p.key, o, v) for p in unsure for o, v in p.records}
    _duplicates(txns, unsure, findings)
    _rewound_polls(txns, orders, findings)


def _duplicates(txns: list[Txn], unsure: list[Poll], findings: Findings) -> None:
    """A value at two offsets of a key, one of them seen only in a failed or crashed poll
    (the per-partition checks find the others)."""
    there: dict[tuple[int, int], set[int]] = {(p.key, v): set() for p in unsure
                                              for _, v in p.records}
    for t in txns:
        for s in t.sends:
            if t.type == "ok" and s.offset is not None and (s.key, s.value) in there:
                there[(s.key, s.value)].add(s.offset)
        for p in t.polls if t.type == "ok" else ():
            for o, v in p.records:
                if (p.key, v) in there:
                    there[(p.key, v)].add(o)
    extra: dict[tuple[int, int], set[int]] = defaultdict(set)
    for p in unsure:
        for o, v in p.records:
            extra[(p.key, v)].add(o)
    for (k, v), offsets in sorted(there.items()):
        every = offsets | extra[(k, v)]
        if len(offsets) < 2 <= len(every):
            findings.add("duplicate", {"partition": k, "value": v, "offsets": sorted(every),
                                       "seen_in": "a failed or crashed transaction's poll"})


def _client_key(process: str) -> str:
    """A translated process name without its crash count: a consumer is compared with its
    last committed read across a crash, not across an assignment that reset the key."""
    return re.sub(r"#\d+", "", process)


def _rewound_polls(txns: list[Txn], orders: Orders, findings: Findings) -> None:
    """Each poll against the client's last ok poll of the key. Reported here when the
    per-partition checks cannot see it: the later poll failed or crashed, or a crash
    separates the two, or every record it skipped was read only by failed or crashed polls."""
    read: dict[int, set[int]] = defaultdict(set)  # key -> version indices some poll read
    read_ok: dict[int, set[int]] = defaultdict(set)
    for t in txns:
        for p in t.polls:
            index = orders.index[p.key] if p.records else {}
            for _, v in p.records:
                read[p.key].add(index[v])
                if t.type == "ok":
                    read_ok[p.key].add(index[v])
    last: dict[tuple[str, int], tuple[Txn, Poll, int]] = {}
    for t in txns:
        for p in sorted(t.polls, key=lambda p: p.mop):
            if not p.records:
                continue
            index = orders.index[p.key]
            first, end = index[p.records[0][1]], index[p.records[-1][1]]
            here = (_client_key(p.process), p.key)
            if here in last:
                _compare(last[here], t, p, first, orders, read[p.key], read_ok[p.key], findings)
            if t.type == "ok":
                last[here] = (t, p, end)


def _compare(prev: tuple[Txn, Poll, int], t: Txn, p: Poll, first: int, orders: Orders,
             read: set[int], read_ok: set[int], findings: Findings) -> None:
    pt, pp, end = prev
    unseen_by_them = t.type != "ok" or pp.process != p.process
    example = {"partition": p.key, "process": p.process, "txns": [pt.id, t.id],
               "types": [pt.type, t.type], "delta": first - end}
    if first > end + 1:
        skipped = [i for i in range(end + 1, first) if i in read]
        if skipped and (unseen_by_them or not any(i in read_ok for i in skipped)):
            values = orders.order[p.key]
            findings.add("poll-skip", {**example, "skipped": [values[i] for i in skipped]})
    elif first <= end and unseen_by_them:
        values = orders.order[p.key]
        findings.add("nonmonotonic-poll", {**example, "values": [values[end], values[first]]})


def analyse(txns: list[Txn], budget_s: float = 300.0, ww: bool = False) -> Findings:
    """Every transactional finding of a history's transactions (ww: infer write-write
    dependencies from offsets)."""
    started = time.monotonic()
    findings = Findings()
    txns, uncommitted = split(txns)  # read-uncommitted polls are judged apart (consumers.py)
    orders = Orders(txns)
    deps = Dependencies(txns, orders, ww)
    built = time.monotonic()
    find_cycles(deps, findings, started + budget_s)
    precommitted_reads(txns, findings)
    torn_transactions(txns, findings)
    evidence(txns, orders, findings)
    findings.stats.update({"transactions": len(txns), "graph_nodes": len(deps.nodes),
                           "graph_edges": deps.g.edges(), "graph_s": round(built - started, 3),
                           "search_s": round(time.monotonic() - built, 3)})
    if uncommitted:
        judge_uncommitted(txns, uncommitted, findings)
    group_skips(txns, findings)
    exactly_once(txns, findings)
    if not findings.complete:
        findings.notes.append(
            f"the transactional cycle search stopped after its budget of {budget_s:.0f} s: "
            f"G0, G1c and their -process and -realtime variants were not fully judged")
    return findings
