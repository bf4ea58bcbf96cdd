"""Per-node simulated disks with the lossy filesystem's durability model (docs/lazyfs.md).

A node's disk outlives its processes. It holds:

- one `SimLog` per partition replica: a `MemoryLog` (flush.messages / flush.ms honoured by the
  shared `Log` code) that also knows its byte sizes, rolls segments like `SegmentLog` (a roll
  fsyncs), and can be torn or poisoned;
- the clean-shutdown marker and the HWM checkpoint, written atomically and fsynced (so always
  durable), as `BrokerStore` writes them;
- the controller's metadata log, one record per `Persist`, fsynced before anything after it.

What the faults do, as on the lossy filesystem:

- **kill** (SIGKILL): the page cache survives. The next open of a log recovers it the way
  `SegmentLog` does on start: everything that survived is synced, epochs without records are
  forgotten (`MemoryLog.restart`).
- **power loss** (`lose_unsynced`): every log goes back to its last fsynced state; a truncation
  not fsynced since is undone (`MemoryLog.lose_unflushed`). A log that was never fsynced would
  be gone: in the current code a new log is fsynced when it is opened, so that is the same as
  empty.
- **torn power loss** (`torn`): as lazyfs's `prefix` mode, a uniformly random number of the
  unsynced bytes (a seeded cut) reaches the disk, in offset order: whole records before the
  cut survive, the record the cut falls into is a torn tail that recovery cuts off (reported
  as `log-recovery` with its bytes at the next start), the rest is lost. A cut at 0 leaves the
  durable state, pending truncation included.
- **page-cache loss** (`page_cache_loss`): the same loss under a running process. Like
  lazyfs, which fails every descriptor open across a loss with EIO, every read, write,
  truncation and fsync of the running process's logs (and every append to the controller's
  metadata log) then raises OSError(EIO); what needs no I/O (the LEO, the epoch cache, a
  read at the log end, the HWM checkpoint, written to a new file) still works. The process
  sees the loss only when it restarts.

Storage port: as on real hosts (replication/driver.py), a broker's logs defer their fsyncs (`defer_sync=True`, see
replication/log.py): the flush policy, a segment roll and the recovery on open ask for a sync,
the broker hands it out as a `Sync` output, and the node runs it on its storage queue after a
seeded fsync latency (`DiskConfig.fsync`; simulation/node.py). Until a job has run, what it
covers is not durable: a power loss meanwhile loses it. The controller's metadata log is
fsynced per record on the event loop, taking the same latency.
"""

from __future__ import annotations

import errno
import inspect
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from replication.log import MemoryLog, Record
from replication.segment_format import encoded_size
from replication.segment_log import RecoveryInfo
from simulation.network import Latency

# Whether the logs have the storage port (replication/log.py's defer_sync).
HAS_STORAGE_PORT = "defer_sync" in inspect.signature(MemoryLog.__init__).parameters


@dataclass(frozen=True)
class DiskConfig:
    """fsync: how long one fsync takes (None: instantly, and brokers sync inline). The
    default, an assumption for a local SSD under a FUSE layer, is a lognormal with median
    1 ms (p99 about 6 ms) plus, one time in 200, an extra 10-50 ms (a busy disk queue)."""

    fsync: Latency | None = field(default_factory=lambda: Latency(
        median_ms=1.0, sigma=0.8, tail_probability=0.005, tail_min_ms=10.0, tail_max_ms=50.0))


def _eio() -> OSError:
    return OSError(errno.EIO, "Input/output error (descriptor open across a page-cache loss)")


def _raise_eio(*_args: Any) -> Any:
    raise _eio()


# The MemoryLog primitives that read or write the files (see replication/log.py's Log).
_IO_PRIMITIVES = ("_store", "_load", "_drop_from", "_sync")


# segment_format's per-record bytes besides the value (length, CRC, offset, epoch, timestamp)
_OVERHEAD = encoded_size(Record(0, 0, 0, b""))


class SimLog(MemoryLog):
    """A MemoryLog that rolls segments like SegmentLog and can be torn or poisoned."""

    def __init__(self, *, flush_messages: int | None, flush_ms: int | None,
                 segment_bytes: int, defer_sync: bool = False) -> None:
        if defer_sync and HAS_STORAGE_PORT:
            super().__init__(flush_messages=flush_messages, flush_ms=flush_ms, defer_sync=True)
        else:
            super().__init__(flush_messages=flush_messages, flush_ms=flush_ms)
        self.deferred = bool(getattr(self, "defer_sync", False))
        self.segment_bytes = segment_bytes
        self._segment_fill = 0  # bytes in the active segment
        self.lost_under_process = False  # a page-cache loss happened while this was open
        self.torn_bytes = 0  # a torn tail that recovery cuts off at the next open
        self.recovery_info = RecoveryInfo(0, 0, 0, False)  # what the last open cut off
        self.fsyncs = 0
        # The lowest offset whose record changed other than by an append (a truncation, a
        # loss, a recovery) since the invariant monitor last looked (simulation/invariants.py)
        self.changed_from: int | None = None

    # ---- storage primitives ---------------------------------------------------------------------

    def _store(self, records: Sequence[Record]) -> None:
        size = _OVERHEAD * len(records) + sum([len(r.value) for r in records])
        if self._segment_fill and self._segment_fill + size > self.segment_bytes:
            # SegmentLog._roll: the finished segment is fsynced (deferred: a sync is asked for
            # and nothing from the new segment on settles before it), the new one starts empty
            if self.deferred:
                self._request_sync(self._end_offset)
            else:
                self._sync()
                self._mark_flushed()
            self._segment_fill = 0
        super()._store(records)
        self._segment_fill += size

    def _sync(self) -> None:
        self.fsyncs += 1
        super()._sync()

    def _drop_from(self, offset: int) -> None:
        super()._drop_from(offset)
        if self.changed_from is None or offset < self.changed_from:
            self.changed_from = offset

    def _recovered(self) -> None:
        super()._recovered()  # records may be back or gone anywhere: look again from 0
        self.changed_from = 0

    def _prepare_sync(self, data: bool, epochs: list[tuple[int, int]] | None) -> Callable[[], None]:
        """The job fails, as an fsync of a descriptor open across a page-cache loss does, if
        the loss happens before it runs."""
        def run() -> None:
            if self.eio:
                raise _eio()
            if data:
                self._sync()
        return run

    @property
    def records(self) -> list[Record]:
        """The stored records, indexed by offset (the live list: read, never change it)."""
        return self._records

    @property
    def eio(self) -> bool:
        """Open across a page-cache loss: every primitive that does I/O fails (replaced on
        the instance, so the healthy path costs nothing extra)."""
        return "_store" in self.__dict__

    @eio.setter
    def eio(self, on: bool) -> None:
        for name in _IO_PRIMITIVES:
            if on:
                setattr(self, name, _raise_eio)
            else:
                self.__dict__.pop(name, None)

    # ---- faults ---------------------------------------------------------------------------------

    def dirty(self) -> tuple[int, list[Record], list[Record]]:
        """(common prefix length, records written since the last sync, durable records past
        the common prefix -- a pending truncation brings those back on a loss)."""
        cur, dur = self._records, self._durable
        n = min(len(cur), len(dur))
        c = 0
        # Records are immutable and the durable list copies the current one's references, so
        # the common prefix is where the references stop being the same object.
        while c < n and cur[c] is dur[c]:
            c += 1
        return c, cur[c:], dur[c:]

    def lose(self, rng: random.Random | None = None) -> dict[str, Any]:
        """Power loss (rng None) or torn power loss: what reaches the disk, and a report."""
        c, dirty, restored = self.dirty()
        sizes = [encoded_size(r) for r in dirty]
        unsynced = sum(sizes)
        report: dict[str, Any] = {"unsynced_records": len(dirty), "unsynced_bytes": unsynced}
        keep, torn = 0, 0
        if rng is not None and unsynced:
            cut = rng.randint(0, unsynced)
            acc = 0
            for s in sizes:
                if acc + s > cut:
                    torn = cut - acc
                    break
                acc += s
                keep += 1
        if keep:
            survivors = list(self._records[: c + keep])
        else:
            survivors = list(self._durable)
        kept_bytes = sum(sizes[:keep]) + torn
        report.update(kept_records=keep, kept_bytes=kept_bytes,
                      lost_records=len(dirty) - keep, lost_bytes=unsynced - kept_bytes,
                      restored_records=len(restored) if not keep else 0)
        self._durable = survivors
        self.lose_unflushed()
        self.torn_bytes = torn
        self._segment_fill = sum(encoded_size(r) for r in self._records) % max(1, self.segment_bytes)
        return report

    def opened(self) -> None:
        """A process opens the log: SegmentLog's recovery fsyncs what it found -- inline, or
        (deferred) as the first job, before which nothing of it is settled."""
        if self.deferred:
            self._request_sync(0)
        else:
            self.flush()

    def reopen(self) -> int:
        """Open after the process that had it died: what survived in the page cache is
        recovered (epochs without records forgotten) and synced. Returns the torn bytes
        recovery cut off."""
        self.eio = False
        if self.lost_under_process:
            self.lost_under_process = False
            self.lose_unflushed()  # the loss the dead process never saw
        elif self.deferred:
            self._recovered()  # MemoryLog.restart without its inline sync
        else:
            self.restart()
        if self.deferred:
            self._request_sync(0)
        torn, self.torn_bytes = self.torn_bytes, 0
        return torn


class NodeDisk:
    """Everything of one node that survives its process."""

    def __init__(self, name: str, *, flush_messages: int | None = None, flush_ms: int | None = None,
                 segment_bytes: int = 64 * 1024 * 1024, defer_sync: bool = False) -> None:
        self.name = name
        self.defer_sync = defer_sync
        self.flush_messages = flush_messages
        self.flush_ms = flush_ms
        self.segment_bytes = segment_bytes
        self.logs: dict[tuple[str, int], SimLog] = {}
        self._open: set[tuple[str, int]] = set()  # logs the running process has opened
        self.clean_marker: int | None = None
        self.hwm_checkpoint: dict[str, int] = {}
        self.metadata: list[dict] = []
        self.metadata_eio = False

    # ---- used by the node process ---------------------------------------------------------------

    def open_log(self, topic: str, partition: int) -> SimLog:
        """The partition's log for the running process, recovered; its `recovery_info` says
        what recovery cut off (a torn tail), as SegmentLog's does."""
        key = (topic, partition)
        log = self.logs.get(key)
        torn = 0
        if log is None:
            log = self.logs[key] = SimLog(flush_messages=self.flush_messages, flush_ms=self.flush_ms,
                                          segment_bytes=self.segment_bytes, defer_sync=self.defer_sync)
            log.opened()  # SegmentLog fsyncs a new log (and its directory) when it opens it
        elif key not in self._open:
            torn = log.reopen()
        self._open.add(key)
        # SegmentLog's report of an open; a torn tail is the only cut the simulated disk makes
        log.recovery_info = RecoveryInfo(torn, log.end_offset, 0, False,
                                         "torn-tail" if torn else None)
        return log

    def process_died(self) -> None:
        """The process is gone: its descriptors are closed, the page cache stays."""
        for key in sorted(self._open):
            self.logs[key].close(clean=False)
        self._open.clear()
        self.metadata_eio = False

    def close(self, clean: bool) -> None:
        """BrokerStore.close: a controlled shutdown closes every open log cleanly (each is
        flushed first)."""
        for key in sorted(self._open):
            self.logs[key].close(clean=clean)
        self._open.clear()

    def read_and_delete_clean_marker(self) -> int | None:
        epoch, self.clean_marker = self.clean_marker, None
        return epoch

    def write_clean_marker(self, epoch: int) -> None:
        self.clean_marker = epoch

    def read_hwm_checkpoint(self) -> dict[str, int]:
        return dict(self.hwm_checkpoint)

    def write_hwm_checkpoint(self, hwms: Mapping[str, int]) -> None:
        self.hwm_checkpoint = dict(sorted(hwms.items()))

    def read_metadata(self) -> list[dict]:
        return list(self.metadata)

    def append_metadata(self, record: dict) -> None:
        if self.metadata_eio:
            raise _eio()
        self.metadata.append(record)

    # ---- faults -----------------------------------------------------------------------------------

    def lose_unsynced(self, rng: random.Random | None = None, *, running: bool = False,
                      seed: int | None = None) -> dict[str, Any]:
        """Power loss (running=False: the process is already dead) or page-cache loss
        (running=True). With rng, a torn power loss. Returns what was lost, per file, in the
        spirit of `nemesis.lazyfs ctl lose-unsynced` / `torn`."""
        files: dict[str, Any] = {}
        lost_bytes = lost_records = 0
        for (topic, partition), log in sorted(self.logs.items()):
            if running and (topic, partition) in self._open:
                report = self._lose_under_process(log)
            else:
                report = log.lose(rng)
            lost_bytes += report["lost_bytes"]
            lost_records += report["lost_records"]
            if report["unsynced_bytes"] or report.get("restored_records"):
                files[f"{topic}-{partition}"] = report
        out: dict[str, Any] = {"lost_bytes": lost_bytes, "lost_records": lost_records, "files": files,
                               "dropped_metadata": []}
        if rng is not None:
            out["seed"] = seed
        if running:
            self.metadata_eio = True
        return out

    def _lose_under_process(self, log: SimLog) -> dict[str, Any]:
        """The durable state is what the next start will see; the running process keeps its
        view but every further use fails (EIO), so its state can no longer change."""
        c, dirty, restored = log.dirty()
        unsynced = sum(encoded_size(r) for r in dirty)
        log.eio = True
        log.lost_under_process = True
        return {"unsynced_records": len(dirty), "unsynced_bytes": unsynced, "kept_records": 0,
                "kept_bytes": 0, "lost_records": len(dirty), "lost_bytes": unsynced,
                "restored_records": len(restored)}

    def unsynced(self) -> dict[str, int]:
        """Unsynced records per log with any (for tests and reports)."""
        out = {}
        for (topic, partition), log in sorted(self.logs.items()):
            _c, dirty, _restored = log.dirty()
            if dirty:
                out[f"{topic}-{partition}"] = len(dirty)
        return out
