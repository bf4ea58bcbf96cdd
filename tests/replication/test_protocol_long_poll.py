"""A consumer's long poll (ConsumerFetchRequest with `max_wait_ms`, Kafka's fetch.max.wait.ms
and fetch.min.bytes in records), on real `Replica`s over `MemoryLog`s: the leader holds the
read until `min_records` are committed past its offset (not merely appended), answers it at
the deadline with what there is, answers at once what it would refuse, and fails what it
holds when it stops leading."""

from __future__ import annotations

from test_protocol_hwm import CONFIG, _replica  # one leader, two followers, MinISR 2

from replication import errors as E
from replication.messages import ConsumerFetchReply, ConsumerFetchRequest, ErrorReply, FetchRequest
from replication.metadata import PartitionState
from replication.outputs import Reply
from replication.partition import Replica


def _replicate(leader: Replica, followers: list[Replica], now: int) -> list:
    """Each follower fetches what the leader has, then fetches again from its new end (which
    tells the leader its LEO); the leader's outputs of all four fetches."""
    out: list = []
    for _ in range(2):
        for f in followers:
            request = FetchRequest("A", 0, replica=f.broker_id, offset=f.log.end_offset,
                                   last_fetched_epoch=f.log.latest_epoch(), leader_epoch=0, wait=False)
            step = leader.fetch(("fetch", f.broker_id), request, now)
            for o in step:
                if isinstance(o, Reply) and o.token == ("fetch", f.broker_id):
                    f.on_fetch_response(request, o.msg, now)
            out += step
    return out


def _answers(out: list, token: object) -> list:
    return [o.msg for o in out if isinstance(o, Reply) and o.token == token]


def _poll(offset: int, min_records: int, wait_ms: int, max_records: int = 500) -> ConsumerFetchRequest:
    return ConsumerFetchRequest("A", 0, offset, max_records, 0, min_records, wait_ms)


def test_a_long_poll_waits_for_committed_records_not_appended_ones() -> None:
    leader, f2, f3 = _replica(1), _replica(2), _replica(3)
    assert leader.fetch("c", _poll(0, 3, 50), now=10) == []  # nothing committed: held

    out = leader.produce("p", [b"0", b"1"], "all", now=11)
    assert _answers(out, "c") == []  # appended, not committed
    assert _answers(_replicate(leader, [f2, f3], now=12), "c") == []  # 2 committed of 3 asked
    assert leader.hwm == 2

    leader.produce("p", [b"2"], "all", now=13)
    (reply,) = _answers(_replicate(leader, [f2, f3], now=14), "c")
    assert isinstance(reply, ConsumerFetchReply)
    assert [v for _o, v in reply.records] == ["0", "1", "2"] and reply.hwm == 3
    assert leader.parked_reads == []


def test_a_long_poll_is_answered_at_its_deadline_with_what_there_is() -> None:
    leader, f2, f3 = _replica(1), _replica(2), _replica(3)
    assert leader.fetch("c", _poll(0, 100, 50), now=10) == []
    leader.produce("p", [b"7"], "all", now=11)
    assert _answers(_replicate(leader, [f2, f3], now=12), "c") == []
    assert _answers(leader.tick(now=59), "c") == []  # 49 ms waited: still held
    (reply,) = _answers(leader.tick(now=60), "c")
    assert [v for _o, v in reply.records] == ["7"]
    (empty,) = _answers(leader.fetch("d", _poll(1, 100, 20), now=70) + leader.tick(now=90), "d")
    assert empty.records == () and empty.hwm == 1


def test_enough_records_already_committed_answer_at_once() -> None:
    leader, f2, f3 = _replica(1), _replica(2), _replica(3)
    leader.produce("p", [b"0", b"1", b"2"], "all", now=1)
    _replicate(leader, [f2, f3], now=2)
    (reply,) = _answers(leader.fetch("c", _poll(0, 3, 50), now=3), "c")
    assert len(reply.records) == 3
    # min_records above max_records: a full fetch is enough
    (reply,) = _answers(leader.fetch("d", _poll(1, 500, 50, max_records=2), now=3), "d")
    assert [o for o, _v in reply.records] == [1, 2]
    # without max_wait_ms a read never waits, as before long polls
    (reply,) = _answers(leader.fetch("e", _poll(3, 500, 0), now=3), "e")
    assert reply.records == ()


def test_a_read_the_leader_would_refuse_is_not_held() -> None:
    leader = _replica(1)
    (reply,) = _answers(leader.fetch("c", _poll(5, 1, 50), now=1), "c")
    assert reply == ErrorReply(E.OFFSET_OUT_OF_RANGE, hwm=0)
    fenced = ConsumerFetchRequest("A", 0, 0, 500, -1, 1, 50)  # an older leader epoch
    (reply,) = _answers(leader.fetch("d", fenced, now=1), "d")
    assert reply == ErrorReply(E.FENCED_LEADER_EPOCH)
    assert leader.parked_reads == []


def test_held_polls_fail_when_the_leader_steps_down() -> None:
    leader = _replica(1)
    assert leader.fetch("c", _poll(0, 1, 1000), now=1) == []
    moved = PartitionState("A", 0, replicas=(1, 2, 3), leader=2, leader_epoch=1, isr=(2, 3),
                           partition_epoch=1)
    out = leader.on_metadata(moved, CONFIG, now=2)
    assert _answers(out, "c") == [ErrorReply(E.NOT_LEADER)]
    assert leader.parked_reads == []
