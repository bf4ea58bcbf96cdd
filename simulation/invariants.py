"""The protocol invariants (checkers/invariants.py) checked after every step of a simulation.

    monitor = InvariantMonitor(world, keep_going=False)   # world.monitor = monitor
    ... run ...
    monitor.violations        # [{"time", "name", "topic", "partition", "detail",
                              #   "recent_steps", "recent_events"}]

A *step* is one thing a node process does with its state machine -- a request handled, an
answer or a send failure heard, a tick, a finished storage job, its start and its exit --
or one fault verb of the world (kill, power loss, page-cache loss, start, ...). simulation/
node.py and world.py call `stepped` / `fault` after each; nothing else changes the state the
invariants read. The state is exact: the controller's live `Controller` (its partition
states, brokers, fencing), each broker's live `Broker` and `Replica` objects, and each
node's disk logs (`LogView`s, read off the simulated files through the real storage code,
simulation/disk.py).

The invariants are those of checkers/invariants.py, stated there once; this module only
keeps the specification's auxiliary variables and decides *which* to evaluate after a step,
from what the step changed (`Invariant.reads`):

- the true HWM and the committed prefix grow when a replica acting as leader exposes a
  higher HWM (the committed prefix takes that leader's records, the very objects);
- acknowledgements are seen as the broker answers a produce request (the leader's records
  at the acknowledged offsets, at acks=all or acks=1);
- each replica's log is compared with the committed prefix incrementally, each offset once:
  how far it was compared and the ranges where it differed (its prefix agreement is where
  it first differed). An append never changes that; a truncation, loss or recovery takes it
  back to where the log changed (the view's `changed_from`); the comparison goes on only
  when someone needs it. Past a divergence (an unclean election's) the acknowledged records
  a replica holds are not looked up again;
- a step that only appended records, advanced a follower's HWM within its agreed prefix, or
  changed nothing evaluates nothing. Everything else evaluates the invariants that read what
  it changed, on a snapshot built from the live objects (no copy of a log).

One invariant is about truncation: TruncationAtDivergence (below), which the monitor checks
at each step of a broker that truncated a log (the disk's `LogView` keeps the first record
each truncation removed), against the log of the leader that replica follows.

One invariant is about the disk: SyncedRecordsSurvive (checkers/invariants.py,
`synced_record_lost`), which each disk's `LogView` evaluates at every recovery of a log (an
open, or the next recovery computed at a loss) and which is reported here when the view's
change is seen.

The first violation stops the run (it raises `InvariantViolation` out of the event loop at
the next iteration; run_simulation catches it and writes what it has), unless `keep_going`:
then each violation is recorded once (by its key) and the run goes on. Each comes with the
last `recent` steps and node events that led to it.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkers.invariants import (
    BY_NAME,
    NONE,
    PREFIX,
    SYNCED_RECORDS_SURVIVE,
    Acks,
    Facts,
    Invariant,
    PartitionMeta,
    PartitionSnapshot,
    ReplicaState,
    Violation,
    affected,
    metadata_key,
    same_record,
)
from replication.messages import ProduceReply, ProduceRequest
from replication.partition import Role
from workloads.history import json_line

if TYPE_CHECKING:
    from simulation.disk import NodeDisk
    from simulation.world import World

RECENT = 40
# Extension (no spec property; checked only in simulation, which sees each truncation): a
# follower's truncation removes no record its leader holds at that offset (KIP-101, KIP-279:
# the log is cut where it diverges from the leader's, never below).
TRUNCATION_AT_DIVERGENCE = "TruncationAtDivergence"
# Extension (simulation only): a log closed clean (a controlled shutdown, before the broker's
# clean-shutdown marker) is durable to its end: the marker tells the next start, and the
# controller, that nothing was lost, so a power loss while the broker is down must lose nothing.
CLEAN_CLOSE_DURABLE = "CleanCloseDurable"
# Extension (simulation only, which knows how each process ended): a broker starts claiming a
# clean shutdown (its clean-shutdown marker found: recovery skipped, a clean registration the
# controller trusts, KIP-966) only when its previous process ended in a controlled shutdown
# that wrote that marker, never after a kill, a power loss or a halt.
CLEAN_START_AFTER_CLEAN_STOP = "CleanStartAfterCleanStop"
_COMMIT_ACKS = frozenset({"commit", "acks"})
_ACKS1 = (BY_NAME["AcknowledgedCompleteness"],)


class InvariantViolation(Exception):
    """A protocol invariant failed in the simulation (the first one, without keep_going)."""

    def __init__(self, violation: dict[str, Any]) -> None:
        super().__init__(f"{violation['name']} on {violation['topic']}-{violation['partition']} at "
                         f"{violation['time'] / 1e9:.6f} s: {violation['detail']}")
        self.violation = violation


class _Part:
    """The auxiliary variables of one partition and what the monitor caches about it."""

    __slots__ = ("key", "topic", "partition", "true_hwm", "committed", "acked", "acked1",
                 "pending1", "compared", "differs", "pairs", "fp", "state", "meta", "history",
                 "tags", "rules", "mkeys", "view", "stale")

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key
        self.topic, self.partition = key
        self.true_hwm = 0
        self.committed: list[Any] = []
        self.acked = Acks([], {})
        self.acked1 = Acks([], {})
        self.pending1: list[tuple[int, int]] = []  # heap of acks=1 (offset, epoch) not committed
        # broker -> how far its log was compared with the committed prefix, and the ranges
        # [start, end) below that where they differ (ReplicaState.compared and differs)
        self.compared: dict[int, int] = {}
        self.differs: dict[int, list[tuple[int, int]]] = {}
        # (broker, broker) -> a length their logs share from offset 0 (PartitionSnapshot.pairs)
        self.pairs: dict[tuple[int, int], int] = {}
        self.fp: dict[int, tuple] = {}
        self.state: Any = None  # the controller's PartitionState last seen
        self.meta: PartitionMeta | None = None
        self.history: dict[int, tuple] = {}
        self.tags: set[str] = set()
        self.rules: Any = None
        self.mkeys: dict[int, tuple] = {}  # broker -> (PartitionState, its metadata_key)
        self.view: PartitionSnapshot | None = None  # the snapshot, kept up to date in place
        self.stale: set[int] | None = None  # brokers whose ReplicaState to rebuild (None: all)


def _log_changed(part: _Part, b: int, offset: int) -> None:
    """Broker b's log changed from `offset` on other than by an append (a truncation, a loss,
    a recovery): what it was known to share with the committed prefix and with the other
    replicas' logs ends there at most, and it is compared with the committed prefix again
    from there."""
    if offset < part.compared.get(b, 0):
        part.compared[b] = offset
        differs = part.differs[b]
        del differs[bisect_left(differs, (offset,)):]  # the ranges from `offset` on
        if differs and differs[-1][1] > offset:
            differs[-1] = (differs[-1][0], offset)
    for pair, shared in part.pairs.items():
        if b in pair and offset < shared:
            part.pairs[pair] = offset


def _agreed(part: _Part, b: int) -> int:
    """Broker b's log's prefix agreement with the committed prefix, as far as compared."""
    differs = part.differs.get(b)
    return differs[0][0] if differs else part.compared.get(b, 0)


class _AckToken:
    """A produce request's reply token: it answers as the plain one does, then tells the
    monitor which records a ProduceReply acknowledged."""

    __slots__ = ("inner", "monitor", "proc", "key", "count", "acks")

    def __init__(self, inner: Any, monitor: InvariantMonitor, proc: Any, msg: Any) -> None:
        self.inner = inner
        self.monitor = monitor
        self.proc = proc
        self.key = (msg.topic, msg.partition)
        self.count = len(msg.values)
        self.acks = msg.acks

    def __call__(self, msg: Any) -> None:
        self.inner(msg)
        if msg.__class__ is ProduceReply and msg.offset is not None:
            self.monitor.acknowledged(self, msg.offset)


class InvariantMonitor:
    def __init__(self, world: World, *, keep_going: bool = False, recent: int = RECENT) -> None:
        self.world = world
        self.keep_going = keep_going
        self.violations: list[dict[str, Any]] = []
        # [time, node, what, detail, its description once a violation asked for it]
        self.recent: deque[list[Any]] = deque(maxlen=recent)
        self.stopped = False
        self.parts: dict[tuple[str, int], _Part] = {}
        self.steps = 0
        self.evaluations = 0
        self.skipped = 0  # steps whose changes `_covered` showed harmless
        self._seen: set[tuple] = set()
        self._acks: list[tuple[_Part, list[Any], str]] = []
        self._controller: Any = None
        self._brokers: tuple = ()
        self._fenced: frozenset[int] = frozenset()
        self._metadata_seen = 0
        self._affected: dict[frozenset[str], tuple[Invariant, ...]] = {}
        # node -> whether its latest broker process stopped clean (wrote the marker)
        self._stopped_clean: dict[str, bool] = {}
        # Bound once: `stepped` runs after every step of every node (about 23,000 in a
        # 30 s no-fault run), and these never change during a world's life.
        self._loop = world.loop
        self._controller_name = world.controller
        self._note_step = self.recent.append
        self._all_parts = self.parts.values()  # a live view: it sees partitions added later

    # ---- hooks (simulation/node.py, world.py) -------------------------------------------------

    def token(self, proc: Any, token: Any, msg: Any) -> Any:
        """The reply token for a request a node handles: produce requests are watched."""
        if msg.__class__ is ProduceRequest and msg.acks != "0":
            return _AckToken(token, self, proc, msg)
        return token

    def stepped(self, proc: Any, what: str, detail: Any = None) -> None:
        """After a node process did something with its state machine."""
        self.steps += 1
        name = proc.name
        self._note_step([self._loop.now, name, what, detail, None])
        if self.stopped:
            return
        machine = proc.machine
        if machine is None:
            return
        if name == self._controller_name:
            self._controller_changed(machine)
        else:
            self._broker_changed(proc, machine)
        if self._acks:
            self._take_acks()
        # Most steps tag nothing (a poll answered, a tick that changed no replica): only a
        # step that tagged a partition has anything for `_evaluate` to look at.
        for part in self._all_parts:
            if part.tags:
                self._evaluate()
                return

    def recorded(self, proc: Any, kind: str, fields: Mapping[str, Any]) -> None:
        """A node's event: a broker's controlled stop, and what its next start claims."""
        if kind == "broker-stop" and fields.get("clean"):
            self._stopped_clean[proc.name] = True
        elif kind == "broker-start":
            if fields.get("clean_shutdown") and not self.stopped \
                    and not self._stopped_clean.get(proc.name, False):
                self._clean_claimed(proc)
            self._stopped_clean[proc.name] = False  # this process has not stopped yet

    def fault(self, verb: str, node: str | None = None, detail: Any = None) -> None:
        """After a world verb (kill, power loss, ...): records its place in the recent steps;
        a loss of unsynced writes changes logs."""
        self.recent.append([self.world.loop.now, node or "-", f"fault {verb}", detail, None])
        if self.stopped:
            return
        for b, disk in self._broker_disks():
            for key, view in disk.views.items():
                cf = view.changed_from
                if cf is not None:
                    view.changed_from = None
                    part = self._part(key)
                    _log_changed(part, b, cf)
                    part.tags.add("log")
                    part.tags.add("replica")
                    if view.lost_synced:
                        self._synced_lost(part, b, view)
                        if self.stopped:
                            return
        for part in self.parts.values():
            part.stale = None  # processes started, stopped, paused: look at every replica again
        self._evaluate()

    def _broker_disks(self) -> Iterator[tuple[int, NodeDisk]]:
        """(broker id, disk) of every broker node (the controller's disk holds no partition)."""
        for node, disk in self.world.disks.items():
            b = self.world.broker_id(node)
            if b is not None:
                yield b, disk

    # ---- what a step changed ------------------------------------------------------------------

    def _part(self, key: tuple[str, int]) -> _Part:
        part = self.parts.get(key)
        if part is None:
            part = self.parts[key] = _Part(key)
        return part

    def _controller_changed(self, ctrl: Any) -> None:
        self._controller = ctrl
        brokers = tuple([(b, i.fenced, i.broker_epoch) for b, i in ctrl.brokers.items()])
        brokers_changed = brokers != self._brokers
        if brokers_changed:
            self._brokers = brokers
            self._fenced = frozenset(b for b, fenced, _ in brokers if fenced)
        records, self._metadata_seen = self.world.disks[self.world.controller].metadata_since(
            self._metadata_seen)
        for rec in records:
            if rec.get("type") == "partition":
                s = rec["state"]
                part = self._part((s["topic"], s["partition"]))
                part.history[s["partition_epoch"]] = metadata_key(
                    s["partition_epoch"], s["leader"], s["leader_epoch"], s["isr"], s["elr"],
                    s["last_known_elr"], s["replicas"])
        parts = self.parts
        for key, state in ctrl.partitions.items():
            part = parts.get(key) or self._part(key)
            if state is not part.state:
                # Committed in the machine; its record may still wait for the fsync of an
                # earlier one (the controller blocks on each Persist), so it is taken from
                # here too. Brokers only ever see the machine's state.
                part.history.setdefault(state.partition_epoch, metadata_key(
                    state.partition_epoch, state.leader, state.leader_epoch, state.isr, state.elr,
                    state.last_known_elr, state.replicas))
            if state is not part.state or brokers_changed:
                if part.rules is None:
                    part.rules = ctrl.rules(key[0])
                part.state = state
                part.meta = PartitionMeta(
                    state.topic, state.partition, state.replicas, state.leader, state.leader_epoch,
                    state.partition_epoch, state.isr, state.elr, state.last_known_elr, self._fenced,
                    part.rules.min_isr, part.rules.elr_enabled)
                part.tags.add("meta")
                part.stale = None
                if brokers_changed:
                    part.tags.add("replica")  # who is running depends on the registrations

    def _broker_changed(self, proc: Any, machine: Any) -> None:
        b = proc.broker_id
        epoch = machine.broker_epoch
        parts = self.parts
        for key, r in machine.replicas.items():
            part = parts.get(key) or self._part(key)
            stale = part.stale
            if stale is not None:
                stale.add(b)
            log = r.log.view
            cf = log.changed_from
            if cf is not None:
                log.changed_from = None
                _log_changed(part, b, cf)
                part.tags.add("log")
                if log.lost_synced:
                    self._synced_lost(part, b, log)
            if log.cuts:
                self._cuts_checked(part, b, r, log)
            if log.unsynced_clean:
                self._unsynced_clean(part, b, log)
            hwm = r.hwm
            # A leader's HWM commits while it runs: at its exit step (a halt after a page-cache
            # loss) its log view has already lost what the disk never held, below that HWM.
            if hwm > part.true_hwm and r.role is LEADER_ROLE and proc.alive:
                self._commit(part, log, hwm)
            # `r.alter_request is not None` is `Replica.alter_in_flight` without the property's
            # call: this runs at every step of every broker.
            fp = (r.role, r.leader_epoch, r.state, r.isr, r.alter_request is not None,
                  r.reconciled, epoch, r)
            fps = part.fp
            if fp != fps.get(b):
                fps[b] = fp
                part.tags.add("replica")
            if hwm > _agreed(part, b) and hwm > self._extend(part, b, log):
                part.tags.add("hwm")

    def _commit(self, part: _Part, log: Any, hwm: int) -> None:
        """A leader exposed a HWM above the true HWM: the committed prefix takes its records."""
        part.committed.extend(log.records[part.true_hwm:hwm])
        part.true_hwm = hwm
        part.tags.add("commit")
        heap, other, committed = part.pending1, part.acked1.other, part.committed
        while heap and heap[0][0] < hwm:
            o, e = heapq.heappop(heap)
            rec = other.get((o, e))
            if rec is not None and same_record(committed[o], rec):
                del other[(o, e)]  # committed as acknowledged: the committed prefix covers it

    def _extend(self, part: _Part, b: int, log: Any) -> int:
        """The broker's log's prefix agreement with the committed prefix, its comparison with
        it brought up to date first (the end of the shorter of the two)."""
        a = part.compared.get(b, 0)
        differs = part.differs.get(b)
        if differs is None:
            differs = part.differs[b] = []
            part.compared[b] = a
        limit = min(log.end_offset, part.true_hwm)
        if a < limit:
            recs, committed = log.records, part.committed
            for o in range(a, limit):
                x, y = recs[o], committed[o]
                if x is not y and (x.epoch != y.epoch or x.value != y.value):
                    if differs and differs[-1][1] == o:
                        differs[-1] = (differs[-1][0], o + 1)
                    else:
                        differs.append((o, o + 1))
            part.compared[b] = limit
        return _agreed(part, b)

    def acknowledged(self, token: _AckToken, first: int) -> None:
        machine = token.proc.machine
        replica = machine.replicas.get(token.key) if machine is not None else None
        if replica is None:
            return
        recs = replica.log.view.records[first:first + token.count]
        self._acks.append((self._part(token.key), recs, token.acks))

    def _take_acks(self) -> None:
        for part, recs, acks in self._acks:
            committed = part.committed
            n = len(committed)
            if acks == "all":
                offsets, other = part.acked.committed, part.acked.other
                for rec in recs:
                    o = rec.offset
                    if o < n and same_record(committed[o], rec):
                        if not offsets or o >= offsets[-1]:
                            offsets.append(o)
                        else:
                            offsets.insert(bisect_right(offsets, o), o)
                    else:
                        other[(o, rec.epoch)] = rec
            else:
                other = part.acked1.other
                for rec in recs:
                    o = rec.offset
                    if o < n and same_record(committed[o], rec):
                        continue
                    other[(o, rec.epoch)] = rec
                    if o >= n:
                        heapq.heappush(part.pending1, (o, rec.epoch))
            part.tags.add("acks")
        self._acks.clear()

    # ---- evaluating ---------------------------------------------------------------------------

    def _evaluate(self) -> None:
        if self.stopped:
            return
        for part in self.parts.values():
            if not part.tags:
                continue
            tags = frozenset(part.tags)
            part.tags.clear()
            if part.meta is None:
                continue
            if tags <= _COMMIT_ACKS and self._covered(part):
                if not part.acked1.other:
                    self.skipped += 1
                    continue
                invariants: tuple[Invariant, ...] = _ACKS1  # only acks=1 ones are left to look at
            else:
                invariants = self._affected.get(tags)
                if invariants is None:
                    invariants = self._affected[tags] = affected(tags)
            snapshot = self.snapshot(part)
            self.evaluations += 1
            for inv in invariants:
                for v in inv.check(snapshot):
                    self._violated(inv, snapshot, v)
                    if self.stopped:
                        return

    def _covered(self, part: _Part) -> bool:
        """After a step that only committed records or had records acknowledged: every
        replica's log shares the whole committed prefix and every acks=all acknowledgement is
        the committed record at its offset. That is sufficient for LeaderCompleteness,
        LeaderCandidateCompleteness, ConsistentRead and NoCommittedRecordLostGlobally to hold
        (each asks some replicas for at most that), so they need no evaluation; when it does
        not hold they are evaluated. This is the usual step of a healthy partition."""
        if part.acked.other:
            return False
        thwm = part.true_hwm
        disks, names = self.world.disks, self.world.brokers
        for b in part.meta.replicas:
            log = disks[names[b]].views.get(part.key)
            if log is None or self._extend(part, b, log) < thwm:
                return False
        return True

    def snapshot(self, part: _Part) -> PartitionSnapshot:
        """The partition's state as checkers.invariants reads it, from the live objects (no
        copy of a log). Kept in place: only the replicas of brokers that stepped since the
        last snapshot (all of them after a controller step or a fault) are rebuilt; every
        replica's comparison with the committed prefix is brought up to date."""
        view = part.view
        if view is None:
            view = part.view = PartitionSnapshot(part.meta, {}, Facts(
                0, part.committed, None, part.acked, part.acked1, {}, part.history), part.pairs)
            part.stale = None
        view.meta = part.meta
        view.facts.true_hwm = part.true_hwm
        replicas = view.replicas
        stale = part.stale
        if stale is None or set(replicas) != set(part.meta.replicas):
            replicas.clear()
            for b in part.meta.replicas:
                replicas[b] = self._replica_state(part, b)
        else:
            for b in stale:
                if b in replicas:
                    replicas[b] = self._replica_state(part, b)
        part.stale = set()
        disks, names = self.world.disks, self.world.brokers
        for b, rs in replicas.items():
            if rs.records is not None:  # its agreement follows (checkers.invariants.agreement)
                self._extend(part, b, disks[names[b]].views[part.key])
                rs.compared, rs.differs = part.compared[b], part.differs[b]
        return view

    def _replica_state(self, part: _Part, b: int) -> ReplicaState:
        world = self.world
        key = part.key
        node = world.brokers[b]
        log = world.disks[node].views.get(key)
        proc = world.process(node)
        machine = proc.machine if proc is not None and proc.alive else None
        running = False
        if machine is not None and machine.broker_epoch is not None and self._controller is not None:
            info = self._controller.brokers.get(b)
            running = info is not None and info.broker_epoch == machine.broker_epoch
        if log is None:
            return ReplicaState(b, running)
        r = machine.replicas.get(key) if machine is not None else None
        leo = log.end_offset
        if r is None:
            # No live replica (its process is down, or has not heard of the partition yet):
            # what its disk holds after a power loss may be an unsynced truncation undone, so
            # it has no stable prefix (HWM 0) until a live incarnation reconciles it.
            return ReplicaState(b, running, NONE, -1, leo, 0, log.records)
        s = r.state
        if s is None:
            isr = mkey = None
        else:
            isr = s.isr
            cached = part.mkeys.get(b)
            if cached is not None and cached[0] is s:
                mkey = cached[1]
            else:
                mkey = metadata_key(s.partition_epoch, s.leader, s.leader_epoch, s.isr, s.elr,
                                    s.last_known_elr, s.replicas)
                part.mkeys[b] = (s, mkey)
        # Until its log is reconciled with a leader, a restarted replica's checkpointed HWM may
        # cover records an unclean shutdown brought back: no stable prefix to compare yet.
        hwm = r.hwm if r.reconciled else 0
        return ReplicaState(b, running, r.role, r.leader_epoch, leo, hwm, log.records, None, isr,
                            r.isr, r.alter_in_flight, mkey)

    def check_all(self) -> None:
        """Evaluate every invariant on every partition now (tests; the end of a run)."""
        for part in self.parts.values():
            part.tags.update(("meta", "replica", "log", "hwm", "commit", "acks"))
        self._evaluate()

    def end_of_run(self) -> None:
        """SyncedRecordsSurvive once more when the run is over: every broker's disk recovered
        (on a copy) as a kill would leave it now. A fault checks it only on the node it hits,
        so a log the storage code damaged on a node no later fault hit (a follower's
        truncation that unlinked segments below its point) would go unseen."""
        if self.stopped:
            return
        for b, disk in self._broker_disks():
            disk.check_recovery("kill at the end of the run")
            for key, view in disk.views.items():
                if view.lost_synced:
                    self._synced_lost(self._part(key), b, view)
                    if self.stopped:
                        return

    def _synced_lost(self, part: _Part, b: int, view: Any) -> None:
        """SyncedRecordsSurvive (checkers/invariants.py): a recovery of broker b's log lost
        records whose fsync had completed (the disk's LogView noted each time)."""
        for lost in view.lost_synced:
            had, found = lost["had"], lost["found"]
            now = "nothing" if found is None else f"epoch {found.epoch} value {found.value!r}"
            self._record(Violation(
                PREFIX + SYNCED_RECORDS_SURVIVE, part.topic, part.partition,
                f"broker {b}: after a {lost['after']}, offset {lost['offset']} holds {now}, but "
                f"its record (epoch {had.epoch} value {had.value!r}) had been fsynced, with the "
                f"first {lost['synced']} record(s) of the log", (b, lost["offset"], had.epoch)))
            if self.stopped:
                break
        view.lost_synced.clear()

    def _unsynced_clean(self, part: _Part, b: int, view: Any) -> None:
        """CleanCloseDurable: broker b closed this log clean with records no fsync covered."""
        closes, view.unsynced_clean = view.unsynced_clean, []
        for synced, end in closes:
            self._record(Violation(
                PREFIX + CLEAN_CLOSE_DURABLE, part.topic, part.partition,
                f"broker {b} closed its log clean at end offset {end} with only the first "
                f"{synced} record(s) fsynced", (b, end)))
            if self.stopped:
                return

    def _clean_claimed(self, proc: Any) -> None:
        """CleanStartAfterCleanStop: the broker on `proc` found a clean-shutdown marker its
        previous process never wrote; reported on each partition its disk holds (with none,
        nothing rides on the claim)."""
        b = self.world.broker_id(proc.name)
        for key in sorted(self.world.disks[proc.name].views):
            part = self._part(key)
            self._record(Violation(
                PREFIX + CLEAN_START_AFTER_CLEAN_STOP, part.topic, part.partition,
                f"broker {b} started claiming a clean shutdown, but its previous process "
                "ended without one (killed, powered off or halted): its logs' recovery is "
                "skipped and the controller trusts it", (b, self.world.loop.now)))
            if self.stopped:
                return

    def _cuts_checked(self, part: _Part, b: int, r: Any, view: Any) -> None:
        """TruncationAtDivergence: each truncation broker b's replica `r` made since the last
        look removed, at its offset, a record other than the one its leader's log holds there
        (the leader's disk view: what its process holds, or, stopped, what it will recover)."""
        cuts, view.cuts = view.cuts, []
        leader = r.state.leader if r.state is not None else None
        if leader is None or leader == b or leader not in self.world.brokers:
            return
        theirs = self.world.disks[self.world.brokers[leader]].views.get(part.key)
        for offset, removed in cuts:
            if theirs is None or offset >= len(theirs.records):
                continue
            if same_record(theirs.records[offset], removed):
                self._record(Violation(
                    PREFIX + TRUNCATION_AT_DIVERGENCE, part.topic, part.partition,
                    f"broker {b} truncated its log to {offset}, removing the record (epoch "
                    f"{removed.epoch} value {removed.value!r}) its leader {leader} holds at "
                    f"that offset", (b, offset, removed.epoch)))
                if self.stopped:
                    return

    def _violated(self, inv: Invariant, snapshot: PartitionSnapshot, v: Any) -> None:
        ident = (v.name, v.topic, v.partition, v.key)
        if ident in self._seen:
            return
        self._record(inv.exact(snapshot, v))

    def _record(self, v: Violation) -> None:
        """Keep a violation found now, with the steps and events that led to it; stop the run
        at the first one unless keep_going."""
        self._seen.add((v.name, v.topic, v.partition, v.key))
        loop = self.world.loop
        record = {"time": loop.time_ns(), **v.to_dict(),
                  "recent_steps": self._recent_steps(),
                  "recent_events": [_describe_event(e) for e in self.world.events()[-len(self.recent):]]}
        self.violations.append(record)
        if not self.keep_going:
            self.stopped = True
            loop.at(loop.now, _raise, InvariantViolation(record))

    def _recent_steps(self) -> list[dict[str, Any]]:
        """The recent steps as a violation records them, each step described once however many
        violations record it: the next violation's steps are mostly the last one's, and a
        detail's repr (40 a violation) is code that runs too rarely for PyPy to compile (3 % of
        an unclean-election run there). A detail is a frozen message or plain text, so its repr
        is the same then as later."""
        out = []
        for step in self.recent:
            if step[4] is None:
                step[4] = _describe_step(step)
            out.append(dict(step[4]))
        return out

    def write(self, path: str | Path) -> None:
        """invariants.jsonl: one violation a line (an empty file: checked, none found)."""
        with open(path, "w") as f:
            for v in self.violations:
                f.write(json_line(v) + "\n")


LEADER_ROLE: Any = Role.LEADER  # the enum member, so the hot path compares by identity



def _raise(e: BaseException) -> None:
    raise e


def _describe_step(step: list[Any]) -> dict[str, Any]:
    t, node, what, detail = step[:4]
    out: dict[str, Any] = {"time": round(t * 1e9), "node": node, "step": what}
    if detail is not None:
        text = repr(detail)
        out["detail"] = text if len(text) <= 240 else text[:237] + "..."
    return out


def _describe_event(e: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in e.items() if k not in ("ts",)}
