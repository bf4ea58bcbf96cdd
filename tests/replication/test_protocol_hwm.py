"""A ten-step high-watermark timeline T1-T10, replayed on Replica objects step by step: the
leader learns each follower's LEO from its fetch offset and moves the HWM to the least LEO of
the ISR (a record is committed once every in-sync replica has it: Kafka's documentation,
"Replication"), and with KIP-966 only while the ISR has at least MinISR members.

The leader R1 and the followers R2, R3 are real `Replica`s over `MemoryLog`s; the fetch
requests are built with exactly the offsets the timeline gives, and their replies are handed
to the followers as the runtime would. The timeline's fetches return at once (`wait: False`):
Kafka would park an empty fetch until data arrives, which would merge T5 into T7/T8."""

from __future__ import annotations

from dataclasses import replace

from support.memory_log import MemoryLog

from replication import errors as E
from replication.config import NodeConfig
from replication.messages import (
    AlterPartitionReply,
    AlterPartitionRequest,
    ConsumerFetchReply,
    ConsumerFetchRequest,
    ErrorReply,
    FetchRequest,
    Message,
    ProduceReply,
)
from replication.metadata import PartitionState
from replication.outputs import Reply, Send
from replication.partition import ALTER_RETRY_MS, Replica

CONFIG = NodeConfig(min_insync_replicas=2)
STATE = PartitionState("A", 0, replicas=(1, 2, 3), leader=1, leader_epoch=0, isr=(1, 2, 3))


def _replica(broker: int) -> Replica:
    r = Replica(broker, "A", 0, MemoryLog())
    r.on_metadata(STATE, CONFIG, now=0)
    return r


def _fetch(leader: Replica, follower: Replica, offset: int, now: int) -> list:
    """A follower FetchRequest(offset) as the timeline states it; returns the leader's outputs."""
    request = FetchRequest("A", 0, replica=follower.broker_id, offset=offset,
                           last_fetched_epoch=follower.log.latest_epoch(),
                           leader_epoch=leader.leader_epoch, wait=False)
    out = leader.fetch(("fetch", follower.broker_id), request, now)
    for o in out:
        if isinstance(o, Reply) and o.token == ("fetch", follower.broker_id):
            follower.on_fetch_response(request, o.msg, now)
    return out


def _values(replica: Replica) -> list[int]:
    return [int(r.value) for r in replica.log.read(0, 100)]


def _leos(leader: Replica) -> tuple[int, int, int]:
    return (leader.log.end_offset, leader.follower_leo[2], leader.follower_leo[3])


def _consumer_fetch(leader: Replica, now: int, leader_epoch: int | None = None) -> Message:
    """A consumer's fetch from offset 0; returns the leader's reply."""
    (reply,) = leader.fetch("consumer", ConsumerFetchRequest("A", 0, 0, leader_epoch=leader_epoch), now)
    return reply.msg


def _consume(leader: Replica, now: int) -> list[int]:
    return [int(v) for _o, v in _consumer_fetch(leader, now).records]


def _acks(out: list, token: object) -> list[Message]:
    return [o.msg for o in out if isinstance(o, Reply) and o.token == token]


def test_seed_002_hwm_timeline_t1_to_t10() -> None:
    r1, r2, r3 = _replica(1), _replica(2), _replica(3)
    assert (r1.role, r2.role, r3.role) == ("leader", "follower", "follower")

    # T1: the producer publishes 0,1,2 (acks=all, so the ack waits for the HWM).
    out = r1.produce("p1", [b"0", b"1", b"2"], "all", now=1)
    assert _acks(out, "p1") == []
    assert _values(r1) == [0, 1, 2] and _values(r2) == [] and _values(r3) == []
    assert r1.hwm == 0 and _leos(r1) == (3, 0, 0)

    # T2: R2 fetches from 0 and gets [0,1,2]; the leader does not count them yet.
    _fetch(r1, r2, 0, now=2)
    assert _values(r2) == [0, 1, 2] and _values(r3) == []
    assert r1.hwm == 0 and _leos(r1) == (3, 0, 0)

    # T3: R3 the same.
    _fetch(r1, r3, 0, now=3)
    assert _values(r3) == [0, 1, 2]
    assert r1.hwm == 0 and _leos(r1) == (3, 0, 0)

    # T4: a consumer fetching from 0 gets nothing: the HWM is 0.
    assert _consume(r1, now=4) == []

    # T5: R2 fetches from 3: nothing to return, but now R2's LEO is 3. R3 still holds the HWM.
    out = _fetch(r1, r2, 3, now=5)
    assert _acks(out, ("fetch", 2))[0].records == ()
    assert r1.hwm == 0 and _leos(r1) == (3, 3, 0)

    # T6: R3 fetches from 3: every ISR member has LEO 3, the HWM moves to 3, the ack goes out.
    out = _fetch(r1, r3, 3, now=6)
    assert r1.hwm == 3 and _leos(r1) == (3, 3, 3)
    assert _acks(out, "p1") == [ProduceReply(0, 0, 1)]

    # T7: two more records, 3 and 4.
    r1.produce("p2", [b"3", b"4"], "all", now=7)
    assert _values(r1) == [0, 1, 2, 3, 4] and _values(r2) == [0, 1, 2] and _values(r3) == [0, 1, 2]
    assert r1.hwm == 3 and _leos(r1) == (5, 3, 3)

    # T8: R2 fetches from 3 and gets [3,4]; its LEO on the leader is still 3.
    out = _fetch(r1, r2, 3, now=8)
    assert [r.offset for r in _acks(out, ("fetch", 2))[0].records] == [3, 4]
    assert _values(r2) == [0, 1, 2, 3, 4]
    assert r1.hwm == 3 and _leos(r1) == (5, 3, 3)

    # T9: R2 fetches from 5: R2's LEO is 5, but R3 (in sync, LEO 3) holds the HWM at 3.
    # (The seed prints R2's log as [0,1,2] here; R2 got [3,4] at T8, so it holds all five.)
    out = _fetch(r1, r2, 5, now=9)
    assert r1.hwm == 3 and _leos(r1) == (5, 5, 3)
    assert _acks(out, "p2") == []
    assert _values(r2) == [0, 1, 2, 3, 4] and _values(r3) == [0, 1, 2]

    # T10: the consumer gets the committed log [0,1,2] and nothing above the HWM.
    assert _consume(r1, now=10) == [0, 1, 2]
    # The followers learnt the HWM from the fetch replies, never above their own LEO.
    assert r2.hwm == 3 and r3.hwm == 3


def test_hwm_frozen_below_min_isr_until_the_expansion_is_committed() -> None:
    """KIP-966 rule 1: with the ISR shrunk to the leader alone the HWM stays put although the
    ISR's minimum LEO (the leader's own) moved. A caught-up follower the leader proposes to add
    ("maximal ISR") does not count towards MinISR until the controller commits it: found by a
    safe-config chaos run, where the controller refused a fenced follower after the HWM had
    already advanced with it, and the leader's power loss then took records consumers had read."""
    r1, r2 = _replica(1), _replica(2)
    shrunk = PartitionState("A", 0, (1, 2, 3), leader=1, leader_epoch=0, partition_epoch=1, isr=(1,))
    r1.on_metadata(shrunk, CONFIG, now=1)
    assert r1.produce("p", [b"0"], "all", now=2)[0].msg == ErrorReply(E.NOT_ENOUGH_REPLICAS)
    assert r1.produce("p1", [b"0"], "1", now=2)[0].msg.offset == 0
    assert r1.hwm == 0 and r1.log.end_offset == 1
    _fetch(r1, r2, 0, now=3)
    assert r1.hwm == 0
    out = _fetch(r1, r2, 1, now=4)
    (alter,) = [o.msg for o in out if getattr(o, "dest", None) == "controller"]
    assert isinstance(alter, AlterPartitionRequest) and alter.isr == (1, 2)
    assert r1.isr == (1, 2) and r1.hwm == 0, "a proposed member must not release the HWM"
    committed = PartitionState("A", 0, (1, 2, 3), leader=1, leader_epoch=0, partition_epoch=2, isr=(1, 2))
    r1.on_alter_response(AlterPartitionReply(committed), now=5)
    assert r1.hwm == 1


def test_refused_expansion_never_releases_the_hwm() -> None:
    r1, r2 = _replica(1), _replica(2)
    shrunk = PartitionState("A", 0, (1, 2, 3), leader=1, leader_epoch=0, partition_epoch=1, isr=(1,))
    r1.on_metadata(shrunk, CONFIG, now=1)
    r1.produce("p1", [b"0"], "1", now=2)
    _fetch(r1, r2, 0, now=3)
    _fetch(r1, r2, 1, now=4)
    r1.on_alter_response(ErrorReply(E.INELIGIBLE_REPLICA, state=shrunk), now=5)
    assert r1.isr == (1,) and r1.hwm == 0


def test_hwm_below_min_isr_advances_when_elr_disabled() -> None:
    """Pre-KIP-966 (`eligible.leader.replicas.enable=false`): the HWM follows the ISR alone."""
    config = NodeConfig(min_insync_replicas=2, eligible_leader_replicas_enable=False)
    r1 = Replica(1, "A", 0, MemoryLog())
    r1.on_metadata(PartitionState("A", 0, (1, 2, 3), leader=1, isr=(1,)), config, now=0)
    r1.produce("p1", [b"0"], "1", now=1)
    assert r1.hwm == 1


def test_consumer_fetch_checks_the_leader_epoch_and_the_new_leaders_hwm() -> None:
    """KIP-320 and the new-leader rule: R2 holds [0,1,2] from epoch 0 (its HWM still 0) and
    becomes leader in epoch 1, so its epoch starts at 3. Until R3 has fetched up to 3 the HWM
    lags and reads are refused, else consumers could miss what R1 had committed."""
    log = MemoryLog()
    log.append(0, [b"0", b"1", b"2"], 0)
    r2, r3 = Replica(2, "A", 0, log), _replica(3)
    epoch1 = PartitionState("A", 0, (1, 2, 3), leader=2, leader_epoch=1, partition_epoch=1, isr=(2, 3))
    r2.on_metadata(epoch1, CONFIG, now=1)
    r3.on_metadata(epoch1, CONFIG, now=1)
    assert (r2.role, r2.epoch_start, r2.hwm) == ("leader", 3, 0)
    assert _consumer_fetch(r2, now=2, leader_epoch=0) == ErrorReply(E.FENCED_LEADER_EPOCH)
    assert _consumer_fetch(r2, now=2, leader_epoch=2) == ErrorReply(E.UNKNOWN_LEADER_EPOCH)
    assert _consumer_fetch(r2, now=2, leader_epoch=1) == ErrorReply(E.OFFSET_NOT_AVAILABLE, hwm=0)
    _fetch(r2, r3, 0, now=3)
    assert r2.hwm == 0 and _consumer_fetch(r2, now=3).error == E.OFFSET_NOT_AVAILABLE
    _fetch(r2, r3, 3, now=4)
    assert r2.hwm == 3
    assert _consumer_fetch(r2, now=5, leader_epoch=1) == \
        ConsumerFetchReply(((0, "0"), (1, "1"), (2, "2")), hwm=3, log_end_offset=3, leader_epoch=1, node=2)
    assert _consumer_fetch(r2, now=5, leader_epoch=0) == ErrorReply(E.FENCED_LEADER_EPOCH)


def test_acks_all_fails_as_appended_when_the_committed_isr_drops_below_min_isr() -> None:
    """The followers stop fetching: the leader proposes ISR [1] after replica.lag.time.max.ms,
    keeps the waiting acks=all request until the controller commits the shrink, then fails it
    with NOT_ENOUGH_REPLICAS_AFTER_APPEND marked `appended` (the client's outcome: unknown)."""
    r1, lag = _replica(1), CONFIG.replica_lag_time_max_ms
    assert r1.produce("p", [b"0"], "all", now=lag) == []  # its deadline is far beyond lag + 3
    out = r1.tick(now=lag + 2)
    (alter,) = [o.msg for o in out if getattr(o, "dest", None) == "controller"]
    assert alter.isr == (1,) and _acks(out, "p") == []
    assert r1.isr == (1, 2, 3) and len(r1.pending) == 1, "a removal waits for the commit"
    shrunk = PartitionState("A", 0, (1, 2, 3), leader=1, leader_epoch=0, partition_epoch=1, isr=(1,))
    out = r1.on_alter_response(AlterPartitionReply(shrunk), now=lag + 3)
    assert _acks(out, "p") == [ErrorReply(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, appended=True)]
    assert r1.pending == [] and r1.hwm == 0
    assert E.NOT_ENOUGH_REPLICAS_AFTER_APPEND not in E.DEFINITE


def test_without_elr_a_shrink_below_min_isr_moves_the_hwm_but_acknowledges_nothing() -> None:
    """Disagreement 6 of docs/differential.md: both followers paused, the controller fences
    them and the leader learns ISR [1]. Without ELR its HWM then jumps to its own log end,
    and the model acknowledged every acks=all request waiting there: records on the leader
    alone, lost at the next unclean election (the validation campaign's unclean-election
    cell, six of seven real runs). Kafka answers them NOT_ENOUGH_REPLICAS_AFTER_APPEND
    (Partition.checkEnoughReplicasReachOffset checks MinISR when the HWM passes a request)."""
    config = replace(CONFIG, eligible_leader_replicas_enable=False)
    r1, r2, r3 = _replica(1), _replica(2), _replica(3)
    r1.on_metadata(STATE, config, now=0)
    r1.produce("p0", [b"0"], "all", now=1)
    _fetch(r1, r2, 0, now=2)
    _fetch(r1, r3, 0, now=2)
    out = _fetch(r1, r3, 1, now=3) + _fetch(r1, r2, 1, now=3)
    assert _acks(out, "p0") == [ProduceReply(0, 0, 1)] and r1.hwm == 1
    assert r1.produce("p1", [b"1"], "all", now=4) == []  # the followers are paused from here
    one = PartitionState("A", 0, (1, 2, 3), leader=1, leader_epoch=0, partition_epoch=2, isr=(1,))
    out = r1.on_metadata(one, config, now=5)
    assert r1.hwm == 2, "without ELR the HWM follows the ISR down to the leader"
    assert _acks(out, "p1") == [ErrorReply(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, appended=True)]
    assert r1.pending == []


def _sent(outputs: list) -> list:
    return [o.msg for o in outputs if isinstance(o, Send) and o.dest == "controller"]


def _proposing_follower_2() -> tuple[Replica, PartitionState]:
    """Leader 1 with committed ISR {1}, its AlterPartition adding follower 2 just sent."""
    r1, r2 = _replica(1), _replica(2)
    shrunk = PartitionState("A", 0, (1, 2, 3), leader=1, leader_epoch=0, partition_epoch=1, isr=(1,))
    r1.on_metadata(shrunk, CONFIG, now=1)
    r1.produce("p1", [b"0"], "1", now=2)
    _fetch(r1, r2, 0, now=3)
    _fetch(r1, r2, 1, now=4)
    assert r1.alter_in_flight and r1.isr == (1, 2)
    return r1, shrunk


def test_stale_metadata_keeps_a_proposed_follower_in_the_maximal_isr() -> None:
    """Found by the protocol invariants in a simulated safe-config run (ReplicationQuorum-
    Superset): while the leader's AlterPartition adding follower 2 was in flight, a heartbeat
    reply carrying the older metadata reset the leader's ISR to the committed one and dropped
    follower 2, although the controller went on to commit it. Until the answer arrives the
    leader must keep counting the proposed follower for its HWM (Kafka's maximal ISR)."""
    r1, shrunk = _proposing_follower_2()
    r1.on_metadata(shrunk, CONFIG, now=5)  # the heartbeat reply, older than the proposal
    assert r1.isr == (1, 2), "a stale heartbeat dropped the proposed follower"
    assert r1.hwm == 0  # still not counted towards MinISR
    r1.on_alter_response(AlterPartitionReply(replace(shrunk, partition_epoch=2, isr=(1, 2))), now=6)
    assert r1.isr == (1, 2) and r1.hwm == 1 and not r1.adding


def test_a_failed_alterpartition_send_keeps_the_proposed_follower_and_is_sent_again() -> None:
    """Found by ReplicationQuorumSuperset in the mutation campaign's baseline (safe/reach,
    seed 39): the AlterPartition's connection closed after the controller committed the
    addition, and the leader dropped the proposed follower at once, computing its HWM without
    a member the controller held in the ISR. As Kafka's AlterPartition manager does, the
    proposal stays pending (the maximal ISR) and is sent again; metadata newer than the
    proposal ends it."""
    r1, shrunk = _proposing_follower_2()
    r1.on_alter_failed(now=5)
    assert r1.alter_in_flight and r1.isr == (1, 2), "a failed send dropped the proposed follower"
    r1.on_metadata(shrunk, CONFIG, now=6)  # a heartbeat reply: the proposal's own epoch
    assert r1.isr == (1, 2)
    assert _sent(r1.tick(now=5 + ALTER_RETRY_MS - 1)) == []
    (again,) = _sent(r1.tick(now=5 + ALTER_RETRY_MS))
    assert (again.isr, again.partition_epoch) == ((1, 2), 1)
    r1.on_alter_failed(now=200)
    r1.on_metadata(replace(shrunk, partition_epoch=2, isr=(1, 2)), CONFIG, now=210)
    assert not r1.alter_in_flight and r1.isr == (1, 2) and r1.hwm == 1
    assert _sent(r1.tick(now=400)) == []


def test_newer_metadata_without_the_follower_ends_a_failed_proposal() -> None:
    """The twin: the controller moved on without the addition (another change took the
    partition epoch the proposal was made at), so the leader acts on what was committed."""
    r1, shrunk = _proposing_follower_2()
    r1.on_alter_failed(now=5)
    r1.on_metadata(replace(shrunk, partition_epoch=2, isr=(1,)), CONFIG, now=6)
    assert not r1.alter_in_flight and r1.isr == (1,) and not r1.adding
    assert _sent(r1.tick(now=5 + ALTER_RETRY_MS)) == []
