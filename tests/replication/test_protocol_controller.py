"""The Controller state machine driven by its messages (register, heartbeat with log_info,
create-topic, alter-partition) and clock ticks: the balanced recovery example (§5.3.3) of the
KIP-966 protocol description in Jack Vanlightly's kafka-tlaplus repository, step by step, and
the request checks around AlterPartition."""

from __future__ import annotations

from dataclasses import replace

from replication import errors as E
from replication import metadata as md
from replication.config import NodeConfig
from replication.controller import Controller
from replication.messages import (
    AlterPartitionRequest,
    CreateTopicReply,
    CreateTopicRequest,
    ErrorReply,
    HeartbeatReply,
    HeartbeatRequest,
    LogInfo,
    Message,
    PartitionRef,
    RegisterReply,
    RegisterRequest,
    Request,
)
from replication.outputs import Event, Persist, Reply

SESSION_MS = NodeConfig().broker_session_timeout_ms
RECOVERY_MS = NodeConfig().unclean_recovery_timeout_ms
TOPIC_CONFIG = {"min.insync.replicas": "2", "unclean.recovery.strategy": "balanced"}


class Driver:
    """Sends messages to one Controller and keeps its events and broker epochs."""

    def __init__(self) -> None:
        self.c = Controller(NodeConfig())
        self.epochs: dict[int, int] = {}
        self.events: list[tuple[str, dict]] = []
        self.persisted: list[dict] = []

    def _take(self, out: list) -> Message | None:
        reply = None
        for o in out:
            if isinstance(o, Event):
                self.events.append((o.kind, o.fields))
            elif isinstance(o, Persist):
                self.persisted.append(o.record)
            elif isinstance(o, Reply):
                reply = o.msg
        return reply

    def send(self, msg: Request, now: int) -> Message | None:
        return self._take(self.c.handle("tok", msg, now))

    def register(self, b: int, now: int, clean_epoch: int | None = None) -> RegisterReply:
        reply = self.send(RegisterRequest(b, f"h{b}:9092", clean_epoch), now)
        assert isinstance(reply, RegisterReply), reply
        self.epochs[b] = reply.broker_epoch
        return reply

    def heartbeat(self, b: int, now: int, log_info: tuple[LogInfo, ...] = ()) -> HeartbeatReply:
        reply = self.send(HeartbeatRequest(b, self.epochs[b], log_info=log_info), now)
        assert isinstance(reply, HeartbeatReply), reply
        return reply

    def tick(self, now: int) -> None:
        self._take(self.c.tick(now))

    def changes(self) -> list[tuple]:
        return [(f["leader"], tuple(f["isr"]), tuple(f["elr"]), tuple(f["last_known_elr"]))
                for k, f in self.events if k == "partition-change"]

    def kinds(self, kind: str, *, batches: bool = False) -> list[dict]:
        """Events of a kind; without their batch numbers unless `batches`."""
        return [f if batches else {x: v for x, v in f.items() if x not in ("batch", "batch_size")}
                for k, f in self.events if k == kind]

    def view(self) -> tuple:
        s = self.c.partitions[("t", 0)]
        return (s.leader, s.isr, s.elr, s.last_known_elr)


def _running_cluster(strategy: str = "balanced") -> Driver:
    d = Driver()
    for b in (1, 2, 3):
        d.register(b, now=0)
        assert d.heartbeat(b, now=0).fenced is False
    reply = d.send(CreateTopicRequest("t", 1, 3, {**TOPIC_CONFIG, "unclean.recovery.strategy": strategy}), now=0)
    assert reply == CreateTopicReply(1)
    assert d.view() == (1, (1, 2, 3), (), ())
    d.events.clear()
    return d


def _log_info(epoch: int, end_offset: int) -> tuple[LogInfo, ...]:
    return (LogInfo("t", 0, epoch, end_offset),)


ASKED = (PartitionRef("t", 0),)  # a heartbeat reply asking for partition t-0's log end


def test_seed_000_balanced_recovery_example() -> None:
    # 1. Leader=1, ISR=[1,2,3]; replica LEOs 15, 12, 10 (HWMs 10, 8, 8), all in epoch 0.
    d = _running_cluster()
    # 2. A power outage: no more heartbeats. The controller fences the brokers one by one.
    d.tick(now=SESSION_MS + 1)
    assert [f["broker"] for f in d.kinds("broker-fenced")] == [1, 2, 3]
    assert d.changes() == [
        (2, (2, 3), (), ()),      # 3. broker 1 fenced, replica 2 elected
        (3, (3,), (2,), ()),      # 4. broker 2 fenced, replica 3 elected, 2 into the ELR
        (None, (), (2, 3), ()),   # 5. broker 3 fenced: NoLeader
    ]
    d.events.clear()
    # 6. Broker 1 (lost committed data) registers with an empty epoch: it was no ELR member.
    d.register(1, now=SESSION_MS + 100)
    assert d.kinds("broker-registered")[-1]["clean"] is False
    assert d.changes() == [] and d.view() == (None, (), (2, 3), ())
    # 7. Broker 2 (no loss) registers uncleanly: ELR -> LastKnownELR.
    d.register(2, now=SESSION_MS + 110)
    assert d.view() == (None, (), (3,), (2,))
    # 8. Broker 3 (lost committed data) the same.
    d.register(3, now=SESSION_MS + 120)
    assert d.view() == (None, (), (), (2, 3))
    assert d.changes()[-1] == (None, (), (), (2, 3))
    # 9. No clean election is possible: broker 1 is unfenced but no candidate; the controller
    #    asks the LastKnownELR members (only them) for their log ends.
    reply = d.heartbeat(1, now=SESSION_MS + 200)
    assert reply.fenced is False and reply.log_info_requests == ()
    assert d.view() == (None, (), (), (2, 3))
    reply = d.heartbeat(2, now=SESSION_MS + 210)
    assert reply.log_info_requests == ASKED
    reply = d.heartbeat(3, now=SESSION_MS + 220)
    assert reply.log_info_requests == ASKED
    # Balanced waits for every member: with broker 2's answer alone, still no leader.
    d.heartbeat(2, now=SESSION_MS + 300, log_info=_log_info(0, 12))
    d.tick(now=SESSION_MS + 5000)
    assert d.view() == (None, (), (), (2, 3)) and d.kinds("unclean-recovery") == []
    # 10. Broker 3 answers (it lost its suffix: LEO 6): replica 2 has the highest epoch and
    #     offset and is elected; the recovery is reported as potential data loss.
    d.heartbeat(3, now=SESSION_MS + 5010, log_info=_log_info(0, 6))
    assert d.view() == (2, (2,), (), (3,))
    # the recovery's election and its report are one call's change: one batch of two events
    (batched,) = d.kinds("unclean-recovery", batches=True)
    change = d.kinds("partition-change", batches=True)[-1]
    assert (batched["batch"], batched["batch_size"]) == (change["batch"], 2)
    assert change["batch"] > d.kinds("partition-change", batches=True)[-2]["batch"]
    (rec,) = d.kinds("unclean-recovery")
    assert rec == {"topic": "t", "partition": 0, "strategy": "balanced", "leader": 2,
                   "leader_epoch": 4, "complete": True, "potential_data_loss": True,
                   "candidates": [{"broker": 2, "epoch": 0, "end_offset": 12},
                                  {"broker": 3, "epoch": 0, "end_offset": 6}]}
    assert d.changes()[-1] == (2, (2,), (), (3,))
    # Afterwards replica 3 catches up from 2 and rejoins: MinISR reached, LastKnownELR cleared.
    s = d.c.partitions[("t", 0)]
    reply = d.send(AlterPartitionRequest(2, d.epochs[2], "t", 0, s.leader_epoch, s.partition_epoch, (2, 3)),
                   now=SESSION_MS + 5100)
    assert not isinstance(reply, ErrorReply), reply
    assert d.view() == (2, (2, 3), (), ())


def test_balanced_recovery_prefers_higher_epoch_over_longer_log() -> None:
    d = _running_cluster()
    d.tick(now=SESSION_MS + 1)
    for b in (2, 3):
        d.register(b, now=SESSION_MS + 10)
        d.heartbeat(b, now=SESSION_MS + 20)
    d.heartbeat(2, now=SESSION_MS + 30, log_info=_log_info(0, 50))
    d.heartbeat(3, now=SESSION_MS + 40, log_info=_log_info(2, 20))
    assert d.view()[0] == 3


def test_replayed_metadata_log_rebuilds_the_same_state() -> None:
    d = _running_cluster()
    d.tick(now=SESSION_MS + 1)
    d.register(2, now=SESSION_MS + 10)
    fresh = Controller(NodeConfig())
    for record in d.persisted:
        fresh.replay(record, now=0)
    assert fresh.partitions == d.c.partitions
    assert {b: i.fenced for b, i in fresh.brokers.items()} == {b: i.fenced for b, i in d.c.brokers.items()}


def _alter(d: Driver, isr: tuple[int, ...], now: int, **override) -> Message | None:
    s = d.c.partitions[("t", 0)]
    msg = AlterPartitionRequest(s.leader, d.epochs[s.leader], "t", 0, s.leader_epoch, s.partition_epoch, isr)
    return d.send(replace(msg, **override), now)


def test_alter_partition_checks_epochs_and_fencing() -> None:
    d = _running_cluster()
    assert _alter(d, (1, 2), now=1, partition_epoch=7).error == E.INVALID_UPDATE_VERSION
    assert _alter(d, (1, 2), now=1, leader_epoch=7).error == E.FENCED_LEADER_EPOCH
    assert _alter(d, (1, 2), now=1, broker=2, broker_epoch=d.epochs[2]).error == E.NOT_LEADER
    assert _alter(d, (1, 2), now=1, broker_epoch=999).error == E.STALE_BROKER_EPOCH
    assert _alter(d, (2, 3), now=1).error == E.INVALID_REQUEST
    assert _alter(d, (1, 2), now=1).state.isr == (1, 2)
    # Unclean Exclusion: a fenced replica is not let back into the ISR.
    d.tick(now=SESSION_MS + 1)  # everyone fenced; heartbeat 1 back alone
    d.heartbeat(1, now=SESSION_MS + 2)
    assert d.view()[0] == 1
    assert _alter(d, (1, 3), now=SESSION_MS + 3).error == E.INELIGIBLE_REPLICA


def _lkelr_2_3() -> Driver:
    """Everyone fenced, then 2 and 3 back with unclean registrations: LastKnownELR [2, 3]."""
    d = _running_cluster()
    d.tick(now=SESSION_MS + 1)
    for b in (2, 3):
        d.register(b, now=SESSION_MS + 10)
    for b in (2, 3):
        assert d.heartbeat(b, now=SESSION_MS + 20).log_info_requests
    assert d.view() == (None, (), (), (2, 3))
    return d


def test_balanced_recovery_waits_when_the_best_log_is_fenced() -> None:
    """Broker 2 answers with the best log, then its session times out before broker 3
    answers: electing 3 (the worse log) would throw away records only 2 holds."""
    d = _lkelr_2_3()
    d.heartbeat(2, now=SESSION_MS + 30, log_info=_log_info(0, 12))
    d.heartbeat(3, now=2 * SESSION_MS + 20)
    d.tick(now=2 * SESSION_MS + 100)
    assert d.c.brokers[2].fenced and not d.c.brokers[3].fenced
    d.heartbeat(3, now=2 * SESSION_MS + 110, log_info=_log_info(0, 6))
    assert d.view() == (None, (), (), (2, 3))
    # Broker 2 comes back: it is elected.
    d.heartbeat(2, now=2 * SESSION_MS + 200)
    assert d.view() == (2, (2,), (), (3,))


def test_balanced_recovery_asks_a_re_registered_broker_again() -> None:
    """Broker 2 answers, then restarts after a power loss (a new registration): its old
    answer describes a log that may be gone, so it must be asked again."""
    d = _lkelr_2_3()
    d.heartbeat(2, now=SESSION_MS + 30, log_info=_log_info(0, 12))
    d.register(2, now=SESSION_MS + 40)
    assert d.heartbeat(2, now=SESSION_MS + 50).log_info_requests == ASKED
    d.heartbeat(3, now=SESSION_MS + 60, log_info=_log_info(0, 6))
    assert d.view() == (None, (), (), (2, 3))
    d.heartbeat(2, now=SESSION_MS + 70, log_info=_log_info(-1, 0))
    assert d.view() == (3, (3,), (), (2,))


def test_proactive_recovery_does_not_wait_for_fenced_elr_members() -> None:
    """Proactive (availability first): the ELR [2, 3] is fenced, so the controller asks the
    replicas it can reach and elects the best of them, reporting potential data loss."""
    d = Driver()
    for b in (1, 2, 3):
        d.register(b, now=0)
        d.heartbeat(b, now=0)
    d.send(CreateTopicRequest("t", 1, 3, {"min.insync.replicas": "2", "unclean.recovery.strategy": "proactive"}),
           now=0)
    d.tick(now=SESSION_MS + 1)
    assert d.view() == (None, (), (2, 3), ())
    d.register(1, now=SESSION_MS + 10)
    assert d.heartbeat(1, now=SESSION_MS + 20).log_info_requests == ASKED
    d.heartbeat(1, now=SESSION_MS + 30, log_info=_log_info(0, 4))
    assert d.view() == (1, (1,), (), ())
    (rec,) = d.kinds("unclean-recovery")
    assert (rec["strategy"], rec["leader"], rec["complete"], rec["potential_data_loss"]) == \
        ("proactive", 1, True, True)


def test_manual_recovery_reports_and_never_elects() -> None:
    """Manual: once the ELR is empty (2 and 3 re-registered uncleanly) the controller reports
    the partition once, asks nobody for log ends, ignores answers and elects no one."""
    d = _running_cluster("manual")
    d.tick(now=SESSION_MS + 1)
    for b in (2, 3):
        d.register(b, now=SESSION_MS + 10)
    assert d.view() == (None, (), (), (2, 3)) and d.kinds("unclean-recovery") == []
    for b in (2, 3):
        assert d.heartbeat(b, now=SESSION_MS + 20).log_info_requests == ()
    assert d.kinds("unclean-recovery") == [{
        "topic": "t", "partition": 0, "strategy": "manual", "leader": None, "leader_epoch": 3,
        "candidates": [], "complete": False, "potential_data_loss": False,
        "waiting_for_operator": True}]
    for now in range(SESSION_MS + 100, 2 * SESSION_MS, 1000):
        for b in (2, 3):
            d.heartbeat(b, now=now, log_info=_log_info(0, 12))
        d.tick(now=now)
    assert d.view() == (None, (), (), (2, 3)) and d.c.recoveries == {}
    assert len(d.kinds("unclean-recovery")) == 1 and d.kinds("unclean-election") == []


def test_proactive_recovery_elects_a_partial_answer_only_after_the_timeout() -> None:
    """Proactive: 1 and 2 are unfenced, 3 (the last ELR member) is not. Broker 2 answers,
    broker 1 never does: the controller waits unclean.recovery.timeout.ms from the start of
    the recovery, then elects 2 and reports the recovery as incomplete."""
    d = _running_cluster("proactive")
    d.tick(now=SESSION_MS + 1)
    t0 = SESSION_MS + 20
    for b in (1, 2):
        d.register(b, now=SESSION_MS + 10)
    for b in (1, 2):
        assert d.heartbeat(b, now=t0).log_info_requests == ASKED
    assert d.view() == (None, (), (3,), (2,))
    d.heartbeat(2, now=t0 + 10, log_info=_log_info(0, 12))
    d.heartbeat(1, now=t0 + 20)
    d.tick(now=t0 + RECOVERY_MS - 1)
    assert d.view()[0] is None and d.kinds("unclean-recovery") == []
    d.tick(now=t0 + RECOVERY_MS)
    assert d.view()[0] == 2
    (rec,) = d.kinds("unclean-recovery")
    assert (rec["strategy"], rec["leader"], rec["complete"], rec["potential_data_loss"]) == \
        ("proactive", 2, False, True)
    assert rec["candidates"] == [{"broker": 2, "epoch": 0, "end_offset": 12}]


def test_last_leader_recovery_elects_the_last_leader_without_asking() -> None:
    """last-leader, Kafka 4.x's recovery (PartitionChangeBuilder with
    useLastKnownLeaderInBalancedRecovery): the same outage as the balanced example above, but
    LastKnownELR holds only broker 3, the leader when the ISR emptied; the unclean
    registrations of 2 and 3 empty the ELR without adding to it, and 3 is elected, unclean,
    as soon as it is back, with no log end asked. Balanced, above, elects 2 (12 records
    against 3's 6)."""
    d = _running_cluster("last-leader")
    d.tick(now=SESSION_MS + 1)
    assert d.changes() == [(2, (2, 3), (), ()), (3, (3,), (2,), ()), (None, (), (2, 3), (3,))]
    for b in (1, 2):
        d.register(b, now=SESSION_MS + 10)
        assert d.heartbeat(b, now=SESSION_MS + 20).log_info_requests == ()
    assert d.view() == (None, (), (3,), (3,))
    d.register(3, now=SESSION_MS + 30)
    assert d.view() == (None, (), (), (3,))
    assert d.heartbeat(3, now=SESSION_MS + 40).log_info_requests == ()
    assert d.view() == (3, (3,), (), ())
    assert d.changes()[-1] == (3, (3,), (), ())
    assert d.kinds("partition-change")[-1]["reason"] == "last-leader-election"
    assert [e["leader"] for e in d.kinds("unclean-election")] == [3]
    assert d.kinds("unclean-recovery") == [] and d.c.recoveries == {}


def test_last_leader_recovery_is_off_without_the_elr() -> None:
    """As in Kafka, the last leader is remembered only with the ELR on: without it the last
    ISR member is never removed (the last replica standing) and leads again when back."""
    d = Driver()
    for b in (1, 2, 3):
        d.register(b, now=0)
        d.heartbeat(b, now=0)
    d.send(CreateTopicRequest("t", 1, 3, {**TOPIC_CONFIG, "unclean.recovery.strategy": "last-leader",
                                          "eligible.leader.replicas.enable": "false"}), now=0)
    d.tick(now=SESSION_MS + 1)
    assert d.view() == (None, (3,), (), ())
    # and were a state with no ISR, no ELR and one LastKnownELR member reached, nobody is named
    rules = md.Rules(min_isr=2, elr_enabled=False, last_leader=True)
    empty = md.PartitionState("t", 0, (1, 2, 3), None, isr=(), elr=(), last_known_elr=(3,))
    assert md.elect_if_leaderless(empty, rules, unfenced={1, 2, 3}) is None


def test_a_topics_config_is_made_once_and_again_when_its_overrides_change():
    """Controller.topic_config keeps the config it made for a topic (every tick asks for each
    partition's recovery strategy) while the topic's overrides stay equal, and makes a new
    one when a replayed topic record changes them; a topic without overrides gets the
    controller's own settings."""
    c = Controller(NodeConfig())
    c.replay({"type": "topic", "topic": "t", "config": TOPIC_CONFIG}, 0)
    first = c.topic_config("t")
    assert c.topic_config("t") is first and c.strategy("t") == "balanced"
    assert c.rules("t").min_isr == 2
    c.replay({"type": "topic", "topic": "t", "config": {**TOPIC_CONFIG, "min.insync.replicas": "3",
                                                        "unclean.recovery.strategy": "proactive"}}, 0)
    assert c.rules("t").min_isr == 3 and c.strategy("t") == "proactive"
    c.topics["t"]["min.insync.replicas"] = "1"  # changed in place: seen too
    assert c.rules("t").min_isr == 1
    assert c.topic_config("other").min_insync_replicas == NodeConfig().min_insync_replicas
