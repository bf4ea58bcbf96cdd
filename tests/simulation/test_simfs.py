"""SimFs (simulation/simfs.py): the lossy durability model, and the real storage code over it.

SegmentLog and BrokerStore run unchanged over SimFs: their files match the real filesystem's
byte for byte, and after a (torn) power loss their recovery keeps exactly what was fsynced.
"""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from replication.broker_store import CLEAN_MARKER, BrokerStore, LogConfig
from replication.log import Record
from replication.segment_log import CHECKPOINT, SegmentLog
from simulation.simfs import SimFs

D = Path("/data/p-0")
RW = os.O_RDWR | os.O_CREAT


def values(n: int, start: int = 0) -> list[bytes]:
    return [f"value-{i:04d}".encode() for i in range(start, start + n)]


def write_file(fs: SimFs, path: str, data: bytes, fsync: bool) -> None:
    fd = fs.open(path, RW)
    fs.pwrite(fd, data, fs.size(path))
    if fsync:
        fs.fsync(fd)
    fs.close(fd)


def fsync_dir(fs: SimFs, path: str) -> None:
    fd = fs.open(path, os.O_RDONLY | os.O_DIRECTORY)
    fs.fsync(fd)
    fs.close(fd)


def fresh(*dirs: str) -> SimFs:
    fs = SimFs()
    for d in dirs:
        fs.makedirs(d)
    fsync_dir(fs, "/")
    return fs


# -- the durability model: docs/lazyfs.md's table, row by row ------------------------------


def test_a_created_file_never_fsynced_is_gone() -> None:
    fs = fresh("/d")
    write_file(fs, "/d/f", b"abc", fsync=False)
    fs.power_loss()
    assert fs.listdir("/d") == []


def test_a_created_file_whose_directory_was_fsynced_is_empty() -> None:
    fs = fresh("/d")
    write_file(fs, "/d/f", b"abc", fsync=False)
    fsync_dir(fs, "/d")
    fs.power_loss()
    assert fs.read_bytes("/d/f") == b""


def test_a_fsync_of_a_new_file_makes_its_creation_durable_too() -> None:
    fs = fresh("/d")
    write_file(fs, "/d/f", b"abc", fsync=True)
    fs.power_loss()
    assert fs.read_bytes("/d/f") == b"abc"


def test_appends_and_truncations_after_the_last_fsync_are_undone() -> None:
    fs = fresh("/d")
    write_file(fs, "/d/f", b"0123456789", fsync=True)
    write_file(fs, "/d/f", b"more", fsync=False)
    fs.truncate("/d/f", 3)
    assert fs.read_bytes("/d/f") == b"012"
    fs.power_loss()
    assert fs.read_bytes("/d/f") == b"0123456789"


def test_rename_and_unlink_need_a_directory_fsync() -> None:
    fs = fresh("/d")
    write_file(fs, "/d/target", b"old", fsync=True)
    write_file(fs, "/d/tmp", b"new", fsync=True)
    write_file(fs, "/d/gone", b"x", fsync=True)
    fs.replace("/d/tmp", "/d/target")
    fs.unlink("/d/gone")
    assert fs.listdir("/d") == ["target"]
    fs.power_loss()
    assert fs.listdir("/d") == ["gone", "target", "tmp"]
    assert fs.read_bytes("/d/target") == b"old"
    fs.replace("/d/tmp", "/d/target")
    fs.unlink("/d/gone")
    fsync_dir(fs, "/")  # any directory's fsync commits the whole journal, as in lazyfs
    fs.power_loss()
    assert fs.listdir("/d") == ["target"] and fs.read_bytes("/d/target") == b"new"


def test_mkdir_without_a_directory_fsync_is_gone() -> None:
    fs = fresh()
    fs.makedirs("/a/b")
    assert fs.listdir("/a") == ["b"]
    fs.power_loss()
    assert fs.listdir("/") == []


def test_errors_are_those_of_os() -> None:
    fs = fresh("/d")
    with pytest.raises(FileNotFoundError):
        fs.open("/d/missing", os.O_RDONLY)
    with pytest.raises(FileNotFoundError):
        fs.open("/nodir/f", RW)
    with pytest.raises(IsADirectoryError):
        fs.open("/d", os.O_WRONLY)
    fd = fs.open("/d/f", os.O_RDONLY | os.O_CREAT)
    with pytest.raises(OSError) as bad:
        fs.pwrite(fd, b"x", 0)
    assert bad.value.errno == errno.EBADF
    fs.close(fd)
    with pytest.raises(OSError):
        fs.close(fd)


def test_descriptors_are_the_lowest_free_small_ints() -> None:
    fs = fresh("/d")
    a, b = fs.open("/d/a", RW), fs.open("/d/b", RW)
    assert (a, b) == (3, 4)
    fs.close(a)
    assert fs.dup(b) == 3


# -- torn power loss ---------------------------------------------------------------------


def test_torn_power_loss_keeps_a_seeded_prefix_of_the_unsynced_appends() -> None:
    kept = set()
    for seed in range(40):
        fs = fresh("/d")
        write_file(fs, "/d/f", b"durable-", fsync=True)
        write_file(fs, "/d/f", b"0123456789", fsync=False)
        fs.torn_power_loss(random.Random(seed))
        data = fs.read_bytes("/d/f")
        assert (b"durable-0123456789").startswith(data) and len(data) >= 8
        kept.add(len(data) - 8)
        again = fresh("/d")
        write_file(again, "/d/f", b"durable-", fsync=True)
        write_file(again, "/d/f", b"0123456789", fsync=False)
        again.torn_power_loss(random.Random(seed))
        assert again.read_bytes("/d/f") == data, "the same seed, the same cut"
    assert 0 in kept and len(kept) > 5


def test_torn_power_loss_loses_a_pending_truncation() -> None:
    for seed in range(10):
        fs = fresh("/d")
        write_file(fs, "/d/f", b"0123456789", fsync=True)
        fs.truncate("/d/f", 2)
        fs.torn_power_loss(random.Random(seed))
        assert fs.read_bytes("/d/f") == b"0123456789"


# -- page-cache loss -----------------------------------------------------------------------


def test_a_descriptor_open_across_a_page_cache_loss_fails_with_eio() -> None:
    fs = fresh("/d")
    write_file(fs, "/d/f", b"abc", fsync=True)
    fd = fs.open("/d/f", RW)
    fs.page_cache_loss()
    for use in (lambda: fs.pread(fd, 1, 0), lambda: fs.pwrite(fd, b"x", 3),
                lambda: fs.fsync(fd), lambda: fs.ftruncate(fd, 0), lambda: fs.dup(fd)):
        with pytest.raises(OSError) as eio:
            use()
        assert eio.value.errno == errno.EIO
    fs.close(fd)
    fd = fs.open("/d/f", RW)  # a restarted process opens it again
    assert fs.pread(fd, 3, 0) == b"abc"


def test_a_segment_log_across_a_page_cache_loss_fails_with_eio() -> None:
    fs = fresh()
    log = SegmentLog(D, fs=fs)
    log.append(0, values(2), 0)
    fs.page_cache_loss()
    with pytest.raises(OSError) as eio:
        log.append(0, values(1), 0)
    assert eio.value.errno == errno.EIO
    log.close(clean=False)
    assert SegmentLog(D, fs=fs).end_offset == 0  # never fsynced: lost


# -- the storage code over SimFs: the same files as on a real disk ------------------------


def drive(log_dir: Path, fs: SimFs | None) -> list[Record]:
    """Appends across segment rolls, a truncation, more appends, a clean close."""
    kw = {"fs": fs} if fs is not None else {}
    log = SegmentLog(log_dir, flush_messages=3, segment_bytes=120, **kw)
    log.append(0, values(7), 1000)
    log.append(2, values(4, 7), 2000)
    log.truncate_to(9)
    log.append(3, values(5, 20), 3000)
    log.close(clean=True)
    return SegmentLog(log_dir, **kw).read(0, 100)


def test_segment_log_writes_the_same_files_over_simfs_as_on_disk(tmp_path: Path) -> None:
    fs = fresh()
    real, simulated = drive(tmp_path / "p-0", None), drive(D, fs)
    assert simulated == real and [r.offset for r in real] == list(range(14))
    names = sorted(os.listdir(tmp_path / "p-0"))
    assert fs.listdir(D) == names and CHECKPOINT in names and len(names) > 3
    for name in names:
        assert fs.read_bytes(D / name) == (tmp_path / "p-0" / name).read_bytes(), name


def test_a_clean_close_survives_a_power_loss() -> None:
    fs = fresh()
    before = drive(D, fs)
    fs.power_loss()
    again = SegmentLog(D, fs=fs)
    assert again.read(0, 100) == before and again.recovery_info.reason is None
    assert again.epoch_entries() == [(0, 0), (2, 7), (3, 9)]


# -- power loss: recovery keeps exactly what was fsynced ---------------------------------


def records_lost_by_a_power_loss(fsync_works: bool, seed: int) -> list[Record]:
    """Fsynced records missing after a power loss (a seeded run of appends and flushes)."""
    rng = random.Random(seed)
    fs = fresh()
    fsync = fs.fsync if fsync_works else (lambda fd: None)
    log = SegmentLog(D, segment_bytes=rng.choice([60, 200, 10_000]), fsync=fsync, fs=fs)
    flushed: list[Record] = []
    epoch = 0
    for _ in range(rng.randint(1, 20)):
        epoch += rng.random() < 0.2
        log.append(epoch, values(rng.randint(1, 3)), 0)
        if rng.random() < 0.1:
            log.truncate_to(rng.randint(0, log.end_offset))
            flushed = flushed[: log.end_offset]
        if rng.random() < 0.3:
            log.flush()
            flushed = log.read(0, 1000)
    fs.power_loss()
    after = SegmentLog(D, fs=fs).read(0, 1000)
    return [r for r in flushed if r not in after]


@pytest.mark.parametrize("seed", range(30))
def test_after_a_power_loss_recovery_keeps_every_fsynced_record(seed: int) -> None:
    assert records_lost_by_a_power_loss(fsync_works=True, seed=seed) == []


def test_the_check_catches_a_log_whose_fsync_does_nothing() -> None:
    """Must-fail: with a no-op fsync the same check finds fsynced records lost."""
    assert any(records_lost_by_a_power_loss(fsync_works=False, seed=s) for s in range(30))


def test_after_a_power_loss_unflushed_records_are_gone() -> None:
    fs = fresh()
    log = SegmentLog(D, fs=fs)
    log.append(0, values(3), 0)
    log.flush()
    log.append(0, values(4, 3), 0)
    fs.power_loss()
    again = SegmentLog(D, fs=fs)
    assert [r.offset for r in again.read(0, 100)] == [0, 1, 2]
    assert again.recovery_info.reason is None


def flush_through_jobs(log: SegmentLog) -> None:
    """Deferred mode: the flush policy asks for a sync; run every job it hands out."""
    log.maybe_flush(0)
    while (job := log.take_sync_job()) is not None:
        job.run()
        log.sync_done(job)


@pytest.mark.parametrize("defer", [False, True])
def test_a_flushed_truncation_across_segments_recovers_with_nothing_to_cut(defer: bool) -> None:
    fs = fresh()
    log = SegmentLog(D, flush_messages=1, segment_bytes=100, defer_sync=defer, fs=fs)
    flush = flush_through_jobs if defer else SegmentLog.flush
    flush(log)
    for value in values(12):
        log.append(0, [value], 0)
        flush(log)
    assert len(fs.listdir(D)) > 2
    log.truncate_to(1)  # deletes the later segments (two records fill one)
    log.append(0, values(1, 50), 0)  # no roll, no new epoch: only a flush syncs the directory
    flush(log)
    written = log.read(0, 100)
    fs.power_loss()
    again = SegmentLog(D, fs=fs)
    assert again.read(0, 100) == written
    assert again.recovery_info.reason is None and again.recovery_info.deleted_segments == 0


@pytest.mark.parametrize("job_ran", [False, True])
def test_a_deferred_sync_is_durable_only_once_its_job_has_run(job_ran: bool) -> None:
    fs = fresh()
    log = SegmentLog(D, flush_messages=1, defer_sync=True, fs=fs)
    opened = log.take_sync_job()
    opened.run()
    log.sync_done(opened)
    log.append(0, values(2), 0)
    job = log.take_sync_job()
    if job_ran:
        job.run()
    fs.power_loss()
    assert SegmentLog(D, fs=fs).end_offset == (2 if job_ran else 0)


# -- torn power loss: recovery cuts the torn tail ------------------------------------------


def test_a_torn_power_loss_is_recovered_as_a_torn_tail() -> None:
    reasons = set()
    for seed in range(60):
        fs = fresh()
        log = SegmentLog(D, fs=fs)
        log.append(0, values(3), 0)
        log.flush()
        log.append(0, values(5, 3), 0)
        written = log.read(0, 100)
        fs.torn_power_loss(random.Random(seed))
        again = SegmentLog(D, fs=fs)
        kept = again.read(0, 100)
        assert kept == written[: len(kept)] and len(kept) >= 3
        info = again.recovery_info
        reasons.add(info.reason)
        assert (info.reason == "torn-tail") == (info.truncated_bytes > 0)
        assert info.reason in (None, "torn-tail")
        fs.power_loss()
        third = SegmentLog(D, fs=fs)
        assert third.read(0, 100) == kept, "the cut was made durable"
        assert third.recovery_info.reason is None
    assert reasons == {None, "torn-tail"}


# -- BrokerStore over SimFs ----------------------------------------------------------------


def test_broker_store_marker_and_hwm_checkpoint_survive_a_power_loss() -> None:
    fs = fresh()
    store = BrokerStore(Path("/data"), LogConfig(segment_bytes=100), fs=fs)
    log = store.open_log("t", 0)
    log.append(0, values(9), 0)
    store.write_hwm_checkpoint({"t-0": 4})
    store.close(clean=True)
    store.write_clean_marker(7)
    fs.power_loss()
    store = BrokerStore(Path("/data"), fs=fs)
    assert store.read_hwm_checkpoint() == {"t-0": 4}
    assert len(store.open_log("t", 0).read(0, 100)) == 9
    assert store.read_and_delete_clean_marker() == 7
    fs.power_loss()
    store = BrokerStore(Path("/data"), fs=fs)
    assert store.read_and_delete_clean_marker() is None, "its deletion was durable"
    assert CLEAN_MARKER not in fs.listdir("/data")


def test_broker_store_after_a_kill_keeps_the_page_cache() -> None:
    fs = fresh()
    store = BrokerStore(Path("/data"), fs=fs)
    store.open_log("t", 0).append(0, values(4), 0)
    fs.kill()  # the broker is SIGKILLed with its log open
    store = BrokerStore(Path("/data"), fs=fs)
    assert store.open_log("t", 0).end_offset == 4, "a kill keeps the page cache"
    store.open_log("t", 0).append(0, values(2), 0)
    fs.power_loss()
    assert BrokerStore(Path("/data"), fs=fs).open_log("t", 0).end_offset == 4


# -- a torn power loss at every fsync of a run -----------------------------------------------


class Crash(Exception):
    """The host lost power: the process stops here."""


def crash_at(fs: SimFs, k: int, rng: random.Random):
    """An fsync that, at its k-th call, tears the power instead of syncing."""
    calls = 0

    def fsync(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == k:
            fs.torn_power_loss(rng)
            raise Crash
        fs.fsync(fd)

    return fsync


@pytest.mark.parametrize("seed", range(4))
def test_a_crash_at_any_fsync_leaves_a_whole_hwm_checkpoint(seed: int) -> None:
    for k in range(1, 12):  # two fsyncs per write: the file, then the directory
        fs = fresh()
        store = BrokerStore(Path("/data"), fs=fs, fsync=crash_at(fs, k, random.Random(seed)))
        done: dict[str, int] = {}
        trying = done
        try:
            for hwm in range(5):
                trying = {"t-0": hwm}
                store.write_hwm_checkpoint(trying)
                done = trying
        except Crash:
            pass
        assert BrokerStore(Path("/data"), fs=fs).read_hwm_checkpoint() in (done, trying)


@pytest.mark.parametrize("seed", range(4))
def test_a_crash_at_any_fsync_keeps_every_flushed_record(seed: int) -> None:
    rng = random.Random(seed)
    for k in range(1, 40):
        fs = fresh()
        flushed: list[Record] = []
        try:
            log = SegmentLog(D, segment_bytes=80, fsync=crash_at(fs, k, rng), fs=fs)
            for i in range(12):
                log.append(i // 4, values(1 + i % 2, i), 0)
                if i % 3 == 2:
                    log.flush()
                    flushed = log.read(0, 100)
        except Crash:
            pass
        again = SegmentLog(D, fs=fs)
        assert again.read(0, 100)[: len(flushed)] == flushed
        assert again.recovery_info.reason in (None, "torn-tail")


def test_a_loss_reports_what_it_lost_as_lazyfs_does() -> None:
    fs = SimFs()
    fs.makedirs("/d")
    write_file(fs, "/d/kept", b"synced", fsync=True)  # its creation and the mkdir commit too
    write_file(fs, "/d/kept", b"+12345", fsync=False)
    write_file(fs, "/d/new", b"abc", fsync=False)  # created after the last commit
    report = fs.power_loss()
    assert report == {"lost_bytes": 9, "dropped_metadata": ["create /d/new"], "files": {
        "/d/kept": {"unsynced_bytes": 6, "kept_bytes": 0, "lost_bytes": 6},
        "/d/new": {"unsynced_bytes": 3, "kept_bytes": 0, "lost_bytes": 3}}}
    write_file(fs, "/d/kept", b"+12345", fsync=False)
    torn = fs.torn_power_loss(random.Random(3))
    (entry,) = torn["files"].values()
    assert entry["kept_bytes"] + entry["lost_bytes"] == entry["unsynced_bytes"] == 6
    assert fs.read_bytes("/d/kept") == b"synced" + b"+12345"[: entry["kept_bytes"]]
    assert torn["kept_metadata"] == [] and torn["lost_bytes"] == entry["lost_bytes"]


def test_an_overwrite_inside_the_synced_prefix_keeps_the_durable_bytes() -> None:
    """The durable content is a length of the page cache while the file only grows; a
    write or truncation reaching into it must copy it out first."""
    fs = SimFs()
    write_file(fs, "/f", b"0123456789", fsync=True)
    fd = fs.open("/f", RW)
    fs.pwrite(fd, b"XY", 2)
    fs.ftruncate(fd, 5)
    fs.close(fd)
    assert fs.read_bytes("/f") == b"01XY4"
    fs.power_loss()
    assert fs.read_bytes("/f") == b"0123456789"


def test_a_copy_shares_nothing_with_its_original() -> None:
    fs = SimFs()
    fs.makedirs("/d")
    write_file(fs, "/d/f", b"durable", fsync=True)
    write_file(fs, "/d/f", b"+cache", fsync=False)
    twin = fs.copy()
    twin.power_loss()
    write_file(twin, "/d/g", b"x", fsync=True)
    assert fs.read_bytes("/d/f") == b"durable+cache" and fs.listdir("/d") == ["f"]
    assert twin.read_bytes("/d/f") == b"durable" and twin.listdir("/d") == ["f", "g"]
    fs.power_loss()
    assert fs.read_bytes("/d/f") == b"durable"
