"""The partition log interface and its leader-epoch cache.

`Log` owns everything that does not depend on where the records live: offset and epoch
validation, the leader-epoch cache (Kafka's LeaderEpochFileCache) and the flush policy.
Subclasses only store, read, drop and sync records: `segment_log.SegmentLog` in files through
the filesystem port (the OS, or the simulator's lossy in-memory one); the unit tests' in-memory
log (tests/support/memory_log.py) in lists.

Storage port: inline or deferred durability
-------------------------------------------
Writes (appends, truncations) always happen at once: they only reach the page cache, which is
fast. Durability work -- fsync of segment files and of the directory, rewriting the
leader-epoch checkpoint -- is slow on a slow disk, and where it runs is the owner's choice:

- `defer_sync=False` (the default): inline, as Kafka's own append path does with
  `flush.messages`: `append` returns after the fsync. Direct users of `Replica` and the
  simulators use this unless they ask otherwise.
- `defer_sync=True`: the log only *asks* for the work. When the flush policy (or a segment
  roll, or opening the log) wants a sync, the log remembers from which offset records wait
  for it; `take_sync_job()` hands out the work as a `SyncJob` whose `run()` touches nothing
  but what it captured (duplicated file descriptors, paths, a copy of the epoch entries), so
  a runtime can run it on another thread; `sync_done(job)` reports completion. One job per
  log is out at a time; requests made meanwhile go into the next job (group commit).

`settled_end` is the offset below which every sync the policy asked for has completed: the
LEO when nothing is outstanding, else the lowest LEO at which an outstanding sync was asked
for. The replica reveals only the settled prefix (acks=1 acknowledgements, the leader's own
LEO in the HWM, records served to followers, a follower's fetch offset). Because the records
a sync covers are exactly the ones written before it was asked for, and nothing written after
it is revealed before it completes, every outcome an observer can see with deferred syncs is
one the inline log could produce with the fsync taking that long: the durability semantics
(what a power loss can take) are unchanged; only the event loop no longer waits.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

UNDEFINED = -1


class Record(NamedTuple):
    """One record of a partition log. A named tuple, not a frozen dataclass: every fetch
    makes one per record it decodes, and a tuple is made in a third of the time."""

    offset: int
    epoch: int
    timestamp_ms: int
    value: bytes


class OffsetOutOfRange(ValueError):
    """A read asked for an offset outside [start_offset, end_offset]."""


class LogClosedError(RuntimeError):
    """The log was used after close()."""


@dataclass(eq=False)
class SyncJob:
    """Durability work of one log, handed out by `Log.take_sync_job`.

    `run()` performs it; it uses only what was captured when the job was made, so it may
    run on another thread (in the simulator, on its own thread). `data`: it
    syncs records (not only the epoch checkpoint)."""

    log: Log
    run: Callable[[], None]
    data: bool


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
        defer_sync: bool = False,
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
        self.defer_sync = defer_sync
        self._wanted_from: int | None = None  # a sync asked for, not yet in a job
        self._inflight_from: int | None = None  # covered by the job out now
        self._job: SyncJob | None = None
        self._epochs_dirty = False  # deferred: the checkpoint awaits rewriting

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
        """Persist the epoch cache; called after every change to it (inline mode)."""

    def _prepare_sync(self, data: bool, epochs: list[tuple[int, int]] | None) -> Callable[[], None]:
        """Deferred mode: capture what a sync must do now (data: make the stored records
        durable; epochs: write this checkpoint) and return a function doing it that touches
        no state of the log. Subclasses that support `defer_sync` override this."""
        raise NotImplementedError(f"{type(self).__name__} cannot defer its syncs")

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

    def read_values(self, offset: int, max_records: int) -> list[tuple[int, str]]:
        """`read`'s records as (offset, value as latin-1 text) pairs: what a consumer's fetch
        serves (ConsumerFetchReply)."""
        return [(r.offset, r.value.decode("latin-1")) for r in self.read(offset, max_records)]

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
            self._note_epochs_changed()
        return removed

    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._epochs.end_offset_for(epoch, self._end_offset)

    def epoch_entries(self) -> list[tuple[int, int]]:
        return self._epochs.entries()

    def flush(self) -> None:
        """Make everything durable now, inline, whatever the mode (clean close, simulators)."""
        self._check_open()
        self._sync()
        if self._epochs_dirty:
            self._epochs_changed()
            self._epochs_dirty = False
        self._mark_flushed()
        self._wanted_from = self._inflight_from = None

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
        if self.defer_sync:
            self._request_sync(self._end_offset)
        else:
            self.flush()
        self._flush_clock_ms = now_ms
        return True

    # -- deferred syncs (the storage port; see the module docstring) --------------------------

    @property
    def settled_end(self) -> int:
        """Records below this offset need no sync that has not completed yet."""
        end = self._end_offset
        start = self._wanted_from
        if start is not None and start < end:
            end = start
        start = self._inflight_from
        if start is not None and start < end:
            end = start
        return end

    def take_sync_job(self) -> SyncJob | None:
        """The next durability job, if one is wanted and none is out (deferred mode)."""
        if self._job is not None or self._closed or (self._wanted_from is None and not self._epochs_dirty):
            return None
        data = self._wanted_from is not None
        epochs = self.epoch_entries() if self._epochs_dirty else None
        self._epochs_dirty = False
        self._job = SyncJob(self, self._prepare_sync(data, epochs), data)
        self._inflight_from, self._wanted_from = self._wanted_from, None
        return self._job

    def sync_done(self, job: SyncJob) -> None:
        """`job` has run: what it covered is durable. A job the log no longer waits for (it
        was abandoned, or an inline flush did its work) is ignored."""
        if job is self._job:
            self._job = None
            self._inflight_from = None

    def _request_sync(self, from_offset: int) -> None:
        """Deferred mode: records from `from_offset` on wait for a sync of everything stored;
        for the flush policy the flush has happened."""
        if self._wanted_from is None or from_offset < self._wanted_from:
            self._wanted_from = from_offset
        self._mark_flushed()

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
        assign = self._epochs.assign
        for r in records:
            # assign() of the latest epoch changes nothing: call it only where the epoch moves
            if r.epoch != latest:
                changed |= assign(r.epoch, r.offset)
                latest = r.epoch
        if changed:
            self._note_epochs_changed()
        if self._flush_messages is not None and self._unflushed >= self._flush_messages:
            if self.defer_sync:
                self._request_sync(records[0].offset)
            else:
                self.flush()

    def _note_epochs_changed(self) -> None:
        if self.defer_sync:
            self._epochs_dirty = True
        else:
            self._epochs_changed()

    def _mark_flushed(self) -> None:
        """Everything stored so far is durable (a flush or a segment roll did it)."""
        self._unflushed = 0
        self._flush_clock_ms = None

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("log is closed")

