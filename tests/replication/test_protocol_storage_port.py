"""The storage port seen from the protocol: with deferred syncs a replica reveals only what its
flush policy has made durable -- acks=1 replies, its own LEO in the HWM, records served to
followers, a follower's fetch offset wait for `on_synced` -- so every acknowledgement with
flush.messages=1 still means "fsynced", as with inline syncs, while the broker keeps
heartbeating during a slow sync."""

from __future__ import annotations

import copy
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.memory_log import MemoryLog
from support.protocol_sim import ClientCall, Sim

from replication import errors as E
from replication.config import NodeConfig
from replication.messages import ErrorReply, FetchReply, FetchRequest, ProduceReply, ProduceRequest
from replication.metadata import PartitionState
from replication.outputs import Reply, Send, Sync
from replication.partition import Replica

CONFIG = NodeConfig(min_insync_replicas=2, flush_messages=1)
STATE = PartitionState("A", 0, replicas=(1, 2, 3), leader=1, leader_epoch=0, isr=(1, 2, 3))


def _replica(broker: int) -> Replica:
    r = Replica(broker, "A", 0, MemoryLog(flush_messages=1, defer_sync=True))
    r.on_metadata(STATE, CONFIG, now=0)
    return r


def _sync(replica: Replica, now: int) -> list:
    """Run the replica's outstanding job as a storage thread would, then report it."""
    (out,) = replica.sync_outputs()
    assert isinstance(out, Sync) and replica.sync_outputs() == []
    out.job.run()
    return replica.on_synced(out.job, now)


def _fetch(leader: Replica, follower: Replica, now: int) -> list:
    request = FetchRequest("A", 0, follower.broker_id, follower.log.end_offset,
                           follower.log.latest_epoch(), leader.leader_epoch, wait=False)
    out = leader.fetch("f", request, now)
    for o in out:
        if isinstance(o, Reply) and o.token == "f":
            follower.on_fetch_response(request, o.msg, now)
    return out


def test_acks_1_is_answered_once_the_leaders_sync_is_done() -> None:
    r1 = _replica(1)
    assert r1.produce("p", [b"0"], "1", now=1) == []
    assert r1.log.settled_end == 0 and r1.pending[0].local
    assert _sync(r1, now=2) == [Reply("p", ProduceReply(0, 0, 1))]


def test_followers_get_only_settled_records_and_fetch_again_once_settled() -> None:
    r1, r2, r3 = _replica(1), _replica(2), _replica(3)
    r1.produce("p", [b"0", b"1"], "all", now=1)
    (reply,) = [o.msg for o in _fetch(r1, r2, now=2) if isinstance(o, Reply)]
    assert reply == FetchReply((), 0, 0), "unsettled records are not served"
    _sync(r1, now=3)
    _fetch(r1, r2, now=4)
    assert r2.log.end_offset == 2 and r2.log.settled_end == 0
    assert r2.next_fetch(now=5) == [], "the fetch offset would claim unsynced records"
    (send,) = _sync(r2, now=6)
    assert isinstance(send, Send) and send.msg.offset == 2
    r2.on_fetch_failed(now=6)  # (that fetch is not delivered here)
    _fetch(r1, r3, now=7)
    _sync(r3, now=8)
    _fetch(r1, r2, now=9)
    out = _fetch(r1, r3, now=10)
    assert r1.hwm == 2 and Reply("p", ProduceReply(0, 0, 1)) in out


def test_inline_logs_are_not_held_back() -> None:
    r1 = Replica(1, "A", 0, MemoryLog(flush_messages=1))
    r1.on_metadata(STATE, CONFIG, now=0)
    assert r1.produce("p", [b"0"], "1", now=1) == [Reply("p", ProduceReply(0, 0, 1))]
    assert r1.sync_outputs() == []


def _sim(delay: int | None, **overrides) -> Sim:
    sim = Sim(3, replace(CONFIG, **overrides), sync_delay_ms=delay)
    sim.create_topic("t", 1, 3)
    return sim


def test_slow_syncs_delay_acks_but_not_heartbeats() -> None:
    """A 2 s sync (longer than nothing; the session timeout is 6 s): every acknowledgement
    waits for the leader's and a follower's sync, the brokers stay unfenced throughout."""
    sim = _sim(2000)
    start = sim.now
    reply = sim.produce(["x"], wait_ms=10_000)
    assert reply == ProduceReply(0, 0, 1)
    assert sim.now - start >= 2 * 2000
    sim.run(20_000)
    assert not [e for e in sim.events if e["kind"] == "broker-fenced"]
    assert sim.consume() == [(0, "x")]


def test_power_loss_before_the_sync_loses_only_unacknowledged_records() -> None:
    sim = _sim(500)
    assert sim.produce(["a"]) == ProduceReply(0, 0, 1)
    call = sim.call(1, ProduceRequest("t", 0, ("b",), "1"))
    sim.run(200)
    assert call.response is None, "not acknowledged before its sync"
    assert sim.crash(1, lose_unflushed=True) == 1
    sim.run(8000)
    assert sim.state().leader in (2, 3)
    assert [v for _o, v in sim.consume()][:1] == ["a"]


class CheckingSim(Sim):
    """Checks, the moment a produce is acknowledged, that its records would survive a power
    loss on the leader (flush.messages=1) and, for acks=all, on every replica of the ISR
    the leader acted on."""

    acks: dict[int, str]

    def _deliver(self, item) -> None:
        kind, src, target, msg = item
        if kind == "reply" and isinstance(target, ClientCall) and isinstance(msg, ProduceReply):
            request = target.msg
            values = request.values
            replica = self.brokers[src].replicas[("t", 0)]
            holders = {src} | (set(replica.isr) if request.acks == "all" else set())
            for b in holders:
                survivor = copy.deepcopy(self.logs[(b, "t", 0)])
                survivor.lose_unflushed()
                got = [r.value.decode() for r in survivor.read(msg.offset, len(values))] \
                    if msg.offset + len(values) <= survivor.end_offset else []
                assert got == list(values), ("acknowledged but not durable", b, msg, got)
            for i, v in enumerate(values):
                self.acks[msg.offset + i] = v
        super()._deliver(item)


OPS = st.one_of(
    st.tuples(st.just("produce"), st.sampled_from(["1", "all"]), st.integers(1, 3)),
    st.tuples(st.just("crash"), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("restart"), st.integers(1, 3)),
    st.tuples(st.just("run"), st.integers(10, 3000)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(delay=st.sampled_from([None, 0, 30, 400]), ops=st.lists(OPS, max_size=15))
def test_every_ack_is_durable_when_it_is_sent(delay: int | None, ops: list) -> None:
    sim = CheckingSim(3, replace(CONFIG, replica_lag_time_max_ms=1000, broker_session_timeout_ms=1500),
                      sync_delay_ms=delay)
    sim.acks = {}
    sim.create_topic("t", 1, 3)
    n = 0
    for op in ops:
        if op[0] == "produce":
            leader = sim.state().leader
            if leader in sim.brokers:
                sim.call(leader, ProduceRequest("t", 0, tuple(f"v{n + i}" for i in range(op[2])), op[1]))
                n += op[2]
            sim.run(50)
        elif op[0] == "crash" and op[1] not in sim.down:
            sim.crash(op[1], lose_unflushed=op[2])
        elif op[0] == "restart" and op[1] in sim.down:
            sim.restart(op[1])
        else:
            sim.run(op[-1] if op[0] == "run" else 10)
    assert all(isinstance(k, int) for k in sim.acks)


def test_sim_produce_reports_its_own_failures_with_wire_errors() -> None:
    sim = _sim(None)
    sim.isolate(1)
    assert sim.produce(["x"], wait_ms=100).error == E.REQUEST_TIMED_OUT
    sim.crash(1)
    assert sim.produce(["y"]) == ErrorReply(E.NOT_LEADER, message="no live leader")
