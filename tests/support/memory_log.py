"""A partition log in memory that models durability, for the sans-IO unit tests.

Scaffolding, not shipped: the simulator and the real runtime both run `SegmentLog` (on the
simulated or the real filesystem); this log lets a test drive `Replica`s and `Broker`s without
any filesystem, with the durability behaviour of files (what a flush made durable, what a power
loss drops). tests/replication/test_storage_stateful.py holds `SegmentLog` to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from replication.log import EpochCache, Log, Record


class MemoryLog(Log):
    """A log in memory that remembers what was flushed, to model power loss.

    Like a file system without fsync on truncate, a truncation only becomes durable at the
    next flush: `lose_unflushed` restores the records as of the last flush, including ones
    truncated since, and rebuilds the epoch cache from them as recovery on disk does.
    """

    def __init__(self, *, flush_messages: int | None = None, flush_ms: int | None = None,
                 defer_sync: bool = False) -> None:
        super().__init__(flush_messages=flush_messages, flush_ms=flush_ms, defer_sync=defer_sync)
        self._records: list[Record] = []
        self._durable: list[Record] = []
        # read_values' pairs for _records[:len(_values)], made once per record (consumers
        # read the same records again and again); cut with the records, reset on recovery.
        self._values: list[tuple[int, str]] = []

    def _store(self, records: Sequence[Record]) -> None:
        self._records.extend(records)

    def _load(self, offset: int, max_records: int) -> list[Record]:
        return self._records[offset : offset + max_records]

    def read_values(self, offset: int, max_records: int) -> list[tuple[int, str]]:
        n = len(self.read(offset, max_records))  # the checks, and whatever _load does
        if not n:
            return []
        end = offset + n
        values = self._values
        if len(values) < end:
            values += [(r.offset, r.value.decode("latin-1")) for r in self._records[len(values):end]]
        return values[offset:end]

    def _drop_from(self, offset: int) -> None:
        del self._records[offset:]
        del self._values[offset:]

    def _sync(self) -> None:
        self._durable = list(self._records)

    def _epochs_changed(self) -> None:
        """The checkpoint file is written durably on every change: nothing to model."""

    def _note_epochs_changed(self) -> None:
        """Nothing to write, so no job for it either."""

    def _prepare_sync(self, data: bool, epochs: list[tuple[int, int]] | None) -> Callable[[], None]:
        """Like an fsync, the job makes durable what is stored when it runs (on the
        simulator's thread: it reads the live record list)."""
        return self._sync if data else (lambda: None)

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
        self._values = []
        self._end_offset = len(self._records)
        self._epochs = EpochCache.from_records(self._records)
        self._mark_flushed()
        self._closed = False
        self._wanted_from = self._inflight_from = self._job = None
        self._epochs_dirty = False

    def abandon_syncs(self) -> None:
        """The runtime that held the job out died with it (a killed broker in a simulator
        that keeps the log object): the work is wanted again, by whoever runs next."""
        if self._job is not None:
            self._job = None
            if self._inflight_from is not None:
                if self._wanted_from is None or self._inflight_from < self._wanted_from:
                    self._wanted_from = self._inflight_from
                self._inflight_from = None
