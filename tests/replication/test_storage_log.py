"""Log semantics shared by MemoryLog and SegmentLog (real files in a tmp dir)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.memory_log import MemoryLog

from replication.log import Log, LogClosedError, OffsetOutOfRange, Record
from replication.segment_log import SegmentLog

MakeLog = Callable[..., Log]


@pytest.fixture(params=["memory", "segment"])
def make_log(request, tmp_path) -> MakeLog:
    made: list[Log] = []

    def make(**kw) -> Log:
        if request.param == "memory":
            log: Log = MemoryLog(**kw)
        else:
            log = SegmentLog(tmp_path / f"log{len(made)}", segment_bytes=120, **kw)
        made.append(log)
        return log

    yield make
    for log in made:
        log.close(clean=False)


def values(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_append_assigns_offsets_and_reads_back(make_log: MakeLog) -> None:
    log = make_log()
    assert (log.start_offset, log.end_offset, log.latest_epoch()) == (0, 0, -1)
    assert log.append(0, values(3), 1000) == (0, 2)
    assert log.append(0, [b"x"], 1001) == (3, 3)
    assert log.end_offset == 4
    assert log.read(0, 10) == [
        Record(0, 0, 1000, b"v0"),
        Record(1, 0, 1000, b"v1"),
        Record(2, 0, 1000, b"v2"),
        Record(3, 0, 1001, b"x"),
    ]
    assert [r.offset for r in log.read(1, 2)] == [1, 2]
    assert log.read(4, 10) == []
    assert log.read(2, 0) == []


def test_read_out_of_range(make_log: MakeLog) -> None:
    log = make_log()
    log.append(0, values(2), 0)
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 1)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1)


def test_leader_append_rejects_bad_input(make_log: MakeLog) -> None:
    log = make_log()
    with pytest.raises(ValueError):
        log.append(0, [], 0)
    with pytest.raises(ValueError):
        log.append(-1, [b"a"], 0)
    log.append(3, [b"a"], 0)
    with pytest.raises(ValueError, match="older"):
        log.append(2, [b"b"], 0)
    assert log.end_offset == 1


def test_follower_append_must_start_at_leo_and_keep_epochs_monotonic(make_log: MakeLog) -> None:
    log = make_log()
    log.append_records([Record(0, 1, 5, b"a"), Record(1, 2, 6, b"b")])
    assert log.epoch_entries() == [(1, 0), (2, 1)]
    with pytest.raises(ValueError, match="expected"):
        log.append_records([Record(3, 2, 7, b"c")])
    with pytest.raises(ValueError, match="expected"):
        log.append_records([Record(2, 2, 7, b"c"), Record(4, 2, 7, b"d")])
    with pytest.raises(ValueError, match="epoch"):
        log.append_records([Record(2, 1, 7, b"c")])
    with pytest.raises(ValueError, match="epoch"):
        log.append_records([Record(2, 3, 7, b"c"), Record(3, 2, 7, b"d")])
    assert log.end_offset == 2
    log.append_records([Record(2, 4, 7, b"c")])
    assert log.read(0, 5)[-1] == Record(2, 4, 7, b"c")
    assert log.epoch_entries() == [(1, 0), (2, 1), (4, 2)]


def test_epoch_cache_follows_appends(make_log: MakeLog) -> None:
    log = make_log()
    log.append(0, values(5), 0)
    log.append(2, values(3), 0)
    log.append(2, values(1), 0)
    log.append(5, values(1), 0)
    assert log.epoch_entries() == [(0, 0), (2, 5), (5, 9)]
    assert log.latest_epoch() == 5


def test_truncate_removes_suffix_and_trims_epochs(make_log: MakeLog) -> None:
    log = make_log()
    log.append(0, values(5), 0)
    log.append(2, values(5), 0)
    assert log.truncate_to(12) == 0
    assert log.truncate_to(10) == 0
    assert log.truncate_to(6) == 4
    assert log.epoch_entries() == [(0, 0), (2, 5)]
    assert log.truncate_to(5) == 1
    assert log.epoch_entries() == [(0, 0)]
    assert log.end_offset == 5 and log.latest_epoch() == 0
    assert [r.value for r in log.read(0, 10)] == values(5)
    assert log.append(3, [b"new"], 9) == (5, 5)
    assert log.read(5, 1) == [Record(5, 3, 9, b"new")]
    assert log.truncate_to(0) == 6
    assert (log.end_offset, log.epoch_entries(), log.read(0, 5)) == (0, [], [])
    with pytest.raises(ValueError):
        log.truncate_to(-1)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (1, (0, 5)),  # KIP-101: the follower's epoch 1 diverged; the leader answers epoch 0 ends at 5
        (0, (0, 5)),
        (2, (2, 8)),  # the latest epoch ends at the LEO
        (4, (2, 8)),  # above every known epoch: the latest and the LEO
        (-1, (-1, -1)),
    ],
)
def test_end_offset_for_epoch(make_log: MakeLog, requested: int, expected: tuple[int, int]) -> None:
    log = make_log()
    log.append(0, values(5), 0)
    log.append(2, values(3), 0)
    assert log.epoch_entries() == [(0, 0), (2, 5)]
    assert log.end_offset_for_epoch(requested) == expected


def test_end_offset_for_epoch_below_every_known_epoch(make_log: MakeLog) -> None:
    log = make_log()
    assert log.end_offset_for_epoch(0) == (-1, -1)
    log.append(3, values(2), 0)
    log.append(7, values(2), 0)
    assert log.end_offset_for_epoch(2) == (-1, -1)
    assert log.end_offset_for_epoch(5) == (3, 2)


def test_flush_messages_policy(make_log: MakeLog) -> None:
    log = make_log(flush_messages=3)
    log.append(0, values(2), 0)
    assert log.unflushed_count() == 2
    assert not log.maybe_flush(0)
    log.append(0, values(1), 0)
    assert log.unflushed_count() == 0  # the append itself reached flush.messages
    log.append(0, values(5), 0)
    assert log.unflushed_count() == 0


def test_flush_ms_policy(make_log: MakeLog) -> None:
    log = make_log(flush_ms=100)
    assert not log.maybe_flush(1000)  # clean: the clock restarts
    log.append(0, values(2), 0)
    assert not log.maybe_flush(1050)
    assert log.unflushed_count() == 2
    assert log.maybe_flush(1100)
    assert log.unflushed_count() == 0
    log.append(0, values(1), 0)
    assert not log.maybe_flush(1199)
    assert log.maybe_flush(1200)


def test_no_policy_flushes_only_when_asked(make_log: MakeLog) -> None:
    log = make_log()
    log.append(0, [b"a"], 0)  # tiny: no segment roll
    assert not log.maybe_flush(10**12)
    assert log.unflushed_count() == 1
    log.flush()
    assert log.unflushed_count() == 0


def test_truncation_reduces_unflushed_count(make_log: MakeLog) -> None:
    log = make_log()
    log.append(0, [b"a"], 0)
    log.flush()
    log.append(0, values(3), 0)
    assert log.unflushed_count() == 3
    log.truncate_to(2)
    assert log.unflushed_count() == 1
    log.truncate_to(0)
    assert log.unflushed_count() == 0


def test_closed_log_refuses_use(make_log: MakeLog) -> None:
    log = make_log()
    log.append(0, [b"a"], 0)
    log.close(clean=True)
    log.close(clean=True)
    with pytest.raises(LogClosedError):
        log.append(0, [b"b"], 0)
    with pytest.raises(LogClosedError):
        log.read(0, 1)


def test_memory_log_power_loss_keeps_only_flushed() -> None:
    log = MemoryLog()
    log.append(0, values(3), 0)
    log.flush()
    log.append(1, values(2), 0)
    assert log.lose_unflushed() == 2
    assert log.end_offset == 3 and log.epoch_entries() == [(0, 0)]
    assert [r.value for r in log.read(0, 10)] == values(3)


def test_memory_log_unflushed_truncation_comes_back_after_power_loss() -> None:
    log = MemoryLog()
    log.append(0, values(3), 0)
    log.flush()
    log.truncate_to(1)
    log.append(4, [b"new"], 0)
    log.lose_unflushed()
    assert [r.value for r in log.read(0, 10)] == values(3)
    assert log.epoch_entries() == [(0, 0)]


def test_memory_log_clean_close_flushes() -> None:
    log = MemoryLog()
    log.append(0, values(3), 0)
    log.close(clean=True)
    assert log.lose_unflushed() == 0 and log.end_offset == 3
