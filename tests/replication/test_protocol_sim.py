"""Seed scenarios end to end in the deterministic simulator: controller, brokers and replicas
exchanging their real messages, `MemoryLog`s losing their unflushed suffix on power loss.

Covers Kafka's striped replica placement, the last-replica-standing loss without the ELR and
its absence with the ELR (Jack Vanlightly's post "Kafka KIP-966 - Fixing the Last Replica
Standing issue"), the balanced recovery (§5.3.3) of the KIP-966 protocol description in his
kafka-tlaplus repository, and the alternative
behaviours a campaign compares (acks=1, unclean election, HWM truncation, no unclean-shutdown
detection, local-first ISR updates, leader-epoch truncation)."""

from __future__ import annotations

from dataclasses import replace

from support.protocol_sim import Sim

from replication import errors as E
from replication.config import NodeConfig
from replication.messages import AlterPartitionRequest, ErrorReply, ProduceReply, ProduceRequest
from replication.outputs import Reply, Send

BASE = NodeConfig(min_insync_replicas=2)


def _sim(**overrides) -> Sim:
    sim = Sim(3, replace(BASE, **overrides))
    sim.create_topic("t", 1, 3)
    return sim


def _view(sim: Sim) -> tuple:
    s = sim.state()
    return (s.leader, s.isr, s.elr, s.last_known_elr)


def _log(sim: Sim, broker: int) -> list[str]:
    log = sim.logs[(broker, "t", 0)]
    return [r.value.decode() for r in log.read(0, log.end_offset)]


def _produce_acked(sim: Sim, values: list[str], acks: str = "all") -> list[tuple[int, str]]:
    acked = []
    for v in values:
        reply = sim.produce([v], acks=acks)
        assert isinstance(reply, ProduceReply), reply
        acked.append((reply.offset, v))
    return acked


def _events(sim: Sim, kind: str, **match) -> list[dict]:
    return [e for e in sim.events if e["kind"] == kind and all(e.get(k) == v for k, v in match.items())]


def _cut_leader_from_followers(sim: Sim, leader: int = 1) -> None:
    for b in sim.broker_ids:
        if b != leader:
            sim.partition(leader, b)


# ---- Kafka's striped placement (StripedReplicaPlacer) --------------------------------------------


def test_striped_placement_through_the_controller() -> None:
    sim = Sim(3, BASE)
    sim.create_topic("test", partitions=3, rf=3)
    states = [sim.state("test", p) for p in range(3)]
    assert [s.replicas for s in states] == [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    assert [s.leader for s in states] == [1, 2, 3]
    assert [s.isr for s in states] == [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    leaders = {(e["partition"], e["node"]) for e in _events(sim, "become-leader", topic="test")}
    assert leaders == {(0, 1), (1, 2), (2, 3)}


# ---- Vanlightly's KIP-966 post: last replica standing --------------------------------------------


def _last_replica_standing(elr: bool) -> tuple[Sim, list[tuple[int, str]]]:
    """acks=all records on all three replicas (unflushed); the leader shrinks the ISR to
    itself, then loses power and restarts."""
    sim = _sim(eligible_leader_replicas_enable=elr)
    acked = _produce_acked(sim, [f"v{i}" for i in range(5)])
    sim.run(500)
    assert all(_log(sim, b) == [v for _o, v in acked] for b in (1, 2, 3))
    # Followers cut off from the leader (not from the controller): after
    # replica.lag.time.max.ms the leader shrinks the ISR to itself by AlterPartition.
    _cut_leader_from_followers(sim)
    sim.run(BASE.replica_lag_time_max_ms + 1000)
    assert _events(sim, "partition-change", reason="alter-partition")
    assert _view(sim) == ((1, (1,), (2, 3), ()) if elr else (1, (1,), (), ()))
    assert sim.produce(["refused"]) == ErrorReply(E.NOT_ENOUGH_REPLICAS)
    # Power loss on the leader: its whole unflushed log is gone.
    assert sim.crash(1, lose_unflushed=True) == 5
    sim.heal()
    sim.run(BASE.broker_session_timeout_ms + 1000)
    return sim, acked


def test_last_replica_standing_loses_acked_records_without_elr() -> None:
    sim, acked = _last_replica_standing(elr=False)
    # Fenced, the last ISR member stays in the ISR: nobody else may lead.
    assert _view(sim) == (None, (1,), (), ())
    sim.restart(1)
    sim.run(3000)
    # Its unclean restart changes nothing: it is re-elected with an empty log and the
    # followers truncate the committed records to match it.
    assert _events(sim, "broker-registered", broker=1)[-1]["clean"] is False
    assert _view(sim)[0] == 1
    for b in (2, 3):
        (trunc,) = _events(sim, "truncate", node=b)
        assert (trunc["from_offset"], trunc["to_offset"], trunc["removed"], trunc["reason"]) == \
            (5, 0, 5, "leader-epoch")
    assert sim.consume() == []
    assert all(_log(sim, b) == [] for b in (1, 2, 3))


def test_last_replica_standing_with_elr_loses_nothing() -> None:
    sim, acked = _last_replica_standing(elr=True)
    # Fencing the leader elects ELR member 2; the fenced leader joins the ELR (case C) ...
    fences = _events(sim, "partition-change", reason="fence")
    assert [(e["leader"], e["isr"], e["elr"]) for e in fences] == [(2, [2], [1, 3])]
    # ... until 3 catches up with 2 and rejoins: ISR back at MinISR, ELR emptied (case G).
    assert _view(sim) == (2, (2, 3), (), ())
    sim.restart(1)
    sim.run(3000)
    assert _events(sim, "broker-registered", broker=1)[-1]["clean"] is False
    assert _view(sim) == (2, (1, 2, 3), (), ())
    assert sim.consume() == acked
    assert all(_log(sim, b) == [v for _o, v in acked] for b in (1, 2, 3))
    assert _events(sim, "truncate") == []


def test_last_replica_standing_with_elr_unclean_restart_leaves_elr() -> None:
    """The same, but the leader restarts before the remaining ELR member caught up: its
    unclean registration moves it from the ELR to LastKnownELR."""
    sim = _sim()
    acked = _produce_acked(sim, ["x"])
    _cut_leader_from_followers(sim)
    sim.run(BASE.replica_lag_time_max_ms + 1000)
    assert _view(sim) == (1, (1,), (2, 3), ())
    sim.crash(1, lose_unflushed=True)
    sim.isolate(3)
    sim.partition(2, "controller")
    sim.run(BASE.broker_session_timeout_ms + 1000)
    assert _view(sim) == (None, (), (1, 2, 3), ())
    sim.heal()
    sim.restart(1)
    sim.run(50)
    assert _events(sim, "partition-change", reason="unclean-registration")[-1]["elr"] == [2, 3]
    sim.run(3000)
    assert _view(sim) == (2, (1, 2, 3), (), ())
    assert sim.consume() == acked


# ---- kafka-tlaplus KIP-966 description §5.3.3: balanced recovery with real logs ------------------


def test_balanced_recovery_after_correlated_power_loss() -> None:
    sim = _sim(unclean_recovery_strategy="balanced")
    acked = _produce_acked(sim, [f"v{i}" for i in range(10)])
    sim.run(500)
    # Broker 2's page cache happened to be written back; 1 and 3 lose everything.
    sim.logs[(2, "t", 0)].flush()
    assert [sim.crash(b, lose_unflushed=True) for b in (1, 2, 3)] == [10, 0, 10]
    sim.run(BASE.broker_session_timeout_ms + 500)
    changes = [(e["leader"], e["isr"], e["elr"]) for e in _events(sim, "partition-change", reason="fence")]
    assert changes == [(2, [2, 3], []), (3, [3], [2]), (None, [], [2, 3])]
    sim.restart(1)
    sim.run(100)
    assert _view(sim) == (None, (), (2, 3), ())
    sim.restart(2)
    sim.run(100)
    assert _view(sim) == (None, (), (3,), (2,))
    sim.restart(3)
    sim.run(500)
    # Replica 2 answered with the highest (epoch, offset) and was elected; 3 stays in
    # LastKnownELR until it rejoins.
    (rec,) = _events(sim, "unclean-recovery")
    assert (rec["strategy"], rec["leader"], rec["complete"], rec["potential_data_loss"]) == \
        ("balanced", 2, True, True)
    assert rec["candidates"] == [{"broker": 2, "epoch": 0, "end_offset": 10},
                                 {"broker": 3, "epoch": -1, "end_offset": 0}]
    sim.run(2000)
    assert _view(sim) == (2, (1, 2, 3), (), ())
    assert sim.consume() == acked


# ---- alternative behaviours -------------------------------------------------------------------------


def test_acks_1_loses_acked_records_when_followers_lag() -> None:
    sim = _sim()
    acked_all = _produce_acked(sim, ["a", "b"])
    _cut_leader_from_followers(sim)
    acked_1 = _produce_acked(sim, ["c", "d", "e"], acks="1")
    assert [o for o, _v in acked_1] == [2, 3, 4]
    assert _log(sim, 1) == ["a", "b", "c", "d", "e"] and _log(sim, 2) == ["a", "b"]
    sim.crash(1)  # SIGKILL: its page cache, and so its log, survives
    sim.heal()
    sim.run(BASE.broker_session_timeout_ms + 500)
    assert _view(sim) == (2, (2, 3), (), ())
    sim.restart(1)
    sim.run(2000)
    # The old leader's suffix diverges from leader 2's epoch: truncated away.
    (trunc,) = _events(sim, "truncate", node=1)
    assert (trunc["from_offset"], trunc["to_offset"], trunc["removed"], trunc["reason"]) == \
        (5, 2, 3, "leader-epoch")
    assert sim.consume() == acked_all


def _lose_isr_leaving_out_of_sync_replica_3(**overrides) -> tuple[Sim, list]:
    """Replica 3 is fenced (out of sync), "x" is committed on 1 and 2, then both die."""
    sim = _sim(**overrides)
    sim.isolate(3)
    sim.run(BASE.broker_session_timeout_ms + 500)
    assert _view(sim) == (1, (1, 2), (), ())
    acked = _produce_acked(sim, ["x"])
    sim.crash(1)
    sim.crash(2)
    sim.heal()
    sim.run(BASE.broker_session_timeout_ms + 1000)
    return sim, acked


def test_unclean_leader_election_elects_out_of_sync_replica() -> None:
    sim, acked = _lose_isr_leaving_out_of_sync_replica_3(unclean_leader_election_enable=True)
    assert _view(sim) == (3, (3,), (), ())
    (ev,) = _events(sim, "unclean-election")
    assert (ev["leader"], ev["potential_data_loss"]) == (3, True)
    assert acked == [(0, "x")] and sim.consume() == []


def test_without_unclean_election_the_partition_waits() -> None:
    sim, _ = _lose_isr_leaving_out_of_sync_replica_3()
    assert _view(sim) == (None, (), (1, 2), ())
    assert _events(sim, "unclean-election") == []


def test_high_watermark_truncation_loses_committed_record() -> None:
    """Pre-KIP-101: a follower truncates to its stale local HWM on a leader change. "x" is
    acknowledged, leader 1 dies before the followers learn the new HWM, 2 takes over, 3
    truncates "x" away, then 2 dies before 3 fetched it back: 3 leads without "x"."""
    sim = _sim(replica_truncation="high-watermark", min_insync_replicas=1)
    acked = _produce_acked(sim, ["x"])
    assert [sim.brokers[b].replicas[("t", 0)].hwm for b in (2, 3)] == [0, 0]
    sim.crash(1)
    assert sim.run_until(lambda: sim.state().leader == 2)
    sim.crash(2)
    sim.run(BASE.broker_session_timeout_ms + 1000)
    (trunc,) = _events(sim, "truncate", node=3)
    assert (trunc["from_offset"], trunc["to_offset"], trunc["reason"]) == (1, 0, "high-watermark")
    assert _view(sim) == (3, (3,), (), ())
    assert acked == [(0, "x")] and sim.consume() == []


def test_leader_epoch_truncation_keeps_committed_record_in_same_scenario() -> None:
    sim = _sim(min_insync_replicas=1)
    acked = _produce_acked(sim, ["x"])
    sim.crash(1)
    assert sim.run_until(lambda: sim.state().leader == 2)
    sim.crash(2)
    sim.run(BASE.broker_session_timeout_ms + 1000)
    assert _view(sim) == (3, (3,), (), ())
    assert _events(sim, "truncate") == []
    assert sim.consume() == acked


def test_seed_001_kip_966_walkthrough_in_the_simulator() -> None:
    # 1. Leader=R1, ISR=[R1,R2,R3]
    sim = _sim()
    assert _view(sim) == (1, (1, 2, 3), (), ())
    # 2. R3 unreachable, fenced; the ISR still meets MinISR.
    sim.isolate(3)
    sim.run(BASE.broker_session_timeout_ms + 500)
    assert _view(sim) == (1, (1, 2), (), ())
    # 3. req1 is replicated to R2, the HWM covers it, the producer gets its ack.
    acked = _produce_acked(sim, ["req1"])
    assert sim.brokers[1].replicas[("t", 0)].hwm == 1
    assert (_log(sim, 1), _log(sim, 2), _log(sim, 3)) == (["req1"], ["req1"], [])
    # 4. R2 unreachable: the ISR is below MinISR, R2 joins the ELR.
    sim.isolate(2)
    sim.run(BASE.broker_session_timeout_ms + 500)
    assert _view(sim) == (1, (1,), (2,), ())
    # 5. An OS error kills R1 (its page cache too): NoLeader, R1 joins the ELR.
    assert sim.crash(1, lose_unflushed=True) == 1
    sim.run(BASE.broker_session_timeout_ms + 500)
    assert _view(sim) == (None, (), (1, 2), ())
    # 6. R1 restarts without req1 and registers uncleanly: out of the ELR, not elected.
    sim.restart(1)
    sim.run(1000)
    assert _log(sim, 1) == []
    assert _events(sim, "broker-registered", broker=1)[-1]["clean"] is False
    assert 1 in sim.controller.unfenced()
    assert _view(sim) == (None, (), (2,), (1,))
    # 7. R2 reachable again (R3 still not): unfenced, elected from the ELR.
    sim.heal()
    sim.isolate(3)
    sim.run(400)
    (election,) = _events(sim, "partition-change", reason="election")
    assert [election[k] for k in ("leader", "isr", "elr", "last_known_elr")] == [2, [2], [], [1]]
    # 8. R1 catches up from R2 and is re-added; MinISR reached, LastKnownELR cleaned.
    sim.run(2000)
    assert _view(sim) == (2, (1, 2), (), ())
    assert _log(sim, 1) == ["req1"] and sim.consume() == acked


def _elr_member_loses_power(**overrides) -> tuple[Sim, list]:
    """Steps 1-5 of Vanlightly's KIP-966 post with real brokers: "x" committed on 1 and 2,
    then 1 is the last replica standing and loses power; 1 and 2 are in the ELR."""
    sim = _sim(**overrides)
    sim.isolate(3)
    sim.run(BASE.broker_session_timeout_ms + 500)
    acked = _produce_acked(sim, ["x"])
    sim.heal()
    sim.isolate(2)
    sim.crash(3)
    sim.run(BASE.broker_session_timeout_ms + 500)
    assert _view(sim) == (1, (1,), (2,), ())
    assert sim.crash(1, lose_unflushed=True) == 1
    sim.run(BASE.broker_session_timeout_ms + 500)
    assert _view(sim) == (None, (), (1, 2), ())
    sim.restart(1)
    sim.run(1000)
    return sim, acked


def test_unclean_shutdown_detection_off_registers_clean_and_loses_data() -> None:
    sim, acked = _elr_member_loses_power(unclean_shutdown_detection=False)
    assert _events(sim, "broker-registered", broker=1)[-1]["clean"] is True
    # Claiming a clean shutdown keeps the emptied replica 1 in the ELR: it is elected.
    assert _view(sim) == (1, (1,), (2,), ())
    sim.heal()
    sim.restart(3)
    sim.run(3000)
    assert acked == [(0, "x")] and sim.consume() == []
    assert _events(sim, "truncate", node=2, reason="leader-epoch")


def test_unclean_shutdown_detection_on_keeps_replica_out_until_caught_up() -> None:
    sim, acked = _elr_member_loses_power()
    assert _events(sim, "broker-registered", broker=1)[-1]["clean"] is False
    assert _view(sim) == (None, (), (2,), (1,))
    sim.heal()
    sim.restart(3)
    sim.run(3000)
    assert _view(sim) == (2, (1, 2, 3), (), ())
    assert sim.consume() == acked


def _local_first_race(isr_update: str) -> tuple[Sim, list, dict]:
    """The race KIP-497 rules out (only the controller commits an ISR change): leader 1 loses
    follower 3 and the controller; follower 2 then dies. The leader's lag check drops 3 (and
    with local-first acts on that at once)."""
    sim = _sim(isr_update=isr_update, min_insync_replicas=1, replica_lag_time_max_ms=1000)
    sim.partition(1, 3)
    sim.partition(1, "controller")
    call = sim.call(1, ProduceRequest("t", 0, ("x",), "all"))
    sim.run(100)
    assert call.response is None and _log(sim, 2) == ["x"]
    sim.run(400)  # 2 keeps fetching (caught up): only 3 falls behind the lag limit first
    sim.crash(2)
    # Watch the tick that shrinks the ISR, before the AlterPartition goes anywhere.
    outputs: list = []
    while not any(isinstance(o, Send) and isinstance(o.msg, AlterPartitionRequest) for o in outputs):
        sim.now += sim.step_ms
        outputs = sim.brokers[1].tick(sim.now)
        sim._carry_out(("broker", 1), outputs)
        sim._drain()
    return sim, outputs, call


def test_isr_update_local_first_acks_on_uncommitted_isr_and_loses_it() -> None:
    sim, outputs, call = _local_first_race("local-first")
    (alter,) = [o.msg for o in outputs if isinstance(o, Send)]
    assert alter.isr == (1, 2)
    # The leader acts on [1, 2] in the same tick: HWM up, ack out, with the controller's
    # ISR still [1, 2, 3] (and the AlterPartition cannot reach it).
    assert [o.msg for o in outputs if isinstance(o, Reply)] == [ProduceReply(0, 0, 1)]
    assert call.response == ProduceReply(0, 0, 1)
    assert _view(sim) == (1, (1, 2, 3), (), ())
    # The controller fences 1 and 2 and elects 3, which never had "x".
    sim.run(BASE.broker_session_timeout_ms + 1000)
    assert _view(sim) == (3, (3,), (), ())
    assert sim.consume() == []


def test_isr_update_controller_waits_for_the_commit() -> None:
    sim, outputs, call = _local_first_race("controller")
    assert [o for o in outputs if isinstance(o, Reply)] == []
    sim.run(BASE.request_timeout_ms)
    assert call.response == ErrorReply(E.REQUEST_TIMED_OUT, appended=True)


def test_leader_epoch_truncation_replaces_divergent_suffix() -> None:
    sim = _sim(min_insync_replicas=1)
    _produce_acked(sim, ["a", "b"])
    _cut_leader_from_followers(sim)
    _produce_acked(sim, ["p", "q", "r"], acks="1")
    sim.isolate(1)
    sim.run(BASE.broker_session_timeout_ms + 500)
    assert sim.state().leader == 2 and sim.state().leader_epoch == 1
    new = _produce_acked(sim, ["s", "t"])
    assert new == [(2, "s"), (3, "t")]
    sim.heal()
    sim.run(2000)
    (trunc,) = _events(sim, "truncate", node=1)
    assert (trunc["from_offset"], trunc["to_offset"], trunc["removed"], trunc["reason"]) == \
        (5, 2, 3, "leader-epoch")
    assert _log(sim, 1) == _log(sim, 2) == _log(sim, 3) == ["a", "b", "s", "t"]
    assert sim.logs[(1, "t", 0)].epoch_entries() == [(0, 0), (1, 2)]


# ---- regressions found by the state machines -----------------------------------------------------


def _fetch_storm(sim: Sim, ms: int) -> int:
    """The most messages any one step of `ms` delivers (a healthy cluster parks its fetches)."""
    worst = 0
    for _ in range(ms // sim.step_ms):
        sim.now += sim.step_ms
        sim._carry_out(("controller",), sim.controller.tick(sim.now))
        for b in sorted(sim.brokers):
            sim._carry_out(("broker", b), sim.brokers[b].tick(sim.now))
        delivered = 0
        while sim.queue and delivered < 10_000:
            sim._deliver(sim.queue.popleft())
            delivered += 1
        worst = max(worst, delivered)
    return worst


def test_restarted_former_leader_without_records_does_not_livelock() -> None:
    """Found by SimMachine: becoming leader used to put an epoch entry in the cache with no
    record. Replica 1 (leader of epoch 0, no records) restarted as a follower and fetched
    with last epoch 0; the leader (epoch 1) knew no epoch 0, answered "diverging at 0", the
    truncation to 0 removed nothing (the entry stayed) and the fetch went out again at once,
    10,000 times per 10 ms step. An epoch now enters the cache with its first record."""
    sim = _sim()
    sim.crash(1)
    sim.restart(1)
    assert _fetch_storm(sim, 1000) < 100
    assert _view(sim) == (2, (1, 2, 3), (), ())
    assert _produce_acked(sim, ["x"]) == [(0, "x")]
    sim.run(500)
    assert _log(sim, 1) == ["x"]


def test_former_leader_with_empty_epoch_does_not_livelock() -> None:
    """The same with records below the empty epoch: replica 2 leads epoch 1 without writing,
    then follows 1 in epoch 2. (With the old cache (0, 0), (1, 2) the leader answered
    epoch 1 with (0, 2), and truncating to 2 removed nothing.)"""
    sim = _sim()
    _produce_acked(sim, ["a", "b"])
    sim.crash(1)
    sim.restart(1)
    sim.run(1000)
    assert sim.state().leader == 2 and sim.state().leader_epoch == 1
    sim.crash(2)
    sim.restart(2)
    assert _fetch_storm(sim, 1000) < 100
    assert sim.state().leader == 1 and sim.state().leader_epoch == 2
    assert sim.logs[(2, "t", 0)].epoch_entries() == [(0, 0)]
    assert _produce_acked(sim, ["c"]) == [(2, "c")]
    sim.run(500)
    assert _log(sim, 2) == ["a", "b", "c"]
    assert sim.logs[(2, "t", 0)].epoch_entries() == [(0, 0), (2, 2)]
