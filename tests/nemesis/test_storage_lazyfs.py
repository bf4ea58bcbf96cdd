"""SegmentLog on the lossy FUSE filesystem: after a power loss it holds what MemoryLog predicts.

This checks the durability model the simulator relies on (MemoryLog.lose_unflushed) against
real files, a real FUSE mount and real fsync calls: power loss = the process's files closed
without a flush, then the filesystem drops every write not yet fsynced.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.memory_log import MemoryLog

from replication.segment_log import SegmentLog

pytestmark = pytest.mark.fuse

needs_fuse = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"),
    reason="needs root, /dev/fuse and fusermount3 to mount the lossy filesystem",
)


@pytest.fixture
def lossy_dir(tmp_path: Path) -> Iterator[tuple[Path, object]]:
    from nemesis.lazyfs import LazyFSClient, MountOptions, spawn_daemon, unmount

    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    control = str(tmp_path / "control.sock")
    spawn_daemon(MountOptions(str(backing), str(mnt), control))
    try:
        yield mnt, LazyFSClient(control)
    finally:
        unmount(str(mnt))


def power_loss(log: SegmentLog, client, *args) -> SegmentLog:
    log.close(clean=False)
    client.lose_unsynced()
    return SegmentLog(log.dir, *args)


@needs_fuse
def test_unflushed_appends_are_lost_flushed_ones_kept(lossy_dir) -> None:
    mnt, client = lossy_dir
    disk, model = SegmentLog(mnt / "p-0"), MemoryLog()
    for log in (disk, model):
        log.append(0, [b"a", b"b"], 0)
        log.flush()
        log.append(1, [b"c"], 0)
    disk = power_loss(disk, client)
    model.lose_unflushed()
    assert disk.read(0, 10) == model.read(0, 10)
    assert disk.end_offset == 2 and disk.epoch_entries() == [(0, 0)]
    disk.close(clean=True)  # an open file keeps the mount busy


@needs_fuse
def test_a_rolled_segment_survives_power_loss(lossy_dir) -> None:
    mnt, client = lossy_dir
    disk = SegmentLog(mnt / "p-0", segment_bytes=60)
    disk.append(0, [b"first"], 0)
    disk.append(0, [b"second"], 0)  # rolls: the first segment is fsynced
    disk = power_loss(disk, client, None, None, 60)
    assert [r.value for r in disk.read(0, 10)] == [b"first"]
    disk.close(clean=True)


@needs_fuse
@pytest.mark.parametrize("seed", range(3))
def test_random_operations_and_power_losses_match_the_model(lossy_dir, seed: int) -> None:
    mnt, client = lossy_dir
    rng = random.Random(seed)
    flush_messages = rng.choice([None, 2, 5])
    args = (flush_messages, None, 1 << 20)  # no segment rolls: MemoryLog has no segments
    disk = SegmentLog(mnt / "p-0", *args)
    model = MemoryLog(flush_messages=flush_messages)
    for _round in range(8):
        for _ in range(rng.randint(1, 12)):
            op = rng.random()
            if op < 0.6:
                epoch = max(model.latest_epoch(), 0) + rng.choice([0, 0, 1])
                vals = [b"%d" % rng.randrange(10**6) for _ in range(rng.randint(1, 3))]
                assert disk.append(epoch, vals, 7) == model.append(epoch, vals, 7)
            elif op < 0.8:
                to = rng.randint(0, model.end_offset)
                assert disk.truncate_to(to) == model.truncate_to(to)
            else:
                disk.flush()
                model.flush()
        disk = power_loss(disk, client, *args)
        model.lose_unflushed()
        assert disk.read(0, 10**6) == model.read(0, 10**6)
        assert disk.epoch_entries() == model.epoch_entries()
    disk.close(clean=True)


@needs_fuse
@pytest.mark.parametrize(
    ("mode", "value_size", "segment_bytes"),
    [("prefix", 8, 300), ("pages", 1000, 1 << 20)],  # pages: tears need several dirty pages
)
def test_torn_power_loss_recovers_a_prefix_holding_every_flushed_record(
    lossy_dir, mode: str, value_size: int, segment_bytes: int
) -> None:
    mnt, client = lossy_dir
    rng = random.Random(mode)
    args = (None, None, segment_bytes)
    disk = SegmentLog(mnt / "p-0", *args)
    torn_tails = 0
    for round_ in range(10):
        for _ in range(rng.randint(1, 30)):
            disk.append(round_, [rng.randbytes(value_size)] * rng.randint(1, 3), round_)
            if rng.random() < 0.1:
                disk.flush()
        before, durable = disk.read(0, 10**6), disk.end_offset - disk.unflushed_count()
        disk.close(clean=False)
        client.torn(seed=round_, mode=mode)
        disk = SegmentLog(mnt / "p-0", *args)
        after = disk.read(0, 10**6)
        assert durable <= len(after) <= len(before)
        assert after == before[: len(after)]
        torn_tails += disk.recovery_info.truncated_bytes > 0
    disk.close(clean=True)
    assert torn_tails > 0  # the seeds above do tear records
