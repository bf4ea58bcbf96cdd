"""Deferred syncs (the storage port, log.py): the log asks for its durability work instead of
doing it, reveals only its settled prefix meanwhile, batches requests into one job at a time,
and -- on segment files -- the job does exactly the fsyncs the inline log would, from any
thread, with what survives a power loss unchanged."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from support.memory_log import MemoryLog

from replication.segment_log import CHECKPOINT, SegmentLog


def values(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_flush_messages_asks_for_a_sync_and_settles_when_it_is_done() -> None:
    log = MemoryLog(flush_messages=2, defer_sync=True)
    log.append(0, values(1), 0)
    assert log.settled_end == 1 and log.take_sync_job() is None  # below flush.messages
    log.append(0, values(1), 0)
    assert log.settled_end == 1, "the append that reached flush.messages waits for its sync"
    job = log.take_sync_job()
    assert job is not None and job.data and log.take_sync_job() is None  # one job at a time
    log.append(0, values(2), 0)  # asks again: the next job
    assert log.settled_end == 1
    job.run()
    log.sync_done(job)
    assert log.settled_end == 2, "the second request is not covered by the first job"
    second = log.take_sync_job()
    second.run()
    log.sync_done(second)
    assert log.settled_end == log.end_offset == 4 and log.take_sync_job() is None


def test_a_power_loss_before_the_job_runs_loses_what_it_would_have_synced() -> None:
    log = MemoryLog(flush_messages=1, defer_sync=True)
    log.append(0, values(2), 0)
    job = log.take_sync_job()
    job.run()
    log.sync_done(job)
    log.append(0, [b"late"], 0)
    assert log.take_sync_job() is not None  # handed out, never run: the broker died
    assert log.lose_unflushed() == 1
    assert (log.end_offset, log.settled_end, log.take_sync_job()) == (2, 2, None)


def test_flush_ms_and_an_inline_flush() -> None:
    log = MemoryLog(flush_ms=100, defer_sync=True)
    log.append(0, values(1), 0)
    assert log.maybe_flush(0) is False
    assert log.maybe_flush(100) is True and log.settled_end == 1  # nothing appended since
    log.append(0, values(1), 0)
    assert log.settled_end == 1, "records after a requested sync wait for it"
    job = log.take_sync_job()
    log.flush()  # inline: everything durable now (clean close, simulators)
    assert log.settled_end == 2 and log.lose_unflushed() == 0
    log.sync_done(job)  # the late completion changes nothing
    assert log.settled_end == 2


def test_abandoned_jobs_are_wanted_again() -> None:
    log = MemoryLog(flush_messages=1, defer_sync=True)
    log.append(0, values(1), 0)
    job = log.take_sync_job()
    log.abandon_syncs()
    assert log.settled_end == 0
    log.sync_done(job)  # the dead runtime's job: ignored
    assert log.settled_end == 0
    again = log.take_sync_job()
    again.run()
    log.sync_done(again)
    assert log.settled_end == 1


def test_truncation_below_a_pending_sync() -> None:
    log = MemoryLog(flush_messages=1, defer_sync=True)
    log.append(0, values(3), 0)
    job = log.take_sync_job()
    log.truncate_to(1)
    assert log.settled_end == 0
    job.run()
    log.sync_done(job)
    assert log.settled_end == log.end_offset == 1 and log.lose_unflushed() == 0


class Fsyncs:
    """An fsync that records the thread it ran on."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def __call__(self, fd: int) -> None:
        import os
        self.threads.append(threading.current_thread().name)
        os.fsync(fd)


def _run_elsewhere(job) -> None:
    t = threading.Thread(target=job.run, name="storage")
    t.start()
    t.join()


def test_segment_log_does_its_fsyncs_in_the_job(tmp_path: Path) -> None:
    fsync = Fsyncs()
    log = SegmentLog(tmp_path / "p", flush_messages=1, fsync=fsync, defer_sync=True)
    assert log.settled_end == 0
    _run_elsewhere(opened := log.take_sync_job())  # recovery's sync on open
    log.sync_done(opened)
    fsync.threads.clear()
    log.append(3, values(2), 0)  # a new epoch: the checkpoint is due too
    assert fsync.threads == [], "nothing is fsynced on the caller's thread"
    assert log.settled_end == 0
    job = log.take_sync_job()
    _run_elsewhere(job)
    log.sync_done(job)
    assert set(fsync.threads) == {"storage"} and len(fsync.threads) >= 3  # segment, tmp, dir
    assert log.settled_end == 2
    assert (tmp_path / "p" / CHECKPOINT).read_text() == "[[3, 0]]"
    log.close(clean=False)
    again = SegmentLog(tmp_path / "p")
    assert again.read(0, 10)[1].value == b"v1"


def test_segment_log_roll_syncs_the_finished_segment_in_the_job(tmp_path: Path) -> None:
    fsync = Fsyncs()
    log = SegmentLog(tmp_path / "p", segment_bytes=60, fsync=fsync, defer_sync=True)
    job = log.take_sync_job()
    job.run()
    log.sync_done(job)
    log.append(0, values(2), 0)  # no flush policy: only the new epoch's checkpoint to write
    checkpoint = log.take_sync_job()
    assert log.settled_end == 2 and not checkpoint.data
    checkpoint.run()
    log.sync_done(checkpoint)
    fsync.threads.clear()
    log.append(0, values(2, "w"), 0)  # rolls: the first segment must be durable first
    assert fsync.threads == [] and log.settled_end == 2
    roll = log.take_sync_job()
    _run_elsewhere(roll)
    log.sync_done(roll)
    assert fsync.threads and log.settled_end == 4
    assert len(list((tmp_path / "p").glob("*.log"))) == 2


def test_clean_close_flushes_inline_whatever_is_outstanding(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "p", flush_messages=1, defer_sync=True)
    log.append(0, values(2), 0)
    log.take_sync_job()  # handed out, not run
    log.close(clean=True)
    assert [r.value for r in SegmentLog(tmp_path / "p").read(0, 5)] == values(2)


@pytest.mark.parametrize("defer", [False, True])
def test_unflushed_count_is_the_policys_count_in_both_modes(defer: bool) -> None:
    log = MemoryLog(flush_messages=3, defer_sync=defer)
    log.append(0, values(2), 0)
    assert log.unflushed_count() == 2
    log.append(0, values(1), 0)
    assert log.unflushed_count() == 0
