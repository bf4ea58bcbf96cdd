"""Protocol invariants: KIP-966's safety properties, stated once, as predicates over a snapshot.

The properties are those of Jack Vanlightly's TLA+ specification of Kafka replication with
KIP-966 (kafka-tlaplus, kafka_data_replication/kraft/kip-966/kip_966_properties.tla). Each
predicate here takes a `PartitionSnapshot` -- plain data: the controller's metadata of one
partition, every replica's state, and the history-derived facts the specification tracks
in its auxiliary variables -- and returns the `Violation`s it finds (none: the property
holds). Nothing here does I/O or imports the simulator or the harness: the simulator builds
snapshots from its exact global state after every step (simulation/invariants.py), the trace
checker rebuilds them from a real run's events.jsonl and history.jsonl (checkers/trace.py),
and tests build them by hand (tests/checkers/test_invariants.py).

Words, once (docs/invariants.md has the same with what each caught):

- *Running* (the spec's RUNNING): the broker's process is alive and registered -- its
  incarnation's broker epoch is the one the controller holds for it. A broker that is
  starting, stopped or dead is not running: the spec's completeness properties exempt it,
  since a broker that lost data in an unclean shutdown is kept out of the ISR and the ELR
  by Unclean Exclusion once it registers again.
- *True HWM* (the spec's `inv_true_hwm`): the highest high watermark any replica acting as
  leader ever exposed (a stale leader's included: the spec takes it from every leader's
  HWM advance). It never goes down.
- *Committed prefix* (the spec's `inv_consumed`): the record at each offset below the true
  HWM, as the first leader to expose that offset below its HWM held it: what consumers may
  have read.
- *Positively acknowledged* (the spec's `inv_pos_acked`): records a leader acknowledged to
  a producer at acks=all. Offsets are known here, so a record is *held* by a replica when
  its log has, at the acknowledged offset, a record of the same leader epoch (and the same
  value, where values are known). (The spec only asks for the value somewhere in the log;
  Kafka also promises the offset it returned.) Within one leader epoch only one leader
  appends, and a restarted broker never continues an epoch, so (offset, epoch) names one
  record: a trace that knows epochs but not values can still decide "held".
- acks=1 acknowledges a record before it is committed. The spec has no acks=1, so such
  acknowledgements are *not* in LeaderCompleteness's set; `AcknowledgedCompleteness` (an
  extension) holds the leader to them instead, so the acks=1 weakness is named as itself
  and never passes for a protocol bug.

Configurations. The properties assume KIP-966 with clean elections. A configuration that
gives that up -- unclean.leader.election.enable, unclean recovery (which the controller
reports as `potential_data_loss`), eligible.leader.replicas.enable=false, the pre-KIP-101
truncation to the high watermark, unclean.shutdown.detection=false, isr.update=local-first
-- is checked against the same properties: a violation after an unclean election is still
a violation, because that is the weakness the harness exists to reveal. Only the structural
ELR rules (ELR empty at MinISR, MinIsrRecoveryQuorum) apply when the partition has ELR on
(`PartitionMeta.elr_enabled`); without ELR the ELR and LastKnownELR stay empty and those rules
say nothing, and ValidControllerState takes its pre-KIP-966 form (a fenced broker stays in
the ISR only as the leaderless last member: `last_replica_standing`).

Incremental use: every invariant names the parts of the state it reads (`Invariant.reads`,
tags below); a checker that knows what a step changed evaluates only the invariants that
read it. `ReplicaState.differs` may carry the ranges where the log was found to differ
from the committed prefix, its prefix agreement following from them (`agreement`), so after
one divergence (an unclean election's) the acknowledged records above it are not looked up
again at every step; and `Acks` splits
acknowledged records into those the committed prefix already covers and the rest, so a
predicate costs O(replicas) plus the exceptions.

    reads tag   changed by
    meta        the controller's partition state, fenced brokers, registrations
    replica     a replica's role, leader epoch, ISR views, pending AlterPartition,
                metadata, running, or a new incarnation
    log         a log's records below its end changed (truncation, loss, recovery)
    hwm         a replica's HWM passed the prefix it shares with the committed one
    commit      the true HWM advanced (the committed prefix grew)
    acks        a record was acknowledged
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

PREFIX = "invariant:"
# Acknowledged records a check looks for before it stops counting (see `_first_lost`).
FIRST_FOUND = 3
LEADER, FOLLOWER, NONE = "leader", "follower", "none"


class Rec(NamedTuple):
    """A record as the predicates see it; `value` None: unknown (a trace knows no values),
    `epoch` None: unknown (a read whose record no acknowledgement names)."""

    offset: int
    epoch: int | None
    value: Any = None


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    """The controller's metadata of one partition (the spec's con_partition_metadata,
    con_unfenced) and the topic's MinISR and ELR setting."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int | None
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    fenced: frozenset[int] = frozenset()
    min_isr: int = 1
    elr_enabled: bool = True


@dataclass(slots=True)
class ReplicaState:
    """One replica (the spec's partition_status, partition_metadata, partition_data of a
    broker). `records`: the log, indexed by offset, each with `.epoch` and `.value` (None:
    not known, then `epochs` -- the leader-epoch cache, [(epoch, start offset)] -- says
    which epoch each offset holds). `isr`: the ISR the leader last knew committed;
    `maximal_isr`: the ISR its HWM is computed over (with proposed additions, and with
    isr.update=local-first proposed removals too). `metadata`: the partition state the
    replica acts on, as `metadata_key` makes it. `differs`, when the caller compared the log
    with the committed prefix below `compared`: the ranges of offsets [start, end) below it
    where they differ, in order (`differing`; None: not compared). `leo_known` False: the
    log may be longer than `leo` (a trace between two reports of it): nothing is concluded
    from its end."""

    broker: int
    running: bool
    role: str = NONE
    leader_epoch: int = -1
    leo: int = 0
    hwm: int = 0
    records: Sequence[Any] | None = None
    epochs: Sequence[tuple[int, int]] | None = None
    isr: tuple[int, ...] | None = None
    maximal_isr: tuple[int, ...] | None = None
    alter_pending: bool = False
    metadata: tuple | None = None
    leo_known: bool = True
    compared: int = 0
    differs: Sequence[tuple[int, int]] | None = None


@dataclass(slots=True)
class Acks:
    """Positively acknowledged records of one partition. `committed`: sorted offsets whose
    acknowledged record is the committed prefix's record there (a replica agreeing with the
    committed prefix up to past them holds them); `other`: (offset, epoch) -> record for the
    rest, checked one by one."""

    committed: Sequence[int] = ()
    other: Mapping[tuple[int, int | None], Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.committed) + len(self.other)


@dataclass(slots=True)
class Facts:
    """What the history tells (the spec's auxiliary variables). `committed`: the committed
    prefix's records (`.epoch`, `.value`), or None when only `committed_epochs` (its epoch
    cache) is known. `acked`: acks=all acknowledgements; `acked1`: acks=1 acknowledgements of
    records not committed as acknowledged. `reads`: records consumers read that the committed
    prefix does not confirm. `history`: the controller's partition states by partition epoch
    (`metadata_key` form), the spec's con_metadata_log."""

    true_hwm: int = 0
    committed: Sequence[Any] | None = None
    committed_epochs: Sequence[tuple[int, int]] | None = None
    acked: Acks = field(default_factory=Acks)
    acked1: Acks = field(default_factory=Acks)
    reads: Mapping[tuple[int, int | None], Any] = field(default_factory=dict)
    history: Mapping[int, tuple] | None = None


@dataclass(slots=True)
class PartitionSnapshot:
    """`pairs`: for pairs of replicas (lower broker id first), a length their logs are known to
    share from offset 0, learnt by earlier evaluations and updated by LogMatching; kept by a
    caller that lowers an entry when one of the two logs changes other than by an append (the
    simulator does). None: nothing known, every comparison starts from the committed prefix."""

    meta: PartitionMeta
    replicas: Mapping[int, ReplicaState]
    facts: Facts
    pairs: dict[tuple[int, int], int] | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    """`name` is `invariant:<Spec name>`; `key` identifies the situation, so a checker that
    keeps going reports each once (the same leader missing the same records over many steps
    is one violation)."""

    name: str
    topic: str
    partition: int
    detail: str
    key: tuple = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "topic": self.topic, "partition": self.partition,
                "detail": self.detail}


def metadata_key(partition_epoch: int, leader: int | None, leader_epoch: int, isr: Iterable[int],
                 elr: Iterable[int] = (), last_known_elr: Iterable[int] = (),
                 replicas: Iterable[int] = ()) -> tuple:
    """One partition state as MetadataLogMatching compares it."""
    return (partition_epoch, leader, leader_epoch, tuple(isr), tuple(elr), tuple(last_known_elr),
            tuple(replicas))


# ---- logs -------------------------------------------------------------------------------------


def epoch_at(epochs: Sequence[tuple[int, int]], offset: int) -> int | None:
    """The epoch of the record at `offset` by an epoch cache ([(epoch, start)], starts
    increasing); None before the first entry. The trace replay asks this for every record a
    poll read: bisect's C loop, not one in Python."""
    i = bisect.bisect_right(epochs, offset, key=_START)
    return epochs[i - 1][0] if i else None


_START = itemgetter(1)


def record_epoch(r: ReplicaState, offset: int) -> int | None:
    if offset >= r.leo or offset < 0:
        return None
    if r.records is not None:
        return r.records[offset].epoch
    if r.epochs is not None:
        return epoch_at(r.epochs, offset)
    return None


def holds(r: ReplicaState, rec: Any) -> bool | None:
    """Whether the replica's log has `rec` (`.offset`, `.epoch`, `.value`) at its offset; None
    when its state cannot tell."""
    o = rec.offset
    if o >= r.leo:
        return False if r.leo_known else None
    if r.records is not None:
        x = r.records[o]
        if x is rec:
            return True
        if rec.epoch is not None and x.epoch != rec.epoch:
            return False
        return rec.value is None or x.value == rec.value
    if r.epochs is not None and rec.epoch is not None:
        return epoch_at(r.epochs, o) == rec.epoch
    return None


def same_record(a: Any, b: Any) -> bool:
    return a is b or (a.epoch == b.epoch and (a.value is None or b.value is None or a.value == b.value))


def common_prefix(a: ReplicaState | Facts, b: ReplicaState | Facts, limit: int, start: int = 0) -> int | None:
    """The first offset in [start, limit) where the two logs (or a log and the committed
    prefix) differ, or `limit`; None when neither records nor epochs tell."""
    ra = a.committed if isinstance(a, Facts) else a.records
    rb = b.committed if isinstance(b, Facts) else b.records
    if ra is not None and rb is not None:
        o = start
        while o < limit:
            x, y = ra[o], rb[o]
            if x is not y and (x.epoch != y.epoch or x.value != y.value):
                return o
            o += 1
        return limit
    ea = a.committed_epochs if isinstance(a, Facts) else a.epochs
    eb = b.committed_epochs if isinstance(b, Facts) else b.epochs
    if ea is None and ra is not None:
        ea = _epochs_of(ra, limit)
    if eb is None and rb is not None:
        eb = _epochs_of(rb, limit)
    if ea is None or eb is None:
        return None
    points = sorted({start} | {s for _, s in ea if start < s < limit} | {s for _, s in eb if start < s < limit})
    for s in points:
        if epoch_at(ea, s) != epoch_at(eb, s):
            return s
    return limit


def _epochs_of(records: Sequence[Any], limit: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for o in range(min(limit, len(records))):
        e = records[o].epoch
        if not out or out[-1][0] != e:
            out.append((e, o))
    return out


def agreement(r: ReplicaState, f: Facts) -> int | None:
    """How many offsets from 0 the replica's log shares with the committed prefix (at most
    the true HWM): where it first differs, when compared (`differs`), else from its records
    or epochs."""
    if r.differs is not None:
        return r.differs[0][0] if r.differs else r.compared
    return common_prefix(r, f, min(r.leo, f.true_hwm))


def missing(r: ReplicaState, acks: Acks, agreed: int | None, f: Facts, *,
            exact: bool = False) -> tuple[list[int], str]:
    """Acknowledged records the replica does not hold: some of their offsets, and how many in
    words ("" when none). Those below `agreed` (its shared prefix with the committed one) are
    held, and so are those its log was found not to differ at (`r.differs`); the others are
    looked up (see `_first_lost`)."""
    return _first_lost(acks, _unsure(r, acks.committed, agreed or 0), f,
                       lambda rec: holds(r, rec) is False, lowest=False, exact=exact)


def _unsure(r: ReplicaState, committed: Sequence[int], floor: int) -> Iterator[int]:
    """The offsets in `committed` (sorted) from `floor` on that `r` may not hold, in order:
    below `r.compared` only those where its log differs from the committed prefix
    (`r.differs`), then every one; without `r.differs`, every one."""
    if r.differs is None:
        return _from(committed, bisect.bisect_left(committed, floor))
    return chain(_within(committed, r.differs, floor),
                 _from(committed, bisect.bisect_left(committed, max(floor, r.compared))))


def _within(offsets: Sequence[int], ranges: Iterable[tuple[int, int]], floor: int) -> Iterator[int]:
    """The `offsets` (sorted) from `floor` on that lie in the `ranges` (in order)."""
    for start, end in ranges:
        if end > floor:
            i = bisect.bisect_left(offsets, max(start, floor))
            yield from _from(offsets, i, bisect.bisect_left(offsets, end, i))


def _from(items: Sequence[int], start: int, stop: int | None = None) -> Iterator[int]:
    """items[start:stop] without a copy (the checks stop early, mostly after a few)."""
    return map(items.__getitem__, range(start, len(items) if stop is None else stop))


def differing(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]],
              limit: int) -> list[tuple[int, int]]:
    """The ranges [start, end) below `limit` where two epoch caches ([(epoch, start)]) give
    different epochs (or one of them none), in order: for a log known by its epochs, where it
    differs from the committed prefix (`ReplicaState.differs`)."""
    points = sorted({0, *(x for _, x in a if 0 < x < limit), *(x for _, x in b if 0 < x < limit)})
    out: list[tuple[int, int]] = []
    for start, end in zip(points, [*points[1:], limit], strict=True):
        if start < end and epoch_at(a, start) != epoch_at(b, start):
            if out and out[-1][1] == start:
                start = out.pop()[0]
            out.append((start, end))
    return out


def _first_lost(acks: Acks, offsets: Iterable[int], f: Facts, lost: Callable[[Any], bool], *,
                lowest: bool, exact: bool = False) -> tuple[list[int], str]:
    """The acknowledged records `lost` says are gone: those of acks.committed at `offsets`
    (the ones that may be gone, in offset order), then acks.other, looked up until
    FIRST_FOUND are found. Returns their
    offsets, sorted, and their number in words: exact, or "at least N" when the look-up
    stopped early. `lowest`: the offsets must be the lowest lost ones (a violation's key), so
    the records of acks.other (not kept in offset order) are looked up too, each one that
    could still be among the lowest.

    Stopping early keeps the checks linear in a run's length: after a loss, looking up every
    later acknowledgement again at every step made them quadratic. `exact` looks up every
    one: `Invariant.exact` does, once per violation reported."""
    cap = None if exact else FIRST_FOUND
    found: list[int] = []  # sorted, at most FIRST_FOUND
    count = 0
    stopped = False
    for offset in offsets:
        rec = _committed_record(f, offset)
        if rec is not None and lost(rec):
            if count == cap:
                stopped = True
                break
            if count < FIRST_FOUND:
                found.append(offset)
            count += 1
    for rec in acks.other.values():
        if cap is not None and count >= cap and (not lowest or rec.offset >= found[-1]):
            stopped = True  # not looked up: it cannot change what is reported
            if not lowest:
                break
            continue
        if lost(rec):
            bisect.insort(found, rec.offset)
            del found[FIRST_FOUND:]
            count += 1
    if not count:
        return [], ""
    return found, f"at least {count}" if stopped else str(count)


# ---- the invariants ----------------------------------------------------------------------------


def _v(name: str, m: PartitionMeta, detail: str, *key: Any) -> Violation:
    return Violation(PREFIX + name, m.topic, m.partition, detail, key)


def valid_controller_isr_and_elr(p: PartitionSnapshot) -> list[Violation]:
    m = p.meta
    replicas, isr, elr = set(m.replicas), set(m.isr), set(m.elr)
    problems = []
    if not isr <= replicas:
        problems.append(f"ISR {sorted(isr)} is not within the replicas {list(m.replicas)}")
    if not elr <= replicas:
        problems.append(f"ELR {sorted(elr)} is not within the replicas {list(m.replicas)}")
    if isr & elr:
        problems.append(f"{sorted(isr & elr)} in both the ISR and the ELR")
    if m.elr_enabled and len(isr) >= m.min_isr and elr:
        problems.append(f"ISR {sorted(isr)} has MinISR {m.min_isr} members but the ELR is "
                        f"{sorted(elr)}, not empty")
    if m.leader is not None and m.leader not in isr:
        problems.append(f"leader {m.leader} is not in the ISR {sorted(isr)}")
    return [_v("ValidControllerIsrAndElr", m, f"partition epoch {m.partition_epoch}: {x}", m.partition_epoch, x)
            for x in problems]


def last_replica_standing(m: PartitionMeta) -> bool:
    """The one state in which Kafka's controller keeps a fenced broker in the ISR without
    KIP-966 (ELR off): the broker is the ISR's only member and the partition has no leader.
    Pre-KIP-966 the controller never empties the ISR: fencing its last member only takes the
    leadership away, and the partition waits for that broker to come back (KIP-966,
    "Motivation": the "last replica standing"; Kafka's documentation, "Unclean leader
    election: What if they all die?": wait for an ISR replica to come back to life)."""
    return not m.elr_enabled and m.leader is None and len(m.isr) == 1


def valid_controller_state(p: PartitionSnapshot) -> list[Violation]:
    m = p.meta
    bad = sorted(set(m.isr) & m.fenced)
    if not bad or last_replica_standing(m):
        return []
    rule = "" if m.elr_enabled else (
        "; without ELR a fenced broker may stay in the ISR only as its leaderless last member "
        f"(here leader {m.leader}, {len(m.isr)} member(s))")
    return [_v("ValidControllerState", m, f"fenced broker(s) {bad} in the ISR {list(m.isr)} "
               f"(partition epoch {m.partition_epoch}){rule}", tuple(bad), m.partition_epoch)]


def min_isr_recovery_quorum(p: PartitionSnapshot) -> list[Violation]:
    m = p.meta
    if not m.elr_enabled or m.isr or m.elr or len(m.last_known_elr) >= m.min_isr:
        return []
    return [_v("MinIsrRecoveryQuorum", m, f"ISR and ELR empty but LastKnownELR "
               f"{list(m.last_known_elr)} has {len(m.last_known_elr)} member(s), fewer than "
               f"MinISR {m.min_isr} (partition epoch {m.partition_epoch})", m.partition_epoch)]


def replication_quorum_superset(p: PartitionSnapshot) -> list[Violation]:
    m = p.meta
    out = []
    for b, r in p.replicas.items():
        if not (r.running and r.role == LEADER and r.leader_epoch == m.leader_epoch):
            continue
        if r.isr is None or r.maximal_isr is None:
            continue
        maximal = set(r.maximal_isr)
        if not r.alter_pending and maximal != set(r.isr):
            out.append(_v("ReplicationQuorumSuperset", m, f"leader {b} (epoch {r.leader_epoch}) has "
                          f"no AlterPartition pending but acts on ISR {sorted(maximal)}, not its "
                          f"committed ISR {list(r.isr)}", "unproposed", b, r.leader_epoch,
                          tuple(sorted(maximal)), r.isr))
        if len(r.isr) >= m.min_isr:
            needed = set(m.isr) | set(m.elr)
            if not needed <= maximal:
                out.append(_v("ReplicationQuorumSuperset", m, f"leader {b} (epoch {r.leader_epoch}) "
                              f"with committed ISR {list(r.isr)} >= MinISR {m.min_isr} computes its "
                              f"HWM over {sorted(maximal)}, which lacks controller ISR+ELR member(s) "
                              f"{sorted(needed - maximal)}", "not-superset", b, r.leader_epoch,
                              tuple(sorted(maximal)), tuple(sorted(needed))))
    return out


def _completeness(name: str, p: PartitionSnapshot, acks: Acks, check_leo: bool,
                  exact: bool) -> list[Violation]:
    m, f = p.meta, p.facts
    if m.leader is None:
        return []
    r = p.replicas.get(m.leader)
    if r is None or not r.running:
        return []
    problems = []
    if check_leo and f.true_hwm > 0 and r.leo < f.true_hwm and r.leo_known:
        problems.append(f"its log ends at {r.leo}, below the true HWM {f.true_hwm}")
    if len(acks):
        lacking, count = missing(r, acks, agreement(r, f), f, exact=exact)
        if count:
            problems.append(f"it lacks {count} acknowledged record(s), at offsets {lacking}"
                            f"{' ...' if count != str(len(lacking)) else ''}")
    if not problems:
        return []
    return [_v(name, m, f"leader {m.leader} (epoch {m.leader_epoch}): " + "; ".join(problems),
               m.leader, m.leader_epoch)]


def leader_completeness(p: PartitionSnapshot, exact: bool = False) -> list[Violation]:
    return _completeness("LeaderCompleteness", p, p.facts.acked, True, exact)


def acknowledged_completeness(p: PartitionSnapshot, exact: bool = False) -> list[Violation]:
    return _completeness("AcknowledgedCompleteness", p, p.facts.acked1, False, exact)


def leader_candidate_completeness(p: PartitionSnapshot) -> list[Violation]:
    m, f = p.meta, p.facts
    if f.true_hwm <= 0:
        return []
    out = []
    for where, members in (("ISR", m.isr), ("ELR", m.elr)):
        for b in members:
            r = p.replicas.get(b)
            if r is None or not r.running:
                continue
            if r.leo < f.true_hwm and r.leo_known:
                out.append(_v("LeaderCandidateCompleteness", m, f"{where} member {b} is running with "
                              f"its log ending at {r.leo}, below the true HWM {f.true_hwm} "
                              f"(partition epoch {m.partition_epoch})", b, m.partition_epoch))
                continue
            agreed = agreement(r, f)
            if agreed is not None and agreed < min(r.leo, f.true_hwm):
                out.append(_v("LeaderCandidateCompleteness", m, f"{where} member {b} is running with "
                              f"a log that leaves the committed prefix at offset {agreed}, below the "
                              f"true HWM {f.true_hwm} (partition epoch {m.partition_epoch})",
                              b, m.partition_epoch))
    return out


def log_matching(p: PartitionSnapshot) -> list[Violation]:
    m, f = p.meta, p.facts
    reps = sorted(p.replicas.items())
    # Fast path: every replica shares the committed prefix up to its HWM, so any two agree
    # below the lower of their HWMs.
    suspects = []
    for b, r in reps:
        hwm = min(r.hwm, r.leo)
        if hwm <= 0:
            continue
        agreed = agreement(r, f) if hwm <= f.true_hwm else None
        if agreed is None or agreed < hwm:
            suspects.append(b)
    out = []
    seen: set[tuple[int, int]] = set()
    for b in suspects:
        r = p.replicas[b]
        for c, s in reps:
            if c == b or (min(b, c), max(b, c)) in seen:
                continue
            seen.add((min(b, c), max(b, c)))
            limit = min(r.hwm, s.hwm, r.leo, s.leo)
            if limit <= 0:
                continue
            (lo, rl), (hi, rh) = sorted(((b, r), (c, s)), key=lambda x: x[0])
            # Both equal the committed prefix below their agreements with it, so each other
            # below the lower one; and below what an earlier evaluation found they share.
            start = min(agreement(r, f) or 0, agreement(s, f) or 0, limit)
            if p.pairs is not None:
                start = max(start, min(p.pairs.get((lo, hi), 0), limit))
            at = common_prefix(r, s, limit, start)
            if p.pairs is not None and at is not None:
                p.pairs[(lo, hi)] = at
            if at is not None and at < limit:
                out.append(_v("LogMatching", m, f"replicas {lo} and {hi} differ at offset {at}, "
                              f"below both their HWMs ({rl.hwm}, {rh.hwm}): epoch "
                              f"{record_epoch(rl, at)} vs {record_epoch(rh, at)}", lo, hi, at))
    return out


def metadata_log_matching(p: PartitionSnapshot) -> list[Violation]:
    m, f = p.meta, p.facts
    if f.history is None:
        return []
    out = []
    for b, r in sorted(p.replicas.items()):
        if r.metadata is None:
            continue
        committed = f.history.get(r.metadata[0])
        if committed is None or committed != r.metadata:
            what = "never committed" if committed is None else f"committed as {committed}"
            out.append(_v("MetadataLogMatching", m, f"replica {b} acts on partition state {r.metadata}, "
                          f"which the controller {what} at partition epoch {r.metadata[0]}",
                          b, r.metadata[0]))
    return out


def consistent_read(p: PartitionSnapshot) -> list[Violation]:
    m, f = p.meta, p.facts
    out = []
    for b, r in p.replicas.items():
        if not (r.running and r.role == LEADER and r.leader_epoch == m.leader_epoch):
            continue
        problems = []
        if f.true_hwm > 0:
            if r.leo < f.true_hwm and r.leo_known:
                problems.append(f"its log ends at {r.leo}, below the true HWM {f.true_hwm}")
            else:
                agreed = agreement(r, f)
                if agreed is not None and agreed < min(r.leo, f.true_hwm):
                    problems.append(f"its record at offset {agreed} (epoch {record_epoch(r, agreed)}) is "
                                    f"not the committed one (epoch "
                                    f"{_committed_epoch(f, agreed)}), below the true HWM {f.true_hwm}")
        bad = [rec.offset for rec in f.reads.values() if holds(r, rec) is False]
        if bad:
            problems.append(f"it lacks {len(bad)} record(s) consumers read, at offsets {sorted(bad)[:3]}")
        if problems:
            out.append(_v("ConsistentRead", m, f"leader {b} (epoch {r.leader_epoch}): " + "; ".join(problems),
                          b, r.leader_epoch))
    return out


def _committed_epoch(f: Facts, offset: int) -> int | None:
    if f.committed is not None and offset < len(f.committed):
        return f.committed[offset].epoch
    if f.committed_epochs is not None:
        return epoch_at(f.committed_epochs, offset)
    return None


def no_committed_record_lost_globally(p: PartitionSnapshot, exact: bool = False) -> list[Violation]:
    m, f = p.meta, p.facts
    acks = f.acked
    if not len(acks):
        return []
    # Below the longest prefix some replica shares with the committed one, every
    # acknowledged record that is the committed one is held; the rest are looked up. A
    # record no replica holds is among those any one replica may not hold: of the replicas
    # compared with the committed prefix, the one that leaves the fewest names them.
    best = max((agreement(r, f) or 0 for r in p.replicas.values()), default=0)
    replicas = tuple(p.replicas.values())
    compared = [r for r in replicas if r.differs is not None]
    guide = min(compared, key=lambda r: sum(e - s for s, e in r.differs)
                + max(0, f.true_hwm - r.compared), default=None)
    offsets = (_unsure(guide, acks.committed, best) if guide is not None
               else _from(acks.committed, bisect.bisect_left(acks.committed, best)))
    lost, count = _first_lost(acks, offsets, f,
                              lambda rec: not any(holds(r, rec) is not False for r in replicas),
                              lowest=True, exact=exact)
    if not lost:
        return []
    return [_v("NoCommittedRecordLostGlobally", m, f"{count} acknowledged record(s) on no replica, "
               f"at offsets {lost}{' ...' if count != str(len(lost)) else ''}", lost[0])]


def _committed_record(f: Facts, offset: int) -> Any:
    if f.committed is not None and offset < len(f.committed):
        return f.committed[offset]
    if f.committed_epochs is not None and offset < f.true_hwm:
        return Rec(offset, epoch_at(f.committed_epochs, offset))
    return None


@dataclass(frozen=True)
class Invariant:
    name: str  # the spec's name without "Property"
    spec: str  # the property in kip_966_properties.tla it follows ("" for an extension)
    check: Callable[[PartitionSnapshot], list[Violation]]
    reads: frozenset[str]
    words: str
    counts: bool = False  # check(p, exact=True) counts every lost record it mentions

    @property
    def anomaly(self) -> str:
        return PREFIX + self.name

    def exact(self, p: PartitionSnapshot, v: Violation) -> Violation:
        """`v`, which check(p) found, with the lost records it mentions all counted: the checks
        stop counting at FIRST_FOUND (`_first_lost`), and a checker calls this once for each
        violation it reports, not at every step the violation goes on holding."""
        if not self.counts or "at least" not in v.detail:
            return v
        found = self.check(p, exact=True)  # type: ignore[call-arg]
        return next((x for x in found if x.key == v.key), v)


def _inv(name: str, spec: str, check, reads: str, words: str) -> Invariant:
    counts = check in (leader_completeness, acknowledged_completeness,
                       no_committed_record_lost_globally)
    return Invariant(name, spec, check, frozenset(reads.split()), " ".join(words.split()), counts)


INVARIANTS: tuple[Invariant, ...] = (
    _inv("LeaderCompleteness", "LeaderCompletenessProperty", leader_completeness,
         "meta replica log commit acks", """
         Once something is committed, the controller's leader, if running, has a log reaching
         the true HWM and holds every record acknowledged at acks=all."""),
    _inv("LeaderCandidateCompleteness", "LeaderCandidateCompletenessProperty",
         leader_candidate_completeness, "meta replica log commit", """
         Every running member of the controller's ISR or ELR -- each a leader candidate -- has
         a log reaching the true HWM that holds the committed prefix (the spec asks for the
         log end; the prefix is the same claim made on records)."""),
    _inv("ReplicationQuorumSuperset", "ReplicationQuorumSupersetProperty",
         replication_quorum_superset, "meta replica", """
         A non-stale leader (its leader epoch is the controller's) without an AlterPartition
         pending acts on exactly its committed ISR; and while its committed ISR has MinISR
         members, the ISR it computes the HWM over (the maximal ISR) contains the
         controller's ISR and ELR."""),
    _inv("LogMatching", "LogMatchingProperty", log_matching, "replica log hwm", """
         Any two replicas hold the same record at every offset below both their high
         watermarks."""),
    _inv("MetadataLogMatching", "MetadataLogMatchingProperty", metadata_log_matching,
         "meta replica", """
         The partition state a replica acts on is the one the controller committed at that
         partition epoch (the spec compares the brokers' metadata logs with the controller's,
         record by record)."""),
    _inv("ConsistentRead", "ConsistentReadProperty", consistent_read, "meta replica log commit", """
         A non-stale leader's log holds the committed prefix -- every record below the true
         HWM, as consumers could read it -- and every record consumers did read."""),
    _inv("NoCommittedRecordLostGlobally", "NoCommittedRecordLostGlobally",
         no_committed_record_lost_globally, "log acks", """
         Every record acknowledged at acks=all is on some replica's log (running or not: what
         its disk holds)."""),
    _inv("ValidControllerIsrAndElr", "ValidControllerIsrAndElr", valid_controller_isr_and_elr,
         "meta", """
         The controller's ISR and ELR are within the replicas and disjoint, the ELR is empty
         while the ISR has MinISR members (ELR on), and a leader is an ISR member."""),
    _inv("ValidControllerState", "ValidControllerState", valid_controller_state, "meta", """
         No fenced broker is in the controller's ISR. Pre-KIP-966 (ELR off) the rule is
         Kafka's without KIP-966: a fenced broker stays in the ISR only as its last member,
         with the partition leaderless until it is back (the "last replica standing"); any
         other fenced ISR member, a fenced leader above all, is a violation. The loss that
         state leads to is the other properties' to report."""),
    _inv("MinIsrRecoveryQuorum", "MinIsrRecoveryQuorum", min_isr_recovery_quorum, "meta", """
         With ELR on, when the ISR and the ELR are both empty, LastKnownELR has at least MinISR
         members: the replicas balanced recovery must hear from. (The write-up's property says
         exactly MinISR, true when the ISR shrinks one replica at a time; Kafka's controller
         puts every replica one AlterPartition drops below MinISR into the ELR, so ISR {1,2,3}
         shrunk to {1} at once leaves a quorum of three, which asks more replicas, never
         fewer.)"""),
    _inv("AcknowledgedCompleteness", "", acknowledged_completeness, "meta replica log acks", """
         Extension (no spec property; acks=1): the controller's leader, if running, holds
         every record acknowledged at acks=1 that is not yet committed as it was
         acknowledged. Reported under its own name so that acks=1's weakness never passes
         for LeaderCompleteness."""),
)

BY_NAME = {i.name: i for i in INVARIANTS}


# ---- the disk (simulation only) -----------------------------------------------------------

SYNCED_RECORDS_SURVIVE = "SyncedRecordsSurvive"
SYNCED_RECORDS_SURVIVE_WORDS = " ".join("""
    Extension (no spec property; checked only in simulation, which knows each replica's disk):
    on each replica, a record whose fsync completed -- a sync of its log ran to the end, or
    an inline flush returned, after the record was stored -- is in the log at its offset
    after any kill, power loss and recovery, unless the log was truncated below it since.
    """.split())


def synced_record_lost(synced: int, before: Sequence[Any], after: Sequence[Any]) -> int | None:
    """SyncedRecordsSurvive at one recovery of one replica's log: `before` is the log as its
    last process had it (records by offset), `synced` how many of them had their fsync
    complete, `after` what the recovery kept. The first offset below `synced` whose record
    `after` does not hold (the same offset, epoch, timestamp and value), or None."""
    for o in range(synced):
        if o >= len(after) or not (after[o] is before[o] or after[o] == before[o]):
            return o
    return None


def affected(tags: Iterable[str]) -> tuple[Invariant, ...]:
    """The invariants that read any of `tags`."""
    tags = frozenset(tags)
    return tuple(i for i in INVARIANTS if i.reads & tags)


def check(p: PartitionSnapshot, invariants: Iterable[Invariant] = INVARIANTS) -> list[Violation]:
    """Every violation of `invariants` (all by default) in one partition's snapshot."""
    out: list[Violation] = []
    for inv in invariants:
        out += inv.check(p)
    return out
