"""SegmentLog on real files: segments, recovery from torn and corrupt tails, fsync policy."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import pytest
from support.segments import encode_record

from replication.log import Record
from replication.segment_format import (
    HEADER_SIZE,
    decode_buffer,
    encode_records,
    iter_records,
    scan_segment,
    segment_name,
)
from replication.segment_log import CHECKPOINT, CorruptLogError, SegmentLog
from simulation.simfs import SimFs


class FsyncCounter:
    """Real fsync, recording what each call synced."""

    def __init__(self) -> None:
        self.synced: list[str] = []

    def __call__(self, fd: int) -> None:
        self.synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        os.fsync(fd)

    def count(self, suffix: str) -> int:
        return sum(p.endswith(suffix) for p in self.synced)

    def segments(self) -> int:
        return self.count(".log")


def segment_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.suffix == ".log")


def fill(log: SegmentLog, n: int, epoch: int = 0) -> None:
    for i in range(n):
        log.append(epoch, [f"value-{i:04d}".encode()], 1000 + i)


def test_encoding_matches_the_documented_format() -> None:
    data = encode_record(Record(7, 3, -2, b"42"))
    assert data.hex() == (
        "00000016" + f"{zlib.crc32(data[8:]):08x}"
        + "0000000000000007" + "00000003" + "fffffffffffffffe" + "3432"
    )


def test_decoded_records_are_records_with_named_fields() -> None:
    # decode_buffer makes its records without Record's own __new__ (segment_format's
    # _new_record): they must still be Records, equal and hashed as the tuples they are.
    records = [Record(5, 2, 1_700_000_000_000, b"7"), Record(6, 2, -1, b"")]
    decoded, end = decode_buffer(encode_records(records)[0], 5)
    assert decoded == records and end == sum(map(len, [encode_record(r) for r in records]))
    assert all(type(r) is Record for r in decoded)
    assert [(r.offset, r.epoch, r.timestamp_ms, r.value) for r in decoded] == [tuple(r) for r in records]


def test_segments_roll_and_reads_cross_them(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, segment_bytes=100)
    fill(log, 20)
    names = segment_files(tmp_path)
    assert len(names) > 3 and names[0] == segment_name(0)
    reread = [r for n in names for r in iter_records(tmp_path / n)]
    assert [r.offset for r in reread] == list(range(20))
    assert [r.offset for r in log.read(0, 100)] == list(range(20))
    assert [r.offset for r in log.read(3, 7)] == list(range(3, 10))
    for name in names[1:]:
        assert int(name[:-4]) == next(iter_records(tmp_path / name)).offset


def test_one_append_is_one_record_batch_even_past_segment_bytes(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, segment_bytes=50)
    log.append(0, [b"x" * 10] * 5, 0)  # larger than a segment: stays whole
    log.append(0, [b"y"], 0)
    assert segment_files(tmp_path) == [segment_name(0), segment_name(5)]


def test_truncation_across_segments_deletes_later_files(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, segment_bytes=100)
    fill(log, 20)
    log.append(1, [b"e1"], 0)
    assert log.truncate_to(5) == 16
    assert log.epoch_entries() == [(0, 0)]
    names = segment_files(tmp_path)
    assert all(int(n[:-4]) <= 5 for n in names)
    assert [r.offset for r in log.read(0, 100)] == list(range(5))
    log.append(2, [b"after"], 0)
    log.close(clean=True)
    reopened = SegmentLog(tmp_path, segment_bytes=100)
    assert reopened.read(5, 1) == [Record(5, 2, 0, b"after")]
    assert reopened.epoch_entries() == [(0, 0), (2, 5)]
    assert reopened.recovery_info.truncated_bytes == 0


def test_a_second_truncation_after_a_cross_segment_one_and_a_roll_finds_its_segment(
        tmp_path: Path) -> None:
    """The segments and their base offsets stay in step through a truncation across segments:
    the next roll, truncation and reads land in the right files (in simulation this needs two
    truncations in one process's life, which a search rarely makes)."""
    log = SegmentLog(tmp_path, segment_bytes=100)
    fill(log, 20)
    log.truncate_to(5)
    fill(log, 15)  # rolls again past offset 5
    assert len(segment_files(tmp_path)) > 3
    log.truncate_to(17)
    assert [r.offset for r in log.read(0, 100)] == list(range(17))
    assert all(int(n[:-4]) <= 17 for n in segment_files(tmp_path))
    fill(log, 3)
    log.close(clean=True)
    reopened = SegmentLog(tmp_path, segment_bytes=100)
    assert [r.offset for r in reopened.read(0, 100)] == list(range(20))
    assert reopened.recovery_info.truncated_bytes == 0


def test_reopen_recovers_everything_after_a_kill(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, segment_bytes=200)
    fill(log, 10)
    log.append(4, [b"four"], 5)
    log.close(clean=False)  # like SIGKILL: nothing flushed, the page cache keeps the writes
    again = SegmentLog(tmp_path, segment_bytes=200)
    assert again.end_offset == 11
    assert again.read(10, 1) == [Record(10, 4, 5, b"four")]
    assert again.epoch_entries() == [(0, 0), (4, 10)]
    assert again.recovery_info.truncated_bytes == 0
    assert json.loads((tmp_path / CHECKPOINT).read_text()) == [[0, 0], [4, 10]]


def test_torn_tail_at_every_byte_recovers_the_previous_record(tmp_path: Path) -> None:
    src = tmp_path / "src"
    log = SegmentLog(src)
    fill(log, 3)
    log.append(1, [b"the-last-record"], 0)
    log.close(clean=True)
    data = (src / segment_name(0)).read_bytes()
    last = len(encode_record(Record(3, 1, 0, b"the-last-record")))
    good = len(data) - last
    for cut in range(good, len(data)):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / segment_name(0)).write_bytes(data[:cut])
        (d / CHECKPOINT).write_text((src / CHECKPOINT).read_text())
        recovered = SegmentLog(d)
        assert recovered.end_offset == 3, cut
        assert recovered.recovery_info.truncated_bytes == cut - good
        assert recovered.epoch_entries() == [(0, 0)]  # epoch 1 started beyond the LEO
        assert (d / segment_name(0)).stat().st_size == good
        recovered.append(2, [b"next"], 0)
        assert recovered.read(3, 1) == [Record(3, 2, 0, b"next")]
        recovered.close(clean=True)


def test_bad_crc_in_the_middle_ends_the_log_and_drops_later_segments(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, segment_bytes=150)
    fill(log, 20)
    log.close(clean=True)
    first = tmp_path / segment_name(0)
    records, valid, size = scan_segment(first)
    assert valid == size and len(records) >= 3
    data = bytearray(first.read_bytes())
    pos = sum(len(encode_record(r)) for r in records[:2])
    data[pos + HEADER_SIZE + 5] ^= 0xFF  # flip a byte inside record 2's body
    first.write_bytes(bytes(data))
    recovered = SegmentLog(tmp_path, segment_bytes=150)
    assert recovered.end_offset == 2
    assert segment_files(tmp_path) == [segment_name(0)]
    assert recovered.recovery_info.deleted_segments > 0
    assert recovered.recovery_info.truncated_bytes == sum(
        len(encode_record(r)) for r in log_records(20)[2:]
    )


def log_records(n: int) -> list[Record]:
    return [Record(i, 0, 1000 + i, f"value-{i:04d}".encode()) for i in range(n)]


def test_garbage_length_and_resurrected_stale_records_are_cut(tmp_path: Path) -> None:
    seg = tmp_path / segment_name(0)
    good = b"".join(encode_record(r) for r in [Record(0, 3, 0, b"a"), Record(1, 3, 0, b"b")])
    stale = encode_record(Record(2, 2, 0, b"old epoch"))  # valid CRC, epoch goes backwards
    seg.write_bytes(good + stale + b"\xff" * 12)
    log = SegmentLog(tmp_path)
    assert log.end_offset == 2 and log.epoch_entries() == [(3, 0)]
    seg.write_bytes(good + encode_record(Record(5, 3, 0, b"gap")))
    log.close(clean=False)
    assert SegmentLog(tmp_path).end_offset == 2


def test_epoch_going_backwards_across_segments_ends_the_log(tmp_path: Path) -> None:
    (tmp_path / segment_name(0)).write_bytes(encode_record(Record(0, 5, 0, b"a")))
    (tmp_path / segment_name(1)).write_bytes(encode_record(Record(1, 4, 0, b"stale")))
    log = SegmentLog(tmp_path)
    assert (log.end_offset, log.epoch_entries()) == (1, [(5, 0)])
    assert log.recovery_info.truncated_bytes == len(encode_record(Record(1, 4, 0, b"stale")))


def test_missing_segment_in_the_middle_ends_the_log(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, segment_bytes=100)
    fill(log, 20)
    log.close(clean=True)
    names = segment_files(tmp_path)
    (tmp_path / names[1]).unlink()
    recovered = SegmentLog(tmp_path, segment_bytes=100)
    assert recovered.end_offset == int(names[1][:-4])
    assert segment_files(tmp_path) == names[:1]


def test_stale_checkpoint_is_rebuilt_from_the_records(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path)
    log.append(0, [b"a", b"b"], 0)
    log.append(3, [b"c"], 0)
    log.close(clean=True)
    (tmp_path / CHECKPOINT).write_text(json.dumps([[0, 0], [1, 1], [3, 2], [9, 3]]))
    again = SegmentLog(tmp_path)
    assert again.epoch_entries() == [(0, 0), (3, 2)]
    assert again.recovery_info.epoch_cache_rebuilt
    assert json.loads((tmp_path / CHECKPOINT).read_text()) == [[0, 0], [3, 2]]


def test_malformed_checkpoint_is_a_clear_error_and_nothing_is_lost(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path)
    log.append(0, [b"a"], 0)
    log.close(clean=True)
    (tmp_path / CHECKPOINT).write_text("{not json")
    before = (tmp_path / segment_name(0)).read_bytes()
    with pytest.raises(CorruptLogError, match="leader-epoch-checkpoint"):
        SegmentLog(tmp_path)
    assert (tmp_path / segment_name(0)).read_bytes() == before


def test_flush_messages_1_fsyncs_every_append(tmp_path: Path) -> None:
    fsync = FsyncCounter()
    log = SegmentLog(tmp_path, flush_messages=1, fsync=fsync)
    fsync.synced.clear()  # opening syncs once, tested below
    for i in range(5):
        log.append(0, [b"v%d" % i, b"w"], 0)
    assert fsync.segments() == 5
    assert fsync.count(CHECKPOINT + ".tmp") == 1  # the checkpoint changed once (epoch 0)


def test_flush_messages_n_fsyncs_every_n_records(tmp_path: Path) -> None:
    fsync = FsyncCounter()
    log = SegmentLog(tmp_path, flush_messages=4, fsync=fsync)
    fsync.synced.clear()  # opening syncs once, tested below
    for _ in range(12):
        log.append(0, [b"v"], 0)
    assert fsync.segments() == 3
    assert log.unflushed_count() == 0


def test_no_policy_fsyncs_only_on_roll_and_clean_close(tmp_path: Path) -> None:
    fsync = FsyncCounter()
    log = SegmentLog(tmp_path, segment_bytes=100, fsync=fsync)
    fsync.synced.clear()  # opening syncs once, tested below
    fill(log, 2)  # 2 x 38 bytes: still the first segment
    assert fsync.segments() == 0
    assert not log.maybe_flush(10**12)
    fill(log, 20)
    rolls = len(segment_files(tmp_path)) - 1
    assert rolls > 0 and fsync.segments() == rolls
    log.close(clean=True)
    assert fsync.segments() == rolls + 1
    assert log.unflushed_count() == 0


def test_unclean_close_does_not_fsync(tmp_path: Path) -> None:
    fsync = FsyncCounter()
    log = SegmentLog(tmp_path, fsync=fsync)
    fsync.synced.clear()  # opening syncs once, tested below
    fill(log, 3)
    log.close(clean=False)
    assert fsync.segments() == 0


def test_flush_ms_fsyncs_when_due(tmp_path: Path) -> None:
    fsync = FsyncCounter()
    log = SegmentLog(tmp_path, flush_ms=50, fsync=fsync)
    fsync.synced.clear()  # opening syncs once, tested below
    log.maybe_flush(0)
    fill(log, 2)
    assert not log.maybe_flush(49) and fsync.segments() == 0
    assert log.maybe_flush(50) and fsync.segments() == 1


def test_reads_see_unflushed_writes(tmp_path: Path) -> None:
    fsync = FsyncCounter()
    log = SegmentLog(tmp_path, fsync=fsync)
    fsync.synced.clear()  # opening syncs once, tested below
    log.append(0, [b"unflushed"], 0)
    assert log.read(0, 1)[0].value == b"unflushed"
    assert fsync.segments() == 0


def test_open_makes_writes_that_survived_a_kill_durable(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path)
    fill(log, 3)
    log.close(clean=False)
    fsync = FsyncCounter()
    again = SegmentLog(tmp_path, fsync=fsync)
    assert fsync.synced == [str(tmp_path / segment_name(0)), str(tmp_path)]
    assert again.unflushed_count() == 0


def test_a_rolled_segment_whose_fsync_a_kill_preempted_is_durable_after_the_reopen() -> None:
    """Deferred syncs: a roll hands the finished segment's fsync to the storage port, and a
    kill can come before that job runs, leaving the segment's tail in the page cache only.
    The reopen's sync must cover it, since the reopened log counts every record as flushed:
    before it did, a later power loss took records the log held as synced (the invariant
    SyncedRecordsSurvive, `small-segments/safe-mix` seed 156 of campaigns/mutation.toml)."""
    fs = SimFs()
    d = Path("/data/t-0")
    log = SegmentLog(d, segment_bytes=64, defer_sync=True, fs=fs)
    fill(log, 8)  # rolls: the finished segments' fsyncs are asked for, never run
    assert len(fs.listdir(d)) > 3
    log.close(clean=False)
    fs.kill()
    again = SegmentLog(d, segment_bytes=64, fs=fs)  # inline: the reopen's sync runs now
    assert again.unflushed_count() == 0
    again.close(clean=False)
    fs.kill()
    fs.power_loss()
    assert SegmentLog(d, segment_bytes=64, fs=fs).end_offset == 8


def test_stray_files_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / (CHECKPOINT + ".tmp")).write_text("[[")
    log = SegmentLog(tmp_path)
    log.append(0, [b"a"], 0)
    assert (tmp_path / "notes.txt").exists()
    assert not (tmp_path / (CHECKPOINT + ".tmp")).exists()


def _rewritten_then_read(tmp_path: Path) -> tuple[list[Record], list[Record]]:
    """Records 0-4 read whole (what a read reuses later), then records 1-2 read after record 2
    was rewritten in place on disk with a record of the same size and a valid CRC (bytes
    changed under the log): (the first read of 1-2, the read after the rewrite)."""
    log = SegmentLog(tmp_path)
    log.append(0, [b"a", b"b", b"c", b"d", b"e"], 7)
    assert [r.value for r in log.read(0, 5)] == [b"a", b"b", b"c", b"d", b"e"]
    before = log.read(1, 2)
    seg = tmp_path / segment_name(0)
    data = bytearray(seg.read_bytes())
    size = len(encode_record(before[0]))  # every record here has the same size
    data[2 * size:3 * size] = encode_record(Record(2, 0, 7, b"C"))
    seg.write_bytes(bytes(data))
    after = log.read(1, 2)
    log.close(clean=False)
    return before, after


def test_a_range_read_again_is_decoded_again_when_its_bytes_changed(tmp_path: Path) -> None:
    # _Segment.read reuses the records of its last decoded range for a range of the same
    # bytes; what the file holds now is what a read returns, as without the reuse.
    before, after = _rewritten_then_read(tmp_path)
    assert before == [Record(1, 0, 7, b"b"), Record(2, 0, 7, b"c")]
    assert after == [Record(1, 0, 7, b"b"), Record(2, 0, 7, b"C")]


def test_reusing_records_without_comparing_bytes_would_serve_stale_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The must-fail twin of the test above: a reuse that trusts the positions alone.
    from replication import segment_log

    def trusting(self: segment_log._Decoded, offset: int, count: int, start: int, end: int,
                 buf: bytes) -> list[Record] | None:
        i = offset - self.first
        return self.records[i:i + count] if 0 <= i and i + count < len(self.bounds) else None
    monkeypatch.setattr(segment_log._Decoded, "reuse", trusting)
    _, after = _rewritten_then_read(tmp_path)
    assert after == [Record(1, 0, 7, b"b"), Record(2, 0, 7, b"c")]  # stale


def test_a_reused_range_is_the_decoded_one_and_corruption_still_raises(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path)
    fill(log, 12)
    whole = log.read(0, 12)
    for offset, n in [(0, 12), (3, 4), (11, 1), (0, 1), (5, 7)]:
        again = log.read(offset, n)
        assert again == whole[offset:offset + n]
        again.clear()  # a caller's list: changing it changes no later read
    assert log.read(0, 12) == whole == log_records(12)
    seg = tmp_path / segment_name(0)
    data = bytearray(seg.read_bytes())
    data[-1] ^= 0xFF  # record 11's last byte: its CRC fails
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="file changed under the broker"):
        log.read(5, 7)
    log.close(clean=False)
