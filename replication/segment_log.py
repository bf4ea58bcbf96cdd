"""A partition log in segment files, fsynced only as the flush policy says (like Kafka).

Appends are one positional write of one buffer per call (the data directory may be a slow
FUSE mount); the page cache holds them until a flush. A segment is fsynced when it is rolled
and on a clean close. Truncation is not fsynced either, as in Kafka: it becomes durable at the
next flush. Opening a log recovers it: a torn or corrupt tail is cut off, segments after it
are deleted, and the leader-epoch cache is checked against the epochs of the records.
Recovery says why it cut (`RecoveryInfo.reason`): a torn tail (a crash mid-append), a corrupt
record (its CRC or length is wrong, anywhere but an incomplete last record), or a record or
segment that does not continue the log. A replica cut short re-fetches the rest from its leader.

With `defer_sync=True` (log.py, "Storage port") every fsync -- of a flush, of a roll, of the
recovery on open, of the leader-epoch checkpoint -- goes into a `SyncJob` instead: the job
holds duplicates of the file descriptors to sync (so the log may close or roll its own), the
paths of the directory and checkpoint to write, and runs on whatever thread the runtime
chooses. Opening a log then asks for a sync from offset 0: nothing of a recovered log is
revealed until whatever survived in the page cache is durable, as the inline open ensures.

Every file and directory operation goes through `fs` (replication/fs.py): the real OS by
default, an in-memory lossy filesystem in the simulator (simulation/simfs.py). `fsync`, when
given, replaces `fs.fsync` for every fsync (of files and of directories).
"""

from __future__ import annotations

import bisect
import json
import os
import zlib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replication.fs import OS_FS, Fs
from replication.log import EpochCache, Log, Record
from replication.segment_format import (
    HEADER,
    HEADER_SIZE,
    MAX_BODY,
    MIN_BODY,
    base_offset_of,
    decode_buffer,
    encode_records,
    encoded_size,
    scan_segment,
    segment_name,
)

DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024
CHECKPOINT = "leader-epoch-checkpoint"

Fsync = Callable[[int], None]


class CorruptLogError(OSError):
    """Stored data does not match the log's index or a checkpoint is malformed."""


@dataclass(frozen=True, slots=True)
class RecoveryInfo:
    truncated_bytes: int  # torn/corrupt tail bytes cut off, including deleted segments
    end_offset: int  # the log end offset after recovery
    deleted_segments: int  # segments after a corrupt point, removed
    epoch_cache_rebuilt: bool  # the checkpoint disagreed with the records' epochs
    # Why the log was cut, at its first bad point (None when nothing was): "torn-tail",
    # "corrupt" or "discontinuous" (see _break_reason).
    reason: str | None = None


def fsync_dir(fs: Fs, path: Path, fsync: Fsync) -> None:
    fd = fs.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        fs.close(fd)


def atomic_write_json(fs: Fs, path: Path, obj: Any, fsync: Fsync) -> None:
    """Replace `path` so that a crash leaves either the old or the new content, durably."""
    tmp, directory = _scratch_and_directory(path)
    fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fs, fd, json.dumps(obj).encode(), 0)
        fsync(fd)
    finally:
        fs.close(fd)
    fs.replace(tmp, path)
    fsync_dir(fs, directory, fsync)


def _scratch_and_directory(path: Path) -> tuple[Path, Path]:
    """`path`'s scratch file and directory. The HWM checkpoint rewrites the same path every
    second: two new paths parsed each time were most of its cost under PyPy, where such
    rarely run code is not compiled (0.6 ms a checkpoint, 4 % of a simulated run there). A
    plain dict: functools.lru_cache is Python code there too."""
    known = _SCRATCH.get(path)
    if known is None:
        if len(_SCRATCH) >= 1024:
            _SCRATCH.clear()
        known = _SCRATCH[path] = (path.with_name(path.name + ".tmp"), path.parent)
    return known


_SCRATCH: dict[Path, tuple[Path, Path]] = {}


def write_all(fs: Fs, fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        n = fs.pwrite(fd, view, position)
        view, position = view[n:], position + n


class _Segment:
    """One segment file and the positions of its records."""

    def __init__(
        self, fs: Fs, path: Path, base: int, records: Sequence[Record], size: int
    ) -> None:
        self.fs = fs
        self.path = path
        self.base = base
        self.size = size
        self.positions = array("q")
        pos = 0
        for r in records:
            self.positions.append(pos)
            pos += encoded_size(r)
        self.fd: int | None = None
        self._last: _Decoded | None = None  # the last range read, see read()

    @property
    def next_offset(self) -> int:
        return self.base + len(self.positions)

    def open(self) -> int:
        if self.fd is None:
            self.fd = self.fs.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self.fd

    def close(self) -> None:
        self._last = None
        if self.fd is not None:
            self.fs.close(self.fd)
            self.fd = None

    def read(self, offset: int, max_records: int) -> list[Record]:
        positions = self.positions
        rel = offset - self.base
        stop = rel + max_records
        count = len(positions)
        start = positions[rel]
        if stop < count:
            end = positions[stop]
        else:
            stop, end = count, self.size
        buf = self._pread(start, end)
        # A range read again (a leader serves its last append to each follower, after a
        # simulated disk has read it back) holds the same bytes: the records decoded from
        # them last time are the ones decoding would make. Every read still reads the file.
        last = self._last
        if last is not None:
            records = last.reuse(offset, stop - rel, start, end, buf)
            if records is not None:
                return records
        records = decode_buffer(buf, offset)[0]
        if len(records) != stop - rel:
            raise CorruptLogError(
                f"{self.path}: expected records {offset}..{self.base + stop - 1} at bytes "
                f"{start}..{end}, decoded {len(records)} (file changed under the broker?)"
            )
        self._last = _Decoded(offset, buf, records[:], positions[rel:stop], end)  # its own list
        return records


    def _pread(self, start: int, end: int) -> bytes:
        if self.fd is not None:
            return self.fs.pread(self.fd, end - start, start)
        fd = self.fs.open(self.path, os.O_RDONLY)
        try:
            return self.fs.pread(fd, end - start, start)
        finally:
            self.fs.close(fd)


class _Decoded:
    """The records of one range of a segment as decode_buffer made them, with the bytes they
    came from and where each began in the file."""

    __slots__ = ("first", "buf", "records", "bounds")

    def __init__(self, first: int, buf: bytes, records: list[Record], starts: array,
                 end: int) -> None:
        self.first = first  # the offset of records[0]
        self.buf = buf
        self.records = records
        self.bounds = starts.tolist()  # the file position of each record, then the end
        self.bounds.append(end)

    def reuse(self, offset: int, count: int, start: int, end: int,
              buf: bytes) -> list[Record] | None:
        """decode_buffer(buf, offset)'s records, when `buf` (bytes start..end of the file,
        `count` records from `offset` on, by the segment's positions) lies on this range's
        record boundaries and holds the same bytes there: decoding bytes that decoded whole
        before, from the start of one of their records, gives the same records again
        (decode_buffer depends on nothing else). Else None."""
        i = offset - self.first
        j = i + count
        bounds = self.bounds
        if i < 0 or j >= len(bounds) or bounds[i] != start or bounds[j] != end:
            return None
        base = bounds[0]
        if buf != self.buf[start - base:end - base]:
            return None
        return self.records[i:j]


class SegmentLog(Log):
    """The on-disk log of one partition replica, in `dir`."""

    def __init__(
        self,
        dir: Path,
        flush_messages: int | None = None,
        flush_ms: int | None = None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        *,
        fsync: Fsync | None = None,
        defer_sync: bool = False,
        fs: Fs = OS_FS,
    ) -> None:
        if segment_bytes < 1:
            raise ValueError(f"segment.bytes must be >= 1, got {segment_bytes}")
        self.dir = Path(dir)
        self._segment_bytes = segment_bytes
        self._fs = fs
        self._fsync = fs.fsync if fsync is None else fsync
        self._data_dirty = False
        self._dir_dirty = False
        self._retired_fds: list[int] = []  # deferred: rolled segments awaiting their fsync
        fs.makedirs(self.dir)
        segments, epochs, self.recovery_info, rewrite = self._recover()
        self._segments = segments
        self._bases = [s.base for s in segments]
        super().__init__(
            flush_messages=flush_messages,
            flush_ms=flush_ms,
            end_offset=segments[-1].next_offset,
            epochs=epochs,
            defer_sync=defer_sync,
        )
        # After a kill the page cache may still hold writes never fsynced; make them
        # durable now so that unflushed_count() starts true at 0. In every segment: a rolled
        # one's deferred fsync may never have run (the kill came first), and the page cache
        # still holds its tail, which a later power loss would take.
        self._data_dirty = self._dir_dirty = True
        for seg in segments[:-1]:
            self._retired_fds.append(fs.dup(seg.open()))
            seg.close()
        if defer_sync:
            self._epochs_dirty = rewrite
            self._request_sync(0)
        else:
            if rewrite:
                self._epochs_changed()
            self._sync()

    @property
    def _active(self) -> _Segment:
        return self._segments[-1]

    # -- storage primitives --------------------------------------------------------------

    def _store(self, records: Sequence[Record]) -> None:
        size = self._active.size
        buf, positions = encode_records(records, size)
        if size > 0 and size + len(buf) > self._segment_bytes:
            self._roll()
            buf, positions = encode_records(records)  # at the start of the new segment
        seg = self._active
        fd = seg.open()
        try:
            write_all(self._fs, fd, buf, seg.size)
        except OSError:
            self._fs.ftruncate(fd, seg.size)  # leave no partial append behind
            raise
        seg.positions.extend(positions)
        seg.size += len(buf)
        self._data_dirty = True

    def _load(self, offset: int, max_records: int) -> list[Record]:
        active = self._segments[-1]
        if active.base <= offset < active.next_offset:  # nearly every read: from the tail
            return active.read(offset, max_records)
        i = bisect.bisect_right(self._bases, offset) - 1
        out: list[Record] = []
        while len(out) < max_records and i < len(self._segments):
            seg = self._segments[i]
            if offset < seg.next_offset:
                out.extend(seg.read(offset, max_records - len(out)))
                offset = seg.next_offset
            i += 1
        return out

    def _drop_from(self, offset: int) -> None:
        i = bisect.bisect_right(self._bases, offset) - 1
        for seg in self._segments[i + 1 :]:
            seg.close()
            self._fs.unlink(seg.path)
            self._dir_dirty = True
        del self._segments[i + 1 :], self._bases[i + 1 :]
        seg = self._segments[i]
        rel = offset - seg.base
        seg.size = seg.positions[rel]
        del seg.positions[rel:]
        self._fs.ftruncate(seg.open(), seg.size)
        self._data_dirty = True

    def _sync(self) -> None:
        for fd in self._retired_fds:
            try:
                self._fsync(fd)
            finally:
                self._fs.close(fd)
        self._retired_fds = []
        if self._data_dirty or self._job is not None:  # a job out may not have run yet
            self._fsync(self._active.open())
            self._data_dirty = False
        if self._dir_dirty:
            fsync_dir(self._fs, self.dir, self._fsync)
            self._dir_dirty = False

    def _epochs_changed(self) -> None:
        atomic_write_json(self._fs, self.dir / CHECKPOINT, self.epoch_entries(), self._fsync)

    def _prepare_sync(self, data: bool, epochs: list[tuple[int, int]] | None) -> Callable[[], None]:
        fds: list[int] = []
        sync_dir = False
        if data:
            fds, self._retired_fds = self._retired_fds, []
            if self._data_dirty:
                fds.append(self._fs.dup(self._active.open()))
                self._data_dirty = False
            sync_dir, self._dir_dirty = self._dir_dirty, False
        fs, directory, fsync = self._fs, self.dir, self._fsync

        def run() -> None:
            try:
                for fd in fds:
                    fsync(fd)
                if sync_dir:
                    fsync_dir(fs, directory, fsync)
            finally:
                for fd in fds:
                    fs.close(fd)
            if epochs is not None:
                atomic_write_json(fs, directory / CHECKPOINT, epochs, fsync)

        return run

    def close(self, clean: bool) -> None:
        if self._closed:
            return
        super().close(clean)
        for seg in self._segments:
            seg.close()
        for fd in self._retired_fds:  # an unclean close: their fsync never happens
            self._fs.close(fd)
        self._retired_fds = []

    # -- rolling and recovery ------------------------------------------------------------

    def _roll(self) -> None:
        """Start a new segment at the LEO; the finished one is made durable first (deferred:
        a sync is asked for, and nothing from the new segment on is settled before it)."""
        if self.defer_sync:
            if self._data_dirty:
                self._retired_fds.append(self._fs.dup(self._active.open()))
                self._data_dirty = False
        else:
            self._sync()
        self._active.close()
        base = self.end_offset
        seg = _Segment(self._fs, self.dir / segment_name(base), base, [], 0)
        self._fs.ftruncate(seg.open(), 0)  # a stale file of that name holds nothing of this log
        self._segments.append(seg)
        self._bases.append(base)
        if self.defer_sync:
            self._dir_dirty = True
            self._request_sync(base)
        else:
            fsync_dir(self._fs, self.dir, self._fsync)
            self._mark_flushed()

    def _recover(self) -> tuple[list[_Segment], list[tuple[int, int]], RecoveryInfo, bool]:
        fs = self._fs
        fs.unlink(self.dir / (CHECKPOINT + ".tmp"), missing_ok=True)
        files = sorted(
            (base, p)
            for p in (self.dir / name for name in fs.listdir(self.dir))
            if (base := base_offset_of(p)) is not None
        )
        segments: list[_Segment] = []
        expected, min_epoch, truncated, deleted = 0, 0, 0, 0
        derived = EpochCache()
        broken = False
        reason: str | None = None
        for i, (base, path) in enumerate(files):
            if broken or base != expected:
                truncated += fs.size(path)
                fs.unlink(path)
                deleted, broken = deleted + 1, True
                reason = reason or "discontinuous"  # a segment missing or out of place
                continue
            records, valid, size = scan_segment(path, min_epoch, fs)
            if valid < size:
                reason = _break_reason(fs, path, valid, size, last=i == len(files) - 1)
                fs.truncate(path, valid)
                truncated += size - valid
                broken = True
            segments.append(_Segment(fs, path, base, records, valid))
            for r in records:
                derived.assign(r.epoch, r.offset)
            if records:
                expected, min_epoch = records[-1].offset + 1, records[-1].epoch
        if not segments:
            segments.append(_Segment(fs, self.dir / segment_name(0), 0, [], 0))
        rebuilt, rewrite = self._reconcile_checkpoint(derived, segments[-1].next_offset)
        info = RecoveryInfo(truncated, segments[-1].next_offset, deleted, rebuilt, reason)
        return segments, derived.entries(), info, rewrite

    def _reconcile_checkpoint(self, derived: EpochCache, end_offset: int) -> tuple[bool, bool]:
        """Trust the records' epochs: the checkpoint is rewritten from them (by the caller)
        if it disagrees. Returns (whether it disagreed beyond dropping entries at or past the
        LEO, which recovery always does, as Kafka does; whether to rewrite it)."""
        stored = _read_checkpoint(self._fs, self.dir / CHECKPOINT)
        if stored is None:
            return False, bool(derived.entries())
        trimmed = EpochCache(stored)
        trimmed.truncate_from(end_offset)
        rewrite = trimmed.entries() != stored or trimmed.entries() != derived.entries()
        return trimmed.entries() != derived.entries(), rewrite


def _break_reason(fs: Fs, path: Path, valid: int, size: int, last: bool) -> str:
    """Why a segment's records stop at byte `valid`: "torn-tail" when what follows is an
    incomplete record (or only zeroes) at the end of the last segment, as a crash mid-append
    leaves; "corrupt" when the bytes are wrong, not merely missing at the end: a complete
    record failing its CRC, an impossible length, an incomplete record with more of the log
    after it (bit rot, or a torn write that kept a later page of an append and lost an
    earlier one); "discontinuous" when a record with a good CRC does not continue the log
    (wrong offset, leader epoch going backwards: stale bytes of an undurable truncation)."""
    fd = fs.open(path, os.O_RDONLY)
    try:
        rest = fs.pread(fd, size - valid, valid)
    finally:
        fs.close(fd)
    if len(rest) < HEADER_SIZE or not any(rest):
        return "torn-tail" if last else "corrupt"
    length, crc = HEADER.unpack_from(rest)
    if length < MIN_BODY or length > MAX_BODY:
        return "corrupt"
    if HEADER_SIZE + length > len(rest):
        return "torn-tail" if last else "corrupt"
    if zlib.crc32(rest[HEADER_SIZE : HEADER_SIZE + length]) != crc:
        return "corrupt"
    return "discontinuous"


def _read_checkpoint(fs: Fs, path: Path) -> list[tuple[int, int]] | None:
    try:
        text = fs.read_bytes(path).decode()
    except FileNotFoundError:
        return None
    try:
        raw = json.loads(text)
        entries = [(int(e), int(s)) for e, s in raw]
        if EpochCache(entries).entries() != entries:
            raise ValueError("epochs and start offsets must both increase")
    except (ValueError, TypeError) as exc:
        raise CorruptLogError(
            f"{path}: malformed leader-epoch checkpoint (expected a JSON list of "
            f"[epoch, start_offset] pairs, increasing): {exc}"
        ) from exc
    return entries
