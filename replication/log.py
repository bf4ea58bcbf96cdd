"""The partition log interface, its leader-epoch cache, and an in-memory implementation.

`Log` owns everything that does not depend on where the records live: offset and epoch
validation, the leader-epoch cache (Kafka's LeaderEpochFileCache) and the flush policy.
Subclasses only store, read, drop and sync records. `MemoryLog` keeps records in lists and
models durability (what a flush made durable, what a power loss drops) so that sans-IO tests
and a deterministic simulator see the same durability behaviour as files on disk.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

UNDEFINED = -1


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    epoch: int
    timestamp_ms: int
    value: bytes


class OffsetOutOfRange(ValueError):
    """A read asked for an offset outside [start_offset, end_offset]."""


class LogClosedError(RuntimeError):
    """The log was used after close()."""


class EpochCache:
    """Leader epoch -> first offset written in that epoch, both strictly increasing."""

    def __init__(self, entries: Sequence[tuple[int, int]] = ()) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries:
            self.assign(epoch, start)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; returns whether the cache changed.

        An entry at or past `start_offset` can only be an epoch that never got a record (a
        checkpoint written when new leaders still entered their epoch before appending), so a
        newer epoch replaces it, as Kafka does.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
        latest = self.latest_epoch()
        if epoch == latest:
            return False
        if epoch < latest:
            raise ValueError(f"epoch {epoch} is older than the latest epoch {latest}")
        cut = bisect.bisect_left(self._starts, start_offset)
        del self._epochs[cut:], self._starts[cut:]
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from(self, offset: int) -> bool:
        """Drop entries for epochs that start at or after `offset`; returns whether any were."""
        cut = bisect.bisect_left(self._starts, offset)
        if cut == len(self._starts):
            return False
        del self._epochs[cut:], self._starts[cut:]
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest known epoch <= `epoch`, where the next one starts).

        The end offset of the latest epoch is the log end offset. Unlike Kafka, which
        answers UNDEFINED for an epoch above the latest, this answers the latest epoch and
        the LEO (the follower then truncates to the smaller of both ends); an epoch below
        every known epoch answers (-1, -1).
        """
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if epoch < 0 or i < 0:
            return UNDEFINED, UNDEFINED
        if i == len(self._epochs) - 1:
            return self._epochs[i], log_end_offset
        return self._epochs[i], self._starts[i + 1]

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> EpochCache:
        cache = cls()
        for r in records:
            cache.assign(r.epoch, r.offset)
        return cache


class Log(ABC):
    """A partition replica's log: append, read, truncate, epochs and the flush policy.

    Flush policy (Kafka's topic configs): `flush_messages` N flushes once N records are
    unflushed; `flush_ms` T flushes when `maybe_flush` sees unflushed data and T ms have
    passed since the last flush (or since it first saw the data dirty); with neither, only
    segment rolls and a clean close flush.
    """

    def __init__(
        self,
        *,
        flush_messages: int | None = None,
        flush_ms: int | None = None,
        end_offset: int = 0,
        epochs: Sequence[tuple[int, int]] = (),
    ) -> None:
        if flush_messages is not None and flush_messages < 1:
            raise ValueError(f"flush.messages must be >= 1, got {flush_messages}")
        if flush_ms is not None and flush_ms < 0:
            raise ValueError(f"flush.ms must be >= 0, got {flush_ms}")
        self._flush_messages = flush_messages
        self._flush_ms = flush_ms
        self._end_offset = end_offset
        self._epochs = EpochCache(epochs)
        self._unflushed = 0
        self._flush_clock_ms: int | None = None
        self._closed = False

    # -- storage primitives for subclasses --------------------------------------------------

    @abstractmethod
    def _store(self, records: Sequence[Record]) -> None:
        """Write records (contiguous, starting at the current LEO)."""

    @abstractmethod
    def _load(self, offset: int, max_records: int) -> list[Record]:
        """Return up to max_records stored records from offset (< LEO)."""

    @abstractmethod
    def _drop_from(self, offset: int) -> None:
        """Remove stored records at offsets >= offset (< LEO)."""

    @abstractmethod
    def _sync(self) -> None:
        """Make every stored record durable."""

    @abstractmethod
    def _epochs_changed(self) -> None:
        """Persist the epoch cache; called after every change to it."""

    # -- the interface -----------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return 0

    @property
    def end_offset(self) -> int:
        """The log end offset (LEO): the offset the next record gets."""
        return self._end_offset

    def append(self, epoch: int, values: Sequence[bytes], timestamp_ms: int) -> tuple[int, int]:
        """Leader append at the LEO; returns the first and last offsets assigned."""
        if not values:
            raise ValueError("append needs at least one value")
        first = self._end_offset
        records = [
            Record(first + i, epoch, timestamp_ms, bytes(v)) for i, v in enumerate(values)
        ]
        self._add(records)
        return first, first + len(records) - 1

    def append_records(self, records: Sequence[Record]) -> None:
        """Follower append of records fetched from the leader, starting exactly at the LEO."""
        if not records:
            return
        expected = self._end_offset
        epoch = self._epochs.latest_epoch()
        for r in records:
            if r.offset != expected:
                raise ValueError(f"record offset {r.offset} where {expected} was expected")
            if r.epoch < epoch:
                raise ValueError(f"record {r.offset} has epoch {r.epoch} after epoch {epoch}")
            expected, epoch = expected + 1, r.epoch
        self._add(records)

    def read(self, offset: int, max_records: int) -> list[Record]:
        """Records from `offset`, at most max_records; [] at the LEO."""
        self._check_open()
        if not self.start_offset <= offset <= self._end_offset:
            raise OffsetOutOfRange(
                f"offset {offset} outside [{self.start_offset}, {self._end_offset}]"
            )
        if max_records <= 0 or offset == self._end_offset:
            return []
        return self._load(offset, max_records)

    def truncate_to(self, offset: int) -> int:
        """Remove records at offsets >= offset and their epochs; returns how many went."""
        self._check_open()
        if offset < self.start_offset:
            raise ValueError(f"cannot truncate to {offset} below start {self.start_offset}")
        if offset >= self._end_offset:
            return 0
        removed = self._end_offset - offset
        self._drop_from(offset)
        self._end_offset = offset
        self._unflushed = max(0, self._unflushed - removed)
        if self._epochs.truncate_from(offset):
            self._epochs_changed()
        return removed

    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._epochs.end_offset_for(epoch, self._end_offset)

    def epoch_entries(self) -> list[tuple[int, int]]:
        return self._epochs.entries()

    def flush(self) -> None:
        self._check_open()
        self._sync()
        self._mark_flushed()

    def unflushed_count(self) -> int:
        return self._unflushed

    def maybe_flush(self, now_ms: int) -> bool:
        """Apply the flush policy at time now_ms; returns whether it flushed."""
        self._check_open()
        if self._unflushed == 0:
            self._flush_clock_ms = now_ms
            return False
        if self._flush_clock_ms is None:
            self._flush_clock_ms = now_ms
        due_count = self._flush_messages is not None and self._unflushed >= self._flush_messages
        due_time = self._flush_ms is not None and now_ms - self._flush_clock_ms >= self._flush_ms
        if not (due_count or due_time):
            return False
        self.flush()
        self._flush_clock_ms = now_ms
        return True

    def close(self, clean: bool) -> None:
        """Close; a clean close flushes everything first. Idempotent."""
        if self._closed:
            return
        if clean:
            self.flush()
        self._closed = True

    # -- shared internals ----------------------------------------------------------------

    def _add(self, records: Sequence[Record]) -> None:
        self._check_open()
        latest = self._epochs.latest_epoch()
        if records[0].epoch < 0:
            raise ValueError(f"epoch {records[0].epoch} is negative")
        if records[0].epoch < latest:
            raise ValueError(f"epoch {records[0].epoch} is older than the latest epoch {latest}")
        self._store(records)
        self._end_offset = records[-1].offset + 1
        self._unflushed += len(records)
        changed = False
        for r in records:
            changed |= self._epochs.assign(r.epoch, r.offset)
        if changed:
            self._epochs_changed()
        if self._flush_messages is not None and self._unflushed >= self._flush_messages:
            self.flush()

    def _mark_flushed(self) -> None:
        """Everything stored so far is durable (a flush or a segment roll did it)."""
        self._unflushed = 0
        self._flush_clock_ms = None

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("log is closed")


class MemoryLog(Log):
    """A log in memory that remembers what was flushed, to model power loss.

    Like a file system without fsync on truncate, a truncation only becomes durable at the
    next flush: `lose_unflushed` restores the records as of the last flush, including ones
    truncated since, and rebuilds the epoch cache from them as recovery on disk does.
    """

    def __init__(self, *, flush_messages: int | None = None, flush_ms: int | None = None) -> None:
        super().__init__(flush_messages=flush_messages, flush_ms=flush_ms)
        self._records: list[Record] = []
        self._durable: list[Record] = []

    def _store(self, records: Sequence[Record]) -> None:
        self._records.extend(records)

    def _load(self, offset: int, max_records: int) -> list[Record]:
        return self._records[offset : offset + max_records]

    def _drop_from(self, offset: int) -> None:
        del self._records[offset:]

    def _sync(self) -> None:
        self._durable = list(self._records)

    def _epochs_changed(self) -> None:
        """The checkpoint file is written durably on every change: nothing to model."""

    def durable_records(self) -> list[Record]:
        return list(self._durable)

    def restart(self) -> None:
        """A broker restart that kept the page cache (kill or clean stop), as SegmentLog
        reopening sees it: every record survives and is synced by recovery, and epochs
        that never got a record are forgotten. Reopens a closed log."""
        self._sync()
        self._recovered()

    def lose_unflushed(self) -> int:
        """Power loss and restart: back to the last flushed state; returns how many records
        the LEO lost. Reopens a closed log."""
        before = self._end_offset
        self._records = list(self._durable)
        self._recovered()
        return max(0, before - self._end_offset)

    def _recovered(self) -> None:
        self._end_offset = len(self._records)
        self._epochs = EpochCache.from_records(self._records)
        self._mark_flushed()
        self._closed = False
