"""The protocol invariants (checkers/invariants.py) on a real run's trace.

A real run has no global state to look at, only what the nodes wrote to events.jsonl and what
the clients wrote to history.jsonl. `check_trace` replays both in time order (netns hosts
share one kernel clock, so node events order across hosts; the history is on the same run
clock) and rebuilds, as far as they tell, the snapshot checkers.invariants reads:

- the controller's metadata: exact, from `partition-change`, `broker-fenced`/`-unfenced` and
  `broker-registered`, each controller batch (`batch`, `batch_size`: one call's atomic change)
  applied whole, so no state inside a batch is judged;
- who is running: a `broker-start` begins an incarnation, its `broker-registered` makes it
  running; a nemesis `start-kill`, `start-power-loss`, `start-torn-power-loss`, `start-outage`
  or a `broker-stop` ends it (a power loss also makes its log unknown until the next
  `log-open`);
- each replica's log: `log-open` (log end, HWM, the leader-epoch cache), `epoch-start`,
  `truncate`, `become-leader`/`-follower` and `log-progress` (log end, HWM, role). The epoch
  cache is exact; the log end and the HWM are exact at the events that report them and lower
  bounds in between (appends only add; everything that removes records is an event), so an
  invariant about a log's end is only decided at those events (`ReplicaState.leo_known`).
  Records are known by (offset, epoch), not by value: within one epoch one leader appends;
- the facts: the true HWM is a lower bound -- the HWMs leaders reported (`log-progress`,
  `become-leader`), the `hwm` of each ok poll and the offset of each acks=all
  acknowledgement, each counted only while the node that served it still leads in that
  epoch, whose epoch cache then gives the committed prefix's epochs; acknowledged records
  are the ok sends (offset, and the epoch of the acknowledging leader, which is the record's);
  records consumers read are checked by the epoch their acknowledgement names.

- what each replica acts on (`partition-state`: MetadataLogMatching, against the controller's
  `partition-change` events), each leader's ISR views (`isr-view`: the maximal ISR, the
  committed one and whether an AlterPartition is pending: ReplicationQuorumSuperset), and when
  a restarted follower's log is reconciled with its leader (`reconciled`, or `become-leader`):
  until then its checkpointed HWM is no stable prefix, as in the simulator.

The invariants are evaluated after every event of a node, for the partitions it concerns,
and once at the end. What a trace cannot decide, said in the report's `undecided`:

- in traces written before the nodes emitted `partition-state`, `isr-view` and `reconciled`
  (no `partition-state` in the file): ReplicationQuorumSuperset and MetadataLogMatching, and
  LogMatching then holds every replica's reported HWM;
- everything between two reports of a replica's log end (a state held for less than the
  report interval, 200 ms, may go unseen).

Every violation found is real (a lower bound never makes one up); the trace may miss some the
simulator, with exact state at every step, would see. The replay is single-process Python, a
few seconds for a 30 s run; checkers/trace_spark.py replays each partition in a Spark task of its
own, with the same result, when the history is checked on Spark.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import runformat
from checkers.invariants import (
    BY_NAME,
    FOLLOWER,
    INVARIANTS,
    LEADER,
    NONE,
    Acks,
    Facts,
    PartitionMeta,
    PartitionSnapshot,
    Rec,
    ReplicaState,
    differing,
    epoch_at,
    metadata_key,
)
from runformat.effects import CORRUPTS_DISK, KILLS_PROCESS, LOSES_UNSYNCED, effects_of
from runformat.run_config import RunConfig

# Undecided in a trace without view events (written by nodes older than isr-view,
# partition-state and reconciled).
UNDECIDABLE = {
    "ReplicationQuorumSuperset": "this events.jsonl has no isr-view events: a leader's maximal "
                                 "ISR and its pending AlterPartition are unknown",
    "MetadataLogMatching": "this events.jsonl has no partition-state events: the partition state "
                           "a broker acts on is unknown beyond its leader and leader epoch",
}
VIEW_EVENTS = "partition-state"  # present when the trace carries the replicas' views
WITH_LOG_END = ("log-open", "become-leader", "become-follower", "truncate", "log-progress")


@dataclass
class _Replica:
    known: bool = False  # the log's content is known (log-open seen since the last loss)
    leo: int = 0
    hwm: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)
    role: str = NONE
    leader_epoch: int = -1
    reconciled: bool = False  # its log agrees with a leader's (reconciled or become-leader)
    metadata: tuple | None = None  # the partition state it acts on (metadata_key form)
    isr_view: tuple[int, tuple[int, ...], tuple[int, ...] | None, bool] | None = None
    # (leader epoch, maximal ISR, committed ISR, AlterPartition pending) as leader


@dataclass
class _Partition:
    meta: PartitionMeta | None = None
    replicas: dict[int, _Replica] = field(default_factory=dict)
    true_hwm: int = 0
    committed: list[tuple[int, int]] = field(default_factory=list)  # epoch cache of the prefix
    acked: Acks = field(default_factory=lambda: Acks([], {}))
    acked1: dict[tuple[int, int], Rec] = field(default_factory=dict)
    reads: dict[tuple[int, int], Rec] = field(default_factory=dict)
    history: dict[int, tuple] = field(default_factory=dict)  # partition epoch -> metadata_key


@dataclass
class TraceReport:
    violations: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, int] = field(default_factory=dict)  # invariant -> states it was decided on
    undecided: dict[str, str] = field(default_factory=lambda: dict(UNDECIDABLE))
    events: int = 0
    notes: list[str] = field(default_factory=list)


class TraceChecker:
    def __init__(self, *, min_isr: int = 1, elr_enabled: bool = True, acks: str = "all",
                 views: bool = True, only: tuple[str, int] | None = None) -> None:
        """`views`: the trace has the replicas' view events (module docstring); without them
        the invariants that need them are undecided. `only`: evaluate that partition alone
        (checkers/trace_spark.py replays each partition in a task of its own)."""
        self.views = views
        self.only = only
        self.decided = INVARIANTS if views else tuple(i for i in INVARIANTS if i.name not in UNDECIDABLE)
        self.min_isr = min_isr
        self.elr_enabled = elr_enabled
        self.acks = acks
        self.parts: dict[tuple[str, int], _Partition] = {}
        self.alive: dict[int, bool] = {}
        self.registered: dict[int, bool] = {}  # this incarnation registered
        self.controller_epochs: dict[int, int] = {}
        self.fenced: set[int] = set()
        self.host_broker: dict[str, int] = {}
        self.acked_at: dict[Any, tuple[int, int]] = {}  # value -> (offset, epoch) at acks=all
        self.report = TraceReport(undecided={} if views else dict(UNDECIDABLE))
        self._seen: set[tuple] = set()
        self._batch: list[Mapping[str, Any]] = []  # a controller batch not yet complete

    # ---- events ------------------------------------------------------------------------------

    def event(self, e: Mapping[str, Any]) -> None:
        """One node event. A controller batch (`batch`, `batch_size`: what one controller call
        committed) is held until it is complete and then applied at once: the states inside
        it were never the controller's, though other nodes' events come between its lines."""
        self.report.events += 1
        if e.get("node") == "controller" and "batch" in e:
            if self._batch and self._batch[0]["batch"] != e["batch"]:
                self._apply_batch()  # the rest of that batch never came: its controller died
            self._batch.append(e)
            if len(self._batch) >= int(e["batch_size"]):
                self._apply_batch()
            return
        self._apply(e, evaluate=True)

    def _apply_batch(self) -> None:
        batch, self._batch = self._batch, []
        for e in batch:
            self._apply(e, evaluate=False)
        touched = {(e["topic"], e["partition"]) for e in batch if "topic" in e and "partition" in e}
        fencing = any(e.get("kind") in ("broker-fenced", "broker-unfenced") for e in batch)
        for key, part in self._judged():
            if fencing or key in touched:
                self._evaluate(part, batch[-1], None)

    def _apply(self, e: Mapping[str, Any], *, evaluate: bool) -> None:
        kind = e.get("kind")
        node = e.get("node")
        if isinstance(node, int) and isinstance(e.get("host"), str):
            self.host_broker[e["host"]] = node
        key = (e["topic"], e["partition"]) if "topic" in e and "partition" in e else None
        part = self._part(key) if key is not None else None
        subject: int | None = None
        if kind == "partition-change":
            assert part is not None
            # Older partition-change events do not repeat the replicas: the first one (create)
            # has them all in the ISR.
            replicas = tuple(e["replicas"]) if "replicas" in e else (
                part.meta.replicas if part.meta is not None else tuple(e["isr"]))
            part.meta = PartitionMeta(
                e["topic"], e["partition"], replicas, e["leader"], e["leader_epoch"],
                e["partition_epoch"], tuple(e["isr"]), tuple(e["elr"]), tuple(e["last_known_elr"]),
                frozenset(self.fenced), self.min_isr, self.elr_enabled)
            part.history[e["partition_epoch"]] = metadata_key(
                e["partition_epoch"], e["leader"], e["leader_epoch"], e["isr"], e["elr"],
                e["last_known_elr"], replicas)
        elif kind == "broker-registered":
            b = e["broker"]
            self.controller_epochs[b] = e["broker_epoch"]
            self.registered[b] = bool(self.alive.get(b, True))
        elif kind in ("broker-fenced", "broker-unfenced"):
            (self.fenced.add if kind == "broker-fenced" else self.fenced.discard)(e["broker"])
            for p in self.parts.values():
                if p.meta is not None:
                    p.meta = _with(p.meta, fenced=frozenset(self.fenced))
        elif kind == "broker-start" and isinstance(node, int):
            self.alive[node] = True
            self.registered[node] = False
            for p in self.parts.values():
                if node in p.replicas:
                    _forget(p.replicas[node], log=True)  # a new process: unknown until log-open
        elif kind == "broker-stop" and isinstance(node, int):
            self.alive[node] = False
            self.registered[node] = False
            self._died(node, lossy=False)
        elif key is not None and isinstance(node, int):
            subject = node
            r = part.replicas.setdefault(node, _Replica())
            if kind == "log-open":
                r.known, r.leo, r.hwm = True, e["log_end_offset"], e["hwm"]
                r.epochs = [tuple(x) for x in e["epochs"]]
                r.role, r.leader_epoch = NONE, -1
                r.reconciled = False
            elif kind in ("become-leader", "become-follower"):
                r.role = LEADER if kind == "become-leader" else FOLLOWER
                r.leader_epoch = e["leader_epoch"]
                r.reconciled = r.reconciled or kind == "become-leader"
                if "log_end_offset" in e:
                    r.leo, r.hwm = e["log_end_offset"], e["hwm"]
            elif kind == "reconciled":
                r.reconciled = True
            elif kind == "partition-state":
                r.metadata = metadata_key(e["partition_epoch"], e["leader"], e["leader_epoch"],
                                          e["isr"], e["elr"], e["last_known_elr"], e["replicas"])
            elif kind == "isr-view":
                committed = e["committed_isr"]
                r.isr_view = (e["leader_epoch"], tuple(e["isr"]),
                              None if committed is None else tuple(committed), bool(e["alter_pending"]))
            elif kind == "log-progress":
                r.role, r.leader_epoch = e["role"], e["leader_epoch"]
                r.leo, r.hwm = e["log_end_offset"], e["hwm"]
            elif kind == "epoch-start":
                start = e["start_offset"]
                r.epochs = [x for x in r.epochs if x[1] < start] + [(e["epoch"], start)]
                r.leo = max(r.leo, start + 1)
            elif kind == "truncate":
                r.leo = e["to_offset"]
                r.epochs = [x for x in r.epochs if x[1] < r.leo]
                r.hwm = min(r.hwm, r.leo)
            else:
                subject = None
            if r.role == LEADER and r.known and r.hwm > part.true_hwm:
                self._commit(part, r, r.hwm)
        exact = subject if kind in WITH_LOG_END else None
        if not evaluate or kind in ("broker-registered", "broker-fenced", "broker-unfenced"):
            # Registrations and fencing without batch numbers (older traces): the partition
            # states they change follow as events of the same controller step, each written
            # once the one before is fsynced; each is evaluated at its own event.
            return
        if part is not None:
            if self.only is None or key == self.only:
                self._evaluate(part, e, exact)
        else:
            self._evaluate_all(e)

    def nemesis(self, op: Mapping[str, Any]) -> None:
        did = effects_of(op)  # what the fault did, as its operation records it
        if KILLS_PROCESS not in did:
            return
        value = op.get("value") if isinstance(op.get("value"), dict) else {}
        lossy = bool(did & {LOSES_UNSYNCED, CORRUPTS_DISK})
        for host in value.get("nodes", []):
            b = self.host_broker.get(host)
            if b is None:
                continue
            self.alive[b] = False
            self.registered[b] = False
            self._died(b, lossy)

    def _died(self, b: int, lossy: bool) -> None:
        """Broker b's process ended: what it acted on goes with it (a lossy end: its log too,
        until the next log-open)."""
        for p in self.parts.values():
            if b in p.replicas:
                _forget(p.replicas[b], log=lossy)

    # ---- the history's facts -------------------------------------------------------------------

    def operation(self, op: Mapping[str, Any], topic: str) -> None:
        if op.get("process") == "nemesis":
            self.nemesis(op)
            return
        if op.get("type") != "ok" or "partition" not in op:
            return
        part = self._part((topic, op["partition"]))
        node, epoch = op.get("node"), op.get("epoch")
        if op.get("f") == "send" and op.get("offset") is not None and epoch is not None:
            o = op["offset"]
            rec = Rec(o, epoch, op.get("value"))
            self._leader_holds(part, node, epoch, o + 1, commit=self.acks == "all")
            if self.acks == "all":
                self.acked_at[op.get("value")] = (o, epoch)
                if o < part.true_hwm and _committed_epoch(part, o) == epoch:
                    c = part.acked.committed
                    c.append(o) if not c or o >= c[-1] else c.insert(bisect_right(c, o), o)
                else:
                    part.acked.other[(o, epoch)] = rec
            elif self.acks == "1":
                part.acked1[(o, epoch)] = rec
        elif op.get("f") in ("poll", "final-poll") and op.get("hwm") is not None:
            self._leader_holds(part, node, epoch, op["hwm"], commit=True)
            for o, v in op.get("records", ()):
                at = self.acked_at.get(v)
                if at is not None and at[0] == o and _committed_epoch(part, o) != at[1]:
                    part.reads[(o, at[1])] = Rec(o, at[1], v)

    def _leader_holds(self, part: _Partition, node: Any, epoch: Any, upto: int, *, commit: bool) -> None:
        """The node, leading in `epoch`, served records up to `upto` (an ok send or poll): if it
        still leads in that epoch, its log reaches there and, when `commit`, so does the true
        HWM."""
        r = part.replicas.get(node) if isinstance(node, int) else None
        if r is None or not r.known or r.role != LEADER or r.leader_epoch != epoch:
            return
        r.leo = max(r.leo, upto)
        if commit and upto > part.true_hwm:
            self._commit(part, r, upto)

    def _commit(self, part: _Partition, r: _Replica, hwm: int) -> None:
        """The true HWM rises to `hwm`; the committed prefix's epochs come from the leader's
        epoch cache."""
        h = part.true_hwm
        first = epoch_at(r.epochs, h)
        if first is None:
            return  # the leader's log is not known that far: no claim
        new = [(first, h)] + [x for x in r.epochs if h < x[1] < hwm]
        committed = part.committed
        if committed and committed[-1][0] == new[0][0]:
            new = new[1:]
        committed.extend(new)
        part.true_hwm = hwm
        for o, e in list(part.acked1):
            if o < hwm and _committed_epoch(part, o) == e:
                del part.acked1[(o, e)]

    # ---- evaluating ------------------------------------------------------------------------------

    def _part(self, key: tuple[str, int]) -> _Partition:
        p = self.parts.get(key)
        if p is None:
            p = self.parts[key] = _Partition()
        return p

    def _judged(self) -> list[tuple[tuple[str, int], _Partition]]:
        """The partitions this checker evaluates (all, or `only`), in the order first seen."""
        return [(k, p) for k, p in self.parts.items() if self.only is None or k == self.only]

    def _evaluate_all(self, e: Mapping[str, Any]) -> None:
        for _key, p in self._judged():
            self._evaluate(p, e, None)

    def _evaluate(self, part: _Partition, e: Mapping[str, Any], exact: int | None) -> None:
        m = part.meta
        if m is None:
            return
        snap = self.snapshot(part, exact)
        checks = self.report.checks
        for inv in self.decided:
            checks[inv.name] = checks.get(inv.name, 0) + 1
            for v in inv.check(snap):
                ident = (v.name, v.topic, v.partition, v.key)
                if ident in self._seen:
                    continue
                self._seen.add(ident)
                v = inv.exact(snap, v)
                self.report.violations.append({"time": e.get("time"), **v.to_dict(),
                                               "event": {k: x for k, x in e.items() if k != "ts"}})

    def snapshot(self, part: _Partition, exact: int | None = None) -> PartitionSnapshot:
        m = part.meta
        assert m is not None
        replicas: dict[int, ReplicaState] = {}
        for b in m.replicas:
            r = part.replicas.get(b)
            running = bool(self.alive.get(b, False) and self.registered.get(b, False)
                           and self.controller_epochs.get(b) is not None)
            if r is None or not r.known:
                replicas[b] = ReplicaState(b, running, leo=0, leo_known=False,
                                           metadata=r.metadata if r is not None else None)
                continue
            # Until its log is reconciled with a leader, a restarted replica's checkpointed HWM
            # may cover records an unclean shutdown brought back: no stable prefix yet.
            hwm = r.hwm if r.reconciled or not self.views else 0
            committed = maximal = None
            pending = False
            view = r.isr_view
            if view is not None and r.role == LEADER and view[0] == r.leader_epoch:
                _, maximal, committed, pending = view
            # where its log differs from the committed prefix, so that past a divergence the
            # acknowledged records are not all looked up again at every event
            compared = min(r.leo, part.true_hwm)
            differs = differing(r.epochs, part.committed, compared)
            replicas[b] = ReplicaState(b, running, r.role, r.leader_epoch, r.leo, hwm, None,
                                       tuple(r.epochs), committed, maximal, pending, r.metadata,
                                       leo_known=b == exact, compared=compared, differs=differs)
        acked1 = Acks([], dict(part.acked1))
        facts = Facts(part.true_hwm, None, part.committed, part.acked, acked1, part.reads,
                      part.history if self.views else None)
        return PartitionSnapshot(m, replicas, facts)

    def finish(self) -> TraceReport:
        if self._batch:
            self._apply_batch()
        for _key, p in self._judged():
            self._evaluate(p, {"kind": "end"}, None)
        return self.report


def _with(m: PartitionMeta, **changes: Any) -> PartitionMeta:
    return replace(m, **changes)


def _forget(r: _Replica, *, log: bool) -> None:
    """A replica's process is gone: its views go; with `log`, its log is unknown too."""
    r.metadata = r.isr_view = None
    r.reconciled = False
    r.role, r.leader_epoch = NONE, -1
    if log:
        r.known = False


def _committed_epoch(part: _Partition, offset: int) -> int | None:
    if offset >= part.true_hwm:
        return None
    return epoch_at(part.committed, offset)



# ---- files ---------------------------------------------------------------------------------------


def check_trace(events: Iterable[Mapping[str, Any]], history: Iterable[Mapping[str, Any]] = (), *,
                topic: str = "chaos", min_isr: int = 1, elr_enabled: bool = True,
                acks: str = "all") -> TraceReport:
    """Replay node events and history operations (each in time order) and check the
    invariants; see the module docstring."""
    events = list(events)
    views = any(e.get("kind") == VIEW_EVENTS for e in events)
    checker = TraceChecker(min_isr=min_isr, elr_enabled=elr_enabled, acks=acks, views=views)
    # Events before operations at the same instant: an operation completes after what served it.
    merged = heapq.merge(((e.get("time", 0), 0, i, e) for i, e in enumerate(events)),
                         ((o.get("time", 0), 1, i, o) for i, o in enumerate(history)))
    for _t, source, _i, item in merged:
        if source == 0:
            checker.event(item)
        else:
            checker.operation(item, topic)
    return checker.finish()


def check_run(run_dir: Path, config: RunConfig) -> TraceReport | None:
    """The trace check of a run folder (events.jsonl with history.jsonl), None without events."""
    events = run_dir / "events.jsonl"
    if not events.is_file():
        return None
    history = run_dir / "history.jsonl"
    tallies = [runformat.Tally("events.jsonl"), runformat.Tally("history.jsonl")]
    report = check_trace(runformat.events(events, tallies[0]),
                         runformat.history(history, tallies[1]) if history.is_file() else (),
                         **trace_settings(config))
    for tally in tallies:  # a torn line here: the history checker reports corrupt histories
        report.notes += tally.notes()
    return noted(report)


def trace_settings(config: RunConfig) -> dict[str, Any]:
    """check_trace's keyword arguments from a run's config."""
    return {"topic": config.topic or "chaos", "min_isr": config.min_insync_replicas,
            "elr_enabled": config.elr_enabled, "acks": config.acks or "all"}


def noted(report: TraceReport) -> TraceReport:
    if report.events and not any(report.checks.values()):
        report.notes.append("events.jsonl has no partition-change: no invariant could be checked")
    return report


def read_invariants(path: Path) -> list[dict[str, Any]]:
    """The violations a simulated run wrote (simulation/invariants.py)."""
    return list(runformat.records(path))


def findings(run_dir: Path, config: RunConfig, examples: int = 8, spark: Any = None
             ) -> tuple[dict[str, tuple[int, list[dict]]], list[str], dict[str, Any]]:
    """Invariant anomalies of a run folder for results.json: {"invariant:<Name>": (count,
    examples)}, notes, stats. A simulated run's invariants.jsonl (checked at every step) wins;
    else the trace check of events.jsonl (on `spark`, one task per partition, when given:
    checkers/trace_spark.py); else nothing."""
    simulated = run_dir / "invariants.jsonl"
    found: dict[str, tuple[int, list[dict]]] = {}
    if config.system_kind == "kafka":
        # Apache Kafka's states are polled from outside (docs/kafka.md): no trace of its steps
        return {}, ["protocol invariants not checked: they are checked on the embedded "
                    "system's own node events, and Apache Kafka's states are only observed"], {}
    if simulated.is_file():
        violations = read_invariants(simulated)
        notes = [f"protocol invariants checked after every simulated step: {len(violations)} "
                 f"violation(s) in invariants.jsonl"]
        stats = {"source": "simulation", "violations": len(violations)}
    else:
        if spark is not None:
            from checkers.trace_spark import check_run_spark  # pyspark's import is slow

            report = check_run_spark(spark, run_dir, config)
        else:
            report = check_run(run_dir, config)
        if report is None:
            return {}, [], {}
        violations = report.violations
        undecided = ("; not decidable from this trace: "
                     + "; ".join(f"{k} ({v})" for k, v in sorted(report.undecided.items()))
                     if report.undecided else "; every invariant decidable from it")
        where = " on Spark, a task per partition" if spark is not None else ""
        notes = report.notes + [
            f"protocol invariants checked on the trace (events.jsonl with the history){where} at "
            f"{max(report.checks.values(), default=0)} state(s){undecided}"]
        stats = {"source": "trace-spark" if spark is not None else "trace",
                 "violations": len(violations), "events": report.events,
                 "checks": report.checks, "undecided": sorted(report.undecided)}
    for v in violations:
        name = str(v.get("name", "invariant:?"))
        count, ex = found.get(name, (0, []))
        if len(ex) < examples:
            ex = ex + [_example(v)]
        found[name] = (count + 1, ex)
    return found, notes, stats


def _example(v: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v[k] for k in ("time", "topic", "partition", "detail") if k in v}
    if v.get("recent_steps"):
        out["recent_steps"] = list(v["recent_steps"])[-10:]
    if v.get("event"):
        out["event"] = v["event"]
    return out


assert set(UNDECIDABLE) <= set(BY_NAME)
