"""The protocol invariants (checkers/invariants.py) on hand-built states, each with a state
that holds it and one that breaks it; the trace checker (checkers/trace.py) on hand-built
event sequences; the merge into results.json. Pure and fast: no simulation, no Spark."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest
from support.lookups import count_lookups

from checkers import invariants as inv
from checkers.invariants import (
    Acks,
    Facts,
    PartitionMeta,
    PartitionSnapshot,
    Rec,
    ReplicaState,
    agreement,
    check,
    common_prefix,
    epoch_at,
    holds,
    metadata_key,
    same_record,
)
from checkers.invariants import _committed_record as committed_record
from checkers.trace import check_trace, findings
from checkers.verdict import add_invariants
from runformat.run_config import RunConfig


def split_acks(acked: Iterable[Any], f: Facts) -> Acks:
    """`Acks` from plain acknowledged records (`.offset`, `.epoch`, `.value`): those equal to
    the committed prefix's record at their offset, and the rest."""
    committed: list[int] = []
    other: dict[tuple[int, int | None], Any] = {}
    for rec in acked:
        c = committed_record(f, rec.offset)
        if c is not None and rec.epoch is not None and same_record(c, rec):
            committed.append(rec.offset)
        else:
            other[(rec.offset, rec.epoch)] = rec
    return Acks(sorted(committed), other)


def log(*epochs: int, value=lambda o: f"v{o}") -> list[Rec]:
    """Records at offsets 0.. with these epochs."""
    return [Rec(o, e, value(o)) for o, e in enumerate(epochs)]


def meta(**kw) -> PartitionMeta:
    base = dict(topic="t", partition=0, replicas=(1, 2, 3), leader=1, leader_epoch=1,
                partition_epoch=1, isr=(1, 2, 3), min_isr=2)
    return PartitionMeta(**{**base, **kw})


def replica(b: int, records: list[Rec] | None, *, running=True, role="follower", epoch=1, hwm=None,
            **kw) -> ReplicaState:
    leo = len(records) if records is not None else kw.pop("leo", 0)
    return ReplicaState(b, running, role, epoch, leo, leo if hwm is None else hwm, records, **kw)


COMMITTED = log(0, 0, 1, 1)  # 4 records, epochs 0, 0, 1, 1


def snap(replicas: list[ReplicaState], m: PartitionMeta | None = None, facts: Facts | None = None):
    f = facts if facts is not None else Facts(true_hwm=4, committed=COMMITTED)
    return PartitionSnapshot(m or meta(), {r.broker: r for r in replicas}, f)


def healthy(**kw) -> PartitionSnapshot:
    return snap([replica(1, log(0, 0, 1, 1, 1), role="leader", hwm=4, isr=(1, 2, 3),
                         maximal_isr=(1, 2, 3)),
                 replica(2, log(0, 0, 1, 1), hwm=4), replica(3, log(0, 0, 1, 1), hwm=3)], **kw)


def names(p: PartitionSnapshot) -> set[str]:
    return {v.name.removeprefix("invariant:") for v in check(p)}


# ---- helpers --------------------------------------------------------------------------------------

def test_epoch_cache_lookups_and_holding_a_record():
    assert epoch_at([(0, 0), (3, 5)], 4) == 0 and epoch_at([(0, 0), (3, 5)], 5) == 3
    assert epoch_at([(2, 3)], 1) is None
    by_epochs = ReplicaState(1, True, leo=6, epochs=((0, 0), (3, 5)))
    assert holds(by_epochs, Rec(5, 3)) and holds(by_epochs, Rec(4, 3)) is False
    assert holds(by_epochs, Rec(6, 3)) is False  # past its end
    assert holds(replace(by_epochs, leo_known=False), Rec(6, 3)) is None  # a trace: maybe
    assert holds(ReplicaState(1, True, leo=6), Rec(2, 0)) is None  # nothing known
    by_records = replica(1, log(0, 1))
    assert holds(by_records, Rec(1, 1, "v1")) and holds(by_records, Rec(1, 1, "other")) is False


def test_prefix_agreement_by_records_and_by_epochs():
    f = Facts(true_hwm=4, committed=COMMITTED)
    assert agreement(replica(1, log(0, 0, 1, 1, 2)), f) == 4
    assert agreement(replica(1, log(0, 0, 2)), f) == 2
    assert agreement(replica(1, log(0, 0)), f) == 2
    fe = Facts(true_hwm=4, committed_epochs=[(0, 0), (1, 2)])
    assert agreement(ReplicaState(1, True, leo=5, epochs=((0, 0), (1, 2), (2, 4))), fe) == 4
    assert agreement(ReplicaState(1, True, leo=5, epochs=((0, 0), (2, 2))), fe) == 2
    assert common_prefix(replica(1, log(0, 0, 1)), replica(2, log(0, 0, 2)), 3) == 2


def test_acknowledged_records_split_by_the_committed_prefix():
    f = Facts(true_hwm=4, committed=COMMITTED)
    acks = split_acks([Rec(1, 0, "v1"), Rec(3, 1, "v3"), Rec(3, 2, "x"), Rec(9, 2, "y")], f)
    assert list(acks.committed) == [1, 3] and set(acks.other) == {(3, 2), (9, 2)}


def test_a_healthy_partition_violates_nothing():
    p = healthy()
    p.facts.acked = split_acks([Rec(0, 0, "v0"), Rec(3, 1, "v3")], p.facts)
    p.facts.history = {1: metadata_key(1, 1, 1, (1, 2, 3), replicas=(1, 2, 3))}
    p.replicas[1].metadata = metadata_key(1, 1, 1, (1, 2, 3), replicas=(1, 2, 3))
    assert check(p) == []


# ---- each invariant: holds, then broken -----------------------------------------------------------

def test_leader_completeness():
    ok = healthy()
    ok.facts.acked = split_acks([Rec(3, 1, "v3")], ok.facts)
    assert "LeaderCompleteness" not in names(ok)
    short = snap([replica(1, log(0, 0, 1), role="leader"), replica(2, log(0, 0, 1, 1))])
    (v,) = inv.leader_completeness(short)
    assert v.name == "invariant:LeaderCompleteness" and "below the true HWM 4" in v.detail
    # the log is long enough but an acknowledged record is not the one at its offset
    other = snap([replica(1, log(0, 0, 1, 2, 2), role="leader"), replica(2, log(0, 0, 1, 1))])
    other.facts.acked = Acks([], {(3, 1): Rec(3, 1, "v3")})
    (v,) = inv.leader_completeness(other)
    assert "lacks 1 acknowledged record(s), at offsets [3]" in v.detail
    # a leader that is not running is not judged (the spec's RUNNING)
    short.replicas[1].running = False
    assert inv.leader_completeness(short) == []
    # nothing committed, nothing to lose
    assert inv.leader_completeness(snap([replica(1, [], role="leader")], facts=Facts())) == []


def test_acknowledged_completeness_holds_the_leader_to_acks_1_acknowledgements():
    p = healthy()
    p.facts.acked1 = Acks([], {(4, 1): Rec(4, 1, "v4")})  # on leader 1, above the HWM
    assert inv.acknowledged_completeness(p) == []
    failover = healthy(m=meta(leader=2, leader_epoch=2))  # broker 2 never got offset 4
    failover.facts.acked1 = Acks([], {(4, 1): Rec(4, 1, "v4")})
    (v,) = inv.acknowledged_completeness(failover)
    assert v.name == "invariant:AcknowledgedCompleteness" and "offsets [4]" in v.detail
    assert inv.leader_completeness(failover) == []  # acks=1 never counts as committed


def test_leader_candidate_completeness():
    assert inv.leader_candidate_completeness(healthy()) == []
    lagging = healthy(m=meta(isr=(1, 2), elr=(3,)))
    lagging.replicas[3] = replica(3, log(0, 0, 1))
    (v,) = inv.leader_candidate_completeness(lagging)
    assert "ELR member 3" in v.detail and "ending at 3" in v.detail
    lagging.replicas[3].running = False  # down: exempt until it registers again
    assert inv.leader_candidate_completeness(lagging) == []
    diverged = healthy()
    diverged.replicas[2] = replica(2, log(0, 0, 2, 2))  # long enough, wrong records
    (v,) = inv.leader_candidate_completeness(diverged)
    assert "leaves the committed prefix at offset 2" in v.detail
    # a trace that only has a lower bound of the log end concludes nothing from it
    unsure = healthy()
    unsure.replicas[2] = ReplicaState(2, True, leo=2, epochs=((0, 0),), leo_known=False)
    assert inv.leader_candidate_completeness(unsure) == []


def test_replication_quorum_superset():
    assert inv.replication_quorum_superset(healthy()) == []
    no_pending = healthy()
    no_pending.replicas[1].maximal_isr = (1, 2)
    found = inv.replication_quorum_superset(no_pending)
    assert {("no AlterPartition pending" in v.detail) for v in found} == {True, False}
    # isr.update=local-first: the proposed shrink is acted on while the controller still
    # has 3 in the ISR
    local_first = healthy()
    local_first.replicas[1].maximal_isr, local_first.replicas[1].alter_pending = (1, 2), True
    (v,) = inv.replication_quorum_superset(local_first)
    assert "lacks controller ISR+ELR member(s) [3]" in v.detail
    # a proposed expansion ("maximal ISR") is fine, and a stale leader is not judged
    expanding = healthy(m=meta(isr=(1, 2)))
    expanding.replicas[1].isr, expanding.replicas[1].alter_pending = (1, 2), True
    assert inv.replication_quorum_superset(expanding) == []
    local_first.replicas[1].leader_epoch = 0
    assert inv.replication_quorum_superset(local_first) == []


def test_log_matching():
    assert inv.log_matching(healthy()) == []
    p = healthy()
    p.replicas[3] = replica(3, log(0, 0, 2, 2), hwm=4)  # differs at 2, below every HWM
    (v,) = [x for x in inv.log_matching(p) if x.key[:2] == (1, 3)]
    assert "replicas 1 and 3 differ at offset 2" in v.detail
    p.replicas[3].hwm = 2  # below its HWM it agrees: a divergent suffix is allowed
    assert inv.log_matching(p) == []


def test_metadata_log_matching():
    history = {1: metadata_key(1, 1, 1, (1, 2, 3)), 2: metadata_key(2, 1, 1, (1, 2))}
    p = healthy(facts=Facts(true_hwm=4, committed=COMMITTED, history=history))
    p.replicas[2].metadata = metadata_key(2, 1, 1, (1, 2))
    assert inv.metadata_log_matching(p) == []
    p.replicas[3].metadata = metadata_key(2, 1, 1, (1, 3))
    p.replicas[1].metadata = metadata_key(5, 1, 1, (1,))
    found = {v.key[0]: v.detail for v in inv.metadata_log_matching(p)}
    assert "committed as" in found[3] and "never committed" in found[1]


def test_consistent_read():
    assert inv.consistent_read(healthy()) == []
    p = healthy()
    p.replicas[1] = replica(1, log(0, 0, 2, 2, 2), role="leader")
    (v,) = inv.consistent_read(p)
    assert "record at offset 2 (epoch 2) is not the committed one (epoch 1)" in v.detail
    stale = healthy(m=meta(leader_epoch=2))  # leader 1 is at epoch 1: stale, not judged
    stale.replicas[1] = replica(1, log(0, 0, 2), role="leader")
    assert inv.consistent_read(stale) == []
    read = healthy()
    read.facts.reads = {(4, 3): Rec(4, 3, "v4")}  # a consumer read epoch 3 at offset 4
    (v,) = inv.consistent_read(read)
    assert "lacks 1 record(s) consumers read, at offsets [4]" in v.detail


def test_no_committed_record_lost_globally():
    p = healthy()
    p.facts.acked = split_acks([Rec(3, 1, "v3")], p.facts)
    assert inv.no_committed_record_lost_globally(p) == []
    for b in (1, 2, 3):
        p.replicas[b] = replica(b, log(0, 0, 1), running=False)  # down replicas count too
    (v,) = inv.no_committed_record_lost_globally(p)
    assert "1 acknowledged record(s) on no replica, at offsets [3]" in v.detail
    p.replicas[2] = ReplicaState(2, False, leo=0, leo_known=False)  # unknown: maybe held
    assert inv.no_committed_record_lost_globally(p) == []


def test_lost_records_are_counted_up_to_a_few_at_each_step_and_exactly_once_reported():
    committed = log(*[0] * 10)
    facts = Facts(true_hwm=10, committed=committed)
    facts.acked = split_acks(committed[2:], facts)  # offsets 2..9 acknowledged
    facts.acked.other[(11, 1)] = Rec(11, 1, "v11")  # and one the committed prefix lacks
    gone = snap([replica(b, log(0, 0), running=False) for b in (1, 2, 3)], facts=facts)
    (v,) = inv.no_committed_record_lost_globally(gone)
    # every step: the lowest offsets and "at least"; the key is the lowest lost offset either way
    assert v.detail == "at least 3 acknowledged record(s) on no replica, at offsets [2, 3, 4] ..."
    (exact,) = inv.no_committed_record_lost_globally(gone, exact=True)
    assert exact.detail == "9 acknowledged record(s) on no replica, at offsets [2, 3, 4] ..."
    assert exact.key == v.key == (2,)
    assert inv.BY_NAME["NoCommittedRecordLostGlobally"].exact(gone, v) == exact
    # the lowest lost offset may be an acknowledgement outside the committed prefix
    facts.acked.other[(1, 5)] = Rec(1, 5, "x")
    (v,) = inv.no_committed_record_lost_globally(gone)
    assert v.key == (1,) and "at offsets [1, 2, 3]" in v.detail
    # a leader lacking records: the same cap, exact once reported
    short = snap([replica(1, log(0, 0), role="leader"), replica(2, committed)], facts=facts)
    (v,) = inv.leader_completeness(short)
    assert "lacks at least 3 acknowledged record(s)" in v.detail
    assert "lacks 10 acknowledged record(s)" in inv.BY_NAME["LeaderCompleteness"].exact(short, v).detail
    # a check that counts nothing is returned as it is
    (lm,) = [x for x in inv.INVARIANTS if x.name == "LogMatching"]
    assert not lm.counts and lm.exact(gone, v) is v


def compared(r: ReplicaState, f: Facts) -> ReplicaState:
    """`r` with its log compared with the committed prefix record by record, as the simulator's
    monitor does it (ReplicaState.compared and differs)."""
    limit = min(r.leo, f.true_hwm)
    differs: list[tuple[int, int]] = []
    for o in range(limit):
        if not same_record(r.records[o], f.committed[o]):
            if differs and differs[-1][1] == o:
                differs[-1] = (differs[-1][0], o + 1)
            else:
                differs.append((o, o + 1))
    return replace(r, compared=limit, differs=differs)


def test_past_a_divergence_only_the_records_a_log_differs_at_are_looked_up(monkeypatch):
    """After an unclean election every log leaves the committed prefix at the record that was
    lost, and every acknowledgement after it used to be looked up again at every step: a
    simulated run of the unclean-election cell spent 60 % of its time there."""
    n = 1000
    committed = [Rec(o, 0 if o < 10 else 1, f"v{o}") for o in range(n)]
    facts = Facts(true_hwm=n, committed=committed)
    facts.acked = split_acks(committed[10:], facts)
    diverged = [Rec(5, 0, "x5") if o == 5 else r for o, r in enumerate(committed)]
    lacking = [Rec(500, 1, "x500") if o == 500 else r for o, r in enumerate(diverged)]
    plain = snap([replica(1, lacking, role="leader"), replica(2, diverged),
                  replica(3, diverged)], facts=facts)
    calls = count_lookups(monkeypatch)
    (v,) = inv.leader_completeness(plain)
    assert "lacks 1 acknowledged record(s), at offsets [500]" in v.detail
    assert inv.no_committed_record_lost_globally(plain) == []
    assert calls[0] > 2 * (n - 10)  # without the comparisons: every acknowledgement, each time
    calls[0] = 0
    known = replace(plain, replicas={b: compared(r, facts) for b, r in plain.replicas.items()})
    assert [x.detail for x in inv.leader_completeness(known)] == [v.detail]
    assert inv.no_committed_record_lost_globally(known) == []
    assert calls[0] <= 4  # with them: the one record a log differs at, and who holds it


@pytest.mark.parametrize("seed", range(40))
def test_the_comparisons_change_no_verdict(seed):
    """Random logs around a committed prefix: LeaderCompleteness and
    NoCommittedRecordLostGlobally say the same, counted or exact, with or without them."""
    rng = random.Random(seed)
    n = rng.randrange(1, 60)
    committed = [Rec(o, o // 10, f"v{o}") for o in range(n)]
    facts = Facts(true_hwm=n, committed=committed)
    acked = [r for r in committed if rng.random() < 0.7]
    facts.acked = split_acks(acked + [Rec(n + 1, 9, "late")] * rng.randrange(2), facts)

    def some_log() -> list[Rec]:
        out = [Rec(o, 99, "x") if rng.random() < 0.15 else r for o, r in enumerate(committed)]
        return out[:rng.randrange(n + 3)]

    plain = snap([replica(b, some_log(), role="leader" if b == 1 else "follower")
                  for b in (1, 2, 3)], facts=facts)
    known = replace(plain, replicas={b: compared(r, facts) for b, r in plain.replicas.items()})
    # the same logs known only by their epoch caches, as a trace knows them
    by_epochs = replace(plain, facts=replace(facts, committed=None,
                                             committed_epochs=epoch_cache(committed)))
    by_epochs.replicas = {b: replace(r, records=None, epochs=epoch_cache(r.records))
                          for b, r in plain.replicas.items()}
    epochs_known = replace(by_epochs, replicas={b: epochs_compared(r, by_epochs.facts)
                                                for b, r in by_epochs.replicas.items()})
    for check_ in (inv.leader_completeness, inv.no_committed_record_lost_globally):
        for exact in (False, True):
            assert check_(known, exact=exact) == check_(plain, exact=exact)
            assert check_(epochs_known, exact=exact) == check_(by_epochs, exact=exact)


def epoch_cache(records: list[Rec]) -> list[tuple[int, int]]:
    return [(r.epoch, r.offset) for i, r in enumerate(records)
            if i == 0 or records[i - 1].epoch != r.epoch]


def epochs_compared(r: ReplicaState, f: Facts) -> ReplicaState:
    limit = min(r.leo, f.true_hwm)
    differs = inv.differing(r.epochs, f.committed_epochs, limit)
    return replace(r, compared=limit, differs=differs)


def test_where_two_epoch_caches_differ():
    a = [(0, 0), (1, 5), (3, 8)]
    assert inv.differing(a, a, 12) == []
    assert inv.differing(a, [(0, 0), (1, 5), (2, 8)], 12) == [(8, 12)]
    assert inv.differing(a, [(0, 0), (2, 3), (3, 8)], 12) == [(3, 8)]  # 3-4 and 5-7, merged
    assert inv.differing(a, [(0, 0), (2, 3), (3, 8)], 4) == [(3, 4)]
    assert inv.differing([(1, 0)], [(0, 0), (1, 2)], 6) == [(0, 2)]


def test_log_matching_starts_where_a_pair_is_known_to_agree():
    p = healthy()
    p.replicas[3] = replica(3, log(0, 0, 2, 2), hwm=4)  # differs at 2, below every HWM
    p.pairs = {}
    assert {x.key[:2] for x in inv.log_matching(p)} == {(1, 3), (2, 3)}
    assert p.pairs == {(1, 3): 2, (2, 3): 2}  # what each pair shares, learnt
    assert {x.key[:2] for x in inv.log_matching(p)} == {(1, 3), (2, 3)}  # and used: same answer
    # what a pair is known to share is not compared again, so a caller must lower it when a log
    # changes other than by an append (the simulator does: simulation.invariants._log_changed)
    p.pairs[(1, 3)] = 4
    assert {x.key[:2] for x in inv.log_matching(p)} == {(2, 3)}
    p.pairs[(1, 3)] = 2
    assert {x.key[:2] for x in inv.log_matching(p)} == {(1, 3), (2, 3)}


def test_valid_controller_isr_and_elr():
    assert inv.valid_controller_isr_and_elr(healthy()) == []
    bad = {v.detail for v in inv.valid_controller_isr_and_elr(
        healthy(m=meta(isr=(1, 2), elr=(2, 3, 4), leader=3)))}
    assert any("ELR [2, 3, 4] is not within the replicas" in d for d in bad)
    assert any("[2] in both the ISR and the ELR" in d for d in bad)
    assert any("but the ELR is [2, 3, 4], not empty" in d for d in bad)
    assert any("leader 3 is not in the ISR" in d for d in bad)
    # without ELR the rule about a non-empty ELR at MinISR says nothing
    assert inv.valid_controller_isr_and_elr(healthy(m=meta(isr=(1, 2), elr=(3,), elr_enabled=False))) == []


def test_valid_controller_state():
    assert inv.valid_controller_state(healthy(m=meta(isr=(1, 2), fenced=frozenset({3})))) == []
    (v,) = inv.valid_controller_state(healthy(m=meta(isr=(1,), leader=None, fenced=frozenset({1}))))
    assert "fenced broker(s) [1] in the ISR [1]" in v.detail


def test_valid_controller_state_without_elr_allows_only_the_last_replica_standing():
    # pre-KIP-966: the last ISR member, fenced, stays in the ISR of a leaderless partition
    standing = meta(isr=(1,), leader=None, fenced=frozenset({1}), elr_enabled=False)
    assert inv.valid_controller_state(healthy(m=standing)) == []
    # ... but it may not go on leading (metadata.fence's pre-KIP-966 branch with its test
    # negated keeps the fenced leader: the mutant `metadata.py:fence:cmp-negate`) ...
    (v,) = inv.valid_controller_state(healthy(m=replace(standing, leader=1)))
    assert "leaderless last member (here leader 1, 1 member(s))" in v.detail
    # ... nor stay beside another member: a fenced broker leaves any larger ISR
    (v,) = inv.valid_controller_state(healthy(m=replace(standing, isr=(1, 2), leader=2)))
    assert "fenced broker(s) [1] in the ISR [1, 2]" in v.detail
    assert inv.valid_controller_state(healthy(m=replace(standing, isr=(1, 2), leader=None)))


def test_min_isr_recovery_quorum():
    assert inv.min_isr_recovery_quorum(healthy(m=meta(leader=None, isr=(), last_known_elr=(1, 2)))) == []
    (v,) = inv.min_isr_recovery_quorum(healthy(m=meta(leader=None, isr=(), last_known_elr=(2,))))
    assert "LastKnownELR [2] has 1 member(s), fewer than MinISR 2" in v.detail
    # one AlterPartition from ISR {1,2,3} to {1} puts both dropped replicas in the ELR, as
    # Kafka's controller does; once all three register uncleanly the quorum is three
    assert inv.min_isr_recovery_quorum(healthy(m=meta(leader=None, isr=(), last_known_elr=(1, 2, 3)))) == []
    assert inv.min_isr_recovery_quorum(healthy(m=meta(leader=None, isr=(), elr=(1,)))) == []


def test_every_invariant_is_registered_once_with_its_spec_name():
    assert len(inv.BY_NAME) == len(inv.INVARIANTS) == 11
    for i in inv.INVARIANTS:
        assert i.anomaly == f"invariant:{i.name}" and i.words and i.reads
        assert i.spec == "" or i.spec.startswith(i.name)
    assert {i.name for i in inv.affected({"meta"})} >= {"ValidControllerState", "LeaderCompleteness"}
    assert {i.name for i in inv.affected({"hwm"})} == {"LogMatching"}


# ---- the trace checker -----------------------------------------------------------------------------

def ev(t: float, node, kind: str, **fields) -> dict:
    return {"time": int(t * 1e9), "node": node, "host": f"n{node + 1}" if isinstance(node, int) else "n1",
            "kind": kind, **fields}


def pc(t, leader, epoch, pepoch, isr, elr=(), lkelr=(), reason="election"):
    return ev(t, "controller", "partition-change", topic="t", partition=0, leader=leader,
              leader_epoch=epoch, partition_epoch=pepoch, isr=list(isr), elr=list(elr),
              last_known_elr=list(lkelr), reason=reason)


def start(t, b):
    return [ev(t, b, "broker-start", clean_shutdown=False, broker_epoch=None),
            ev(t + 0.001, "controller", "broker-registered", broker=b, broker_epoch=b, clean=True)]


def opened(t, b, leo, epochs, hwm=0):
    return ev(t, b, "log-open", topic="t", partition=0, log_end_offset=leo, hwm=hwm, epochs=epochs)


def base_trace() -> list[dict]:
    out = start(0.1, 1) + start(0.1, 2) + start(0.1, 3)
    out.append(pc(0.2, 1, 0, 0, (1, 2, 3), reason="create"))
    for b in (1, 2, 3):
        out.append(opened(0.3, b, 0, []))
    out.append(ev(0.31, 1, "become-leader", topic="t", partition=0, leader_epoch=0, leader=1,
                  log_end_offset=0, hwm=0))
    out.append(ev(0.4, 1, "epoch-start", topic="t", partition=0, epoch=0, start_offset=0))
    for b in (2, 3):
        out.append(ev(0.5, b, "epoch-start", topic="t", partition=0, epoch=0, start_offset=0))
    out.append(ev(1.0, 1, "log-progress", topic="t", partition=0, role="leader", leader_epoch=0,
                  log_end_offset=10, hwm=10))
    return out


def ps(t, b, leader, epoch, pepoch, isr, elr=(), lkelr=(), replicas=(1, 2, 3)):
    """A broker's partition-state event: the partition state it now acts on."""
    return ev(t, b, "partition-state", topic="t", partition=0, partition_epoch=pepoch,
              leader=leader, leader_epoch=epoch, isr=list(isr), elr=list(elr),
              last_known_elr=list(lkelr), replicas=list(replicas))


def isr_view(t, b, epoch, isr, committed, pending):
    return ev(t, b, "isr-view", topic="t", partition=0, leader_epoch=epoch, isr=list(isr),
              committed_isr=list(committed), alter_pending=pending)


def viewed_trace() -> list[dict]:
    """base_trace as today's nodes write it: with partition-state, isr-view, replicas."""
    out = base_trace()
    create = next(e for e in out if e["kind"] == "partition-change")
    create["replicas"] = [1, 2, 3]
    at = out.index(create) + 1
    out[at:at] = [ps(0.25, b, 1, 0, 0, (1, 2, 3)) for b in (1, 2, 3)]
    out.insert(out.index(next(e for e in out if e["kind"] == "become-leader")) + 1,
               isr_view(0.31, 1, 0, (1, 2, 3), (1, 2, 3), False))
    return out


def test_a_trace_without_faults_violates_nothing():
    report = check_trace(base_trace(), min_isr=2)
    assert report.violations == [] and report.checks["LeaderCompleteness"] > 0
    # written before the nodes said what they act on: two invariants stay undecided
    assert set(report.undecided) == {"ReplicationQuorumSuperset", "MetadataLogMatching"}
    assert "ReplicationQuorumSuperset" not in report.checks
    report = check_trace(viewed_trace(), min_isr=2)
    assert report.violations == [] and report.undecided == {}
    assert report.checks["ReplicationQuorumSuperset"] > 0 and report.checks["MetadataLogMatching"] > 0


def test_a_trace_decides_replication_quorum_superset_from_isr_views():
    # leader 1 proposes to drop 3 (pending, maximal ISR unchanged): fine
    ok = viewed_trace() + [isr_view(1.1, 1, 0, (1, 2, 3), (1, 2, 3), True)]
    assert check_trace(ok, min_isr=2).violations == []
    # ... but acting on [1, 2] with nothing pending while its committed ISR is [1, 2, 3]
    bad = viewed_trace() + [isr_view(1.1, 1, 0, (1, 2), (1, 2, 3), False)]
    found = [v for v in check_trace(bad, min_isr=2).violations]
    assert {v["name"] for v in found} == {"invariant:ReplicationQuorumSuperset"}
    assert any("lacks controller ISR+ELR member(s) [3]" in v["detail"] for v in found)
    # a view of an earlier leadership says nothing about this one
    stale = viewed_trace() + [isr_view(1.1, 1, 7, (1, 2), (1, 2, 3), False)]
    assert check_trace(stale, min_isr=2).violations == []


def test_a_trace_decides_metadata_log_matching_from_partition_states():
    good = viewed_trace() + [pc(1.1, 1, 0, 1, (1, 2)), ps(1.2, 2, 1, 0, 1, (1, 2))]
    assert check_trace(good, min_isr=2).violations == []
    # broker 2 acts on partition epoch 1 with an ISR the controller never committed there
    bad = viewed_trace() + [pc(1.1, 1, 0, 1, (1, 2)), ps(1.2, 2, 1, 0, 1, (1, 3))]
    (v,) = check_trace(bad, min_isr=2).violations
    assert v["name"] == "invariant:MetadataLogMatching" and "replica 2" in v["detail"]
    # a killed broker acts on nothing: its stale state is forgotten
    gone = viewed_trace() + [
        {"time": int(1.05e9), "process": "nemesis", "type": "info", "f": "start-kill",
         "value": {"nodes": ["n3"]}}]
    gone_events = [e for e in gone if "kind" in e] + [pc(1.1, 1, 0, 1, (1, 2))]
    hist = [e for e in gone if "kind" not in e]
    assert check_trace(gone_events, hist, topic="t", min_isr=2).violations == []


def test_a_trace_holds_a_restarted_follower_to_log_matching_only_once_reconciled():
    # broker 3 restarts; its checkpoint says HWM 10 but its log holds epoch 5 records from an
    # unsynced truncation undone: until a fetch reconciles it, that is no stable prefix
    events = viewed_trace() + [pc(1.9, 1, 0, 1, (1, 2))] + start(2.0, 3) + [
        opened(2.1, 3, 10, [[0, 0], [5, 4]], hwm=10),
        ps(2.1, 3, 1, 0, 1, (1, 2)),
        ev(2.2, 3, "become-follower", topic="t", partition=0, leader_epoch=0, leader=1)]
    assert check_trace(events, min_isr=2).violations == []
    reconciled = events + [ev(2.3, 3, "reconciled", topic="t", partition=0, leader_epoch=0)]
    found = {v["name"] for v in check_trace(reconciled, min_isr=2).violations}
    assert "invariant:LogMatching" in found


def test_a_trace_catches_a_leader_elected_without_the_committed_records():
    events = base_trace() + [
        ev(1.2, 2, "truncate", topic="t", partition=0, from_offset=10, to_offset=4, removed=6,
           reason="high-watermark"),
        pc(1.3, 2, 1, 1, (2, 3)),
        ev(1.4, 2, "become-leader", topic="t", partition=0, leader_epoch=1, leader=2,
           log_end_offset=4, hwm=4)]
    acked = [{"index": 0, "time": int(0.9e9), "process": 0, "type": "ok", "f": "send",
              "partition": 0, "value": 7, "offset": 7, "node": 1, "epoch": 0}]
    report = check_trace(events, acked, topic="t", min_isr=2)
    found = {v["name"] for v in report.violations}
    assert {"invariant:LeaderCandidateCompleteness", "invariant:LeaderCompleteness"} <= found
    lc = next(v for v in report.violations if v["name"] == "invariant:LeaderCompleteness")
    assert "below the true HWM 10" in lc["detail"] and "offsets [7]" in lc["detail"]


def test_a_trace_decides_log_ends_only_where_it_reports_them():
    # broker 3 last reported its log at offset 0 (its epoch-start says it has >= 1 record);
    # the leader commits 10: broker 3's log end is only a lower bound, its candidacy not
    # judged ...
    events = base_trace()
    assert check_trace(events, min_isr=2).violations == []
    # ... until it reports a log end below the true HWM
    events.append(ev(1.5, 3, "log-progress", topic="t", partition=0, role="follower",
                     leader_epoch=0, log_end_offset=3, hwm=3))
    (v,) = check_trace(events, min_isr=2).violations
    assert v["name"] == "invariant:LeaderCandidateCompleteness" and "member 3" in v["detail"]


def test_a_trace_judges_the_fenced_last_replica_standing_by_the_elr_setting():
    events = base_trace() + [
        ev(2.0, "controller", "broker-fenced", broker=1, reason="session-timeout"),
        pc(2.0, None, 1, 1, (1,), reason="fence-last-isr-member")]
    # pre-KIP-966 that is the controller's rule; with ELR on it is not
    assert check_trace(events, min_isr=2, elr_enabled=False).violations == []
    (v,) = check_trace(events, min_isr=2).violations
    assert v["name"] == "invariant:ValidControllerState"
    # a fenced last member that keeps leading breaks the pre-KIP-966 rule too
    kept = base_trace() + [ev(2.0, "controller", "broker-fenced", broker=1, reason="session-timeout"),
                           pc(2.0, 1, 0, 1, (1,), reason="fence")]
    (v,) = check_trace(kept, min_isr=2, elr_enabled=False).violations
    assert v["name"] == "invariant:ValidControllerState"


def batch(n: int, *events: dict) -> list[dict]:
    """Controller events of one call, numbered as the controller numbers them."""
    return [{**e, "batch": n, "batch_size": len(events)} for e in events]


def test_a_trace_never_judges_the_state_inside_a_controller_batch():
    # broker 2 fenced and moved out of the ISR in one call; the two lines are an fsync apart
    # and the leader's log-progress falls between them
    between = ev(2.05, 1, "log-progress", topic="t", partition=0, role="leader", leader_epoch=0,
                 log_end_offset=12, hwm=12)
    fence, shrink = batch(7, ev(2.0, "controller", "broker-fenced", broker=2, reason="session-timeout"),
                          pc(2.1, 1, 0, 1, (1, 3), reason="fence"))
    assert check_trace(viewed_trace() + [fence, between, shrink], min_isr=2).violations == []
    # the same lines without batch numbers (older traces) are judged line by line
    old = [{k: v for k, v in e.items() if k not in ("batch", "batch_size")} for e in (fence, shrink)]
    (v,) = check_trace(viewed_trace() + [old[0], between, old[1]], min_isr=2).violations
    assert v["name"] == "invariant:ValidControllerState"


def test_a_controller_batch_is_judged_by_the_state_it_leaves():
    # the last ISR member fenced and, in the same call, an unclean leader elected: only the
    # end state counts (judged with ELR on, where a fenced broker may never stay) ...
    fenced_last = pc(2.1, None, 1, 1, (1,), reason="fence-last-isr-member")
    elected = pc(2.2, 2, 2, 2, (2,), reason="unclean-election")
    fence = ev(2.0, "controller", "broker-fenced", broker=1, reason="session-timeout")
    found = check_trace(base_trace() + batch(3, fence, fenced_last, elected), min_isr=2).violations
    assert "invariant:ValidControllerState" not in {v["name"] for v in found}
    # ... and an end state with the fenced broker in the ISR is a violation
    (v,) = check_trace(base_trace() + batch(3, fence, fenced_last), min_isr=2).violations
    assert v["name"] == "invariant:ValidControllerState"
    # a batch cut short (its controller died mid-way) is applied when the next one begins
    cut = batch(3, fence, fenced_last, elected)[:2]
    nxt = batch(4, ev(3.0, "controller", "broker-unfenced", broker=1))
    found = check_trace(base_trace() + cut + nxt, min_isr=2).violations
    assert [v["name"] for v in found] == ["invariant:ValidControllerState"]


# ---- results.json ----------------------------------------------------------------------------------

def test_invariant_violations_make_a_run_invalid_unless_allowed(tmp_path):
    line = {"time": 5, "name": "invariant:LeaderCompleteness", "topic": "t", "partition": 0,
            "detail": "leader 2 ...", "recent_steps": [{"time": 1, "node": "n2", "step": "tick"}]}
    (tmp_path / "invariants.jsonl").write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n")
    found, notes, stats = findings(tmp_path, RunConfig())
    assert found["invariant:LeaderCompleteness"][0] == 2 and stats["source"] == "simulation"
    for allow, valid in (([], False), (["invariant:LeaderCompleteness"], True)):
        results = {"valid": True, "anomalies": {}, "notes": [], "stats": {}}
        add_invariants(results, found, notes, stats, allow)
        assert results["valid"] is valid
        assert results["anomalies"]["invariant:LeaderCompleteness"]["count"] == 2
        assert results["anomalies"]["invariant:LeaderCompleteness"]["examples"][0]["recent_steps"]
    results = {"valid": "unknown", "anomalies": {}, "notes": ["no final read"], "stats": {}}
    add_invariants(results, {}, ["checked"], {"source": "simulation"}, [])
    assert results["valid"] == "unknown" and results["notes"] == ["no final read", "checked"]


def test_a_run_folder_with_events_gets_the_trace_check(tmp_path):
    with open(tmp_path / "events.jsonl", "w") as f:
        for e in base_trace():
            f.write(json.dumps(e) + "\n")
    found, notes, stats = findings(tmp_path, RunConfig(min_insync_replicas=2))
    assert found == {} and stats["source"] == "trace" and stats["events"] == len(base_trace())
    assert "not decidable from this trace" in notes[-1]
    assert findings(tmp_path / "nothing-here", RunConfig()) == ({}, [], {})


@pytest.mark.parametrize("name", [i.name for i in inv.INVARIANTS])
def test_harness_config_accepts_every_invariant_in_checker_allow(name):
    from harness.config import KNOWN_ANOMALIES
    assert f"invariant:{name}" in KNOWN_ANOMALIES
