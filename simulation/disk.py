"""A node's simulated disk: the storage code of real hosts over an in-memory lossy filesystem.

A node's disk outlives its processes. It is one `SimFs` (simfs.py: lazyfs's durability model,
docs/lazyfs.md), and each process of the node runs the real storage code over it, as on a
host's data directory:

- a broker opens a `BrokerStore` on /data (replication/broker_store.py): one `SegmentLog` per
  partition replica (segment files, the leader-epoch checkpoint, recovery of torn, corrupt
  and discontinuous tails on open), the clean-shutdown marker and the HWM checkpoint;
- the controller's metadata log is a `MetadataFile` (replication/metadata_file.py), each
  record fsynced before the append returns.

The faults are the filesystem's:

- **kill** (SIGKILL, and every process exit): `SimFs.kill`, the process's descriptors close,
  the page cache survives. The next process's `SegmentLog` recovers what it finds.
- **power loss** (`lose`): `SimFs.power_loss`, every file and the namespace go back to their
  durable state; with an rng, `SimFs.torn_power_loss` (lazyfs's `torn --mode prefix`: a
  seeded prefix of the unsynced bytes reaches the disk, so recovery cuts a torn tail and
  reports it as `log-recovery` at the next start).
- **corrupt-segment** (`corrupt`, the process is dead already): one record of one segment
  file damaged (bits flipped, or the file cut mid-record) and synced, as on real hosts; the
  next process's `SegmentLog` cuts the log there by CRC and re-fetches the rest.
- **page-cache loss** (`lose(running=True)`): `SimFs.page_cache_loss` under the running
  process; every descriptor it has open fails with EIO from then on (its appends, its
  syncs, the controller's metadata appends), as lazyfs's do; what needs no I/O, or opens a
  new file, still works.

Storage port: as on real hosts (replication/driver.py), a broker's logs defer their fsyncs
(`defer_sync=True`, replication/log.py): the node runs each `Sync` job on its storage queue
after a seeded fsync latency (`DiskConfig.fsync`; simulation/node.py), and until it has run
what it covers is not durable. With instant fsyncs (`DiskConfig(fsync=None)`) the logs sync
inline. The controller's metadata append fsyncs on the event loop, which then blocks for one
fsync latency.

What the invariant monitor reads (simulation/invariants.py): one `LogView` per partition
replica (`NodeDisk.views`) and the metadata log's records (`metadata_records`,
`metadata_since`), both read off the simulated files through the storage code; see
`LogView` for when its records are read. Nothing else reads the disk.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from checkers.invariants import synced_record_lost
from nemesis import segment_damage
from replication.broker_store import BrokerStore, LogConfig
from replication.log import Record, SyncJob
from replication.metadata_file import METADATA_LOG, MetadataFile, parse_records
from replication.segment_log import SegmentLog
from simulation.network import Latency
from simulation.simfs import SimFs

DATA_DIR = PurePosixPath("/data")  # every node's data directory, on its own SimFs
METADATA_PATH = DATA_DIR / METADATA_LOG  # the controller's metadata log


@dataclass(frozen=True)
class DiskConfig:
    """fsync: how long one fsync takes (None: instantly, and brokers sync inline). The
    default, an assumption for a local SSD under a FUSE layer, is a lognormal with median
    1 ms (p99 about 6 ms) plus, one time in 200, an extra 10-50 ms (a busy disk queue)."""

    fsync: Latency | None = field(default_factory=lambda: Latency(
        median_ms=1.0, sigma=0.8, tail_probability=0.005, tail_min_ms=10.0, tail_max_ms=50.0))


class LogView:
    """One partition replica's log on a node's disk, as the invariant monitor reads it.

    `records`: its records by offset, as the storage code reads them off the simulated
    files. While a process has the log open: what that process's `SegmentLog` holds, each
    append read back through the log's own read path as it is stored. When none has it
    open: what the next recovery will keep, computed after a loss by the real recovery
    (`SegmentLog` opened on a scratch copy of the disk). At each open: what the recovery
    kept.
    `changed_from`: the lowest offset whose record changed other than by an append since
    the monitor last looked (it sets it back to None).
    `synced`: the first `synced` records had an fsync complete after they were stored (a
    sync job of the log ran to its end, or an inline sync returned), and were not truncated
    since: what the SyncedRecordsSurvive invariant holds the next recovery to.
    `lost_synced`: each time a recovery broke that (checkers/invariants.py,
    `synced_record_lost`): {"offset", "synced", "had", "found", "after"}.
    `cuts`: (offset, the first record removed) of each truncation since the monitor last
    looked (it empties it): what TruncationAtDivergence compares with the leader's log.
    `unsynced_clean`: (synced, end) of each clean close that left records without a completed
    fsync (CleanCloseDurable; the monitor empties it).
    """

    __slots__ = ("records", "changed_from", "synced", "lost_synced", "cuts", "unsynced_clean",
                 "_claims")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.changed_from: int | None = None
        self.synced = 0
        self.lost_synced: list[dict[str, Any]] = []
        self.cuts: list[tuple[int, Record]] = []
        self.unsynced_clean: list[tuple[int, int]] = []
        self._claims: list[list[int]] = []  # [end] of each sync job out, lowered by truncations

    @property
    def end_offset(self) -> int:
        return len(self.records)

    def cut(self, offset: int) -> None:
        """The process truncated the log to `offset`."""
        if offset < len(self.records):
            self.cuts.append((offset, self.records[offset]))
        del self.records[offset:]
        self._changed(offset)
        self.synced = min(self.synced, offset)
        for claim in self._claims:
            claim[0] = min(claim[0], offset)

    def claim(self, run: Callable[[], None]) -> Callable[[], None]:
        """A sync job's `run`, which, once it returns, makes the records stored before the
        job was taken count as synced."""
        claim = [len(self.records)]
        self._claims.append(claim)

        def run_then_claim() -> None:
            run()
            self._claims = [c for c in self._claims if c is not claim]
            self.synced = max(self.synced, claim[0])

        return run_then_claim

    def recovered(self, records: list[Record], after: str) -> None:
        """`records` is what a recovery keeps (`after`: of what): check the synced records
        against it, then hold it, keeping the objects of the unchanged prefix."""
        old = self.records
        lost = synced_record_lost(self.synced, old, records)
        if lost is not None:
            self.lost_synced.append({
                "offset": lost, "synced": self.synced, "had": old[lost],
                "found": records[lost] if lost < len(records) else None, "after": after})
            self.synced = lost
        same = _same_prefix(old, records)
        if same < len(old):
            self._changed(same)
        del old[same:]
        old.extend(records[same:])
        self._claims = []

    def _changed(self, offset: int) -> None:
        if self.changed_from is None or offset < self.changed_from:
            self.changed_from = offset


class ObservedLog(SegmentLog):
    """The real `SegmentLog`, which also keeps its disk's `LogView` up to date. It changes
    nothing the log does: it reads back what each append stored, and notes truncations and
    completed syncs."""

    def __init__(self, *args: Any, view: LogView, **kwargs: Any) -> None:
        self.view: LogView | None = None  # none yet: the recovery's inline sync is noted below
        self._synced_opening = False
        self._values: list[tuple[int, str]] = []  # read_values' pairs of the first records
        super().__init__(*args, **kwargs)
        view.recovered(self.read(0, self.end_offset), "open")
        if self._synced_opening:
            view.synced = view.end_offset
        self.view = view

    def _store(self, records: Sequence[Record]) -> None:
        super()._store(records)
        # Read back through the log's own read path: the view is what the storage code
        # stored, so a bad encoding shows here at once, not only where something decodes it.
        self.view.records.extend(self._load(records[0].offset, len(records)))

    def read_values(self, offset: int, max_records: int) -> list[tuple[int, str]]:
        """`Log.read_values`, each record read through the log's read path only the first
        time: consumers read the same records again and again, and decoding them each time
        (as a real broker does) would be most of a simulated run's work."""
        if not 0 <= offset <= self.end_offset or self._closed:
            return super().read_values(offset, max_records)  # its errors
        end = min(self.end_offset, offset + max(0, max_records))
        values = self._values
        if len(values) < end:
            values += [(r.offset, r.value.decode("latin-1"))
                       for r in self.read(len(values), end - len(values))]
        return values[offset:end]

    def _drop_from(self, offset: int) -> None:
        super()._drop_from(offset)
        del self._values[offset:]
        self.view.cut(offset)

    def _sync(self) -> None:
        super()._sync()
        if self.view is None:
            self._synced_opening = True
        else:
            self.view.synced = self.view.end_offset

    def close(self, clean: bool) -> None:
        closing = not self._closed
        super().close(clean)
        if closing and clean and self.view.synced < self.view.end_offset:
            self.view.unsynced_clean.append((self.view.synced, self.view.end_offset))

    def take_sync_job(self) -> SyncJob | None:
        job = super().take_sync_job()
        if job is not None and job.data:
            job.run = self.view.claim(job.run)
        return job


class SimStore(BrokerStore):
    """A broker's `BrokerStore` on the simulated disk, opening `ObservedLog`s."""

    def __init__(self, disk: NodeDisk) -> None:
        super().__init__(DATA_DIR, disk.log_config, fsync=disk.fsync, defer_sync=disk.defer_sync,
                         fs=disk.fs)
        self.disk = disk

    def new_log(self, key: tuple[str, int], path: Path) -> SegmentLog:
        cfg, disk = self.log_config, self.disk
        return ObservedLog(path, cfg.flush_messages, cfg.flush_ms, cfg.segment_bytes,
                           fsync=disk.fsync, defer_sync=disk.defer_sync, fs=disk.fs,
                           view=disk.views.setdefault(key, LogView()))


class NodeDisk:
    """Everything of one node that survives its processes: its filesystem, and what the
    invariant monitor reads of it."""

    def __init__(self, name: str, log_config: LogConfig, *, defer_sync: bool = False) -> None:
        self.name = name
        self.log_config = log_config
        self.defer_sync = defer_sync
        self.fs = SimFs()
        self.fsync = self.fs.fsync  # what the storage code fsyncs with (a test may break it)
        self.views: dict[tuple[str, int], LogView] = {}
        self._store: SimStore | None = None  # the running broker process's
        self._lost_under_process = False

    # ---- the node's processes ---------------------------------------------------------------

    def broker_store(self) -> SimStore:
        """A starting broker's data directory (its logs open, and recover, as it needs them)."""
        self._store = SimStore(self)
        return self._store

    def metadata_file(self) -> MetadataFile:
        """A starting controller's metadata log."""
        self.fs.makedirs(DATA_DIR)
        return MetadataFile(METADATA_PATH, self.fs)

    def process_died(self) -> None:
        """The process is gone: its descriptors close, the page cache stays. If the page cache
        was lost under it, its logs are now what the next recovery will keep."""
        self.fs.kill()
        self._store = None
        if self._lost_under_process:
            self._lost_under_process = False
            self._recover_views(set(self.views), "page-cache loss", self.fs.copy())

    # ---- faults -------------------------------------------------------------------------------

    def lose(self, rng: random.Random | None = None, *, running: bool = False,
             seed: int | None = None) -> dict[str, Any]:
        """Power loss (the process is dead already), with rng a torn one; or, running, a
        page-cache loss under the running process. Returns the filesystem's report (as
        lazyfs's lose-unsynced and torn replies: "lost_bytes", "files", "dropped_metadata")
        with "lost_records": records the logs no longer hold (per log in "logs"), and "seed"
        when torn. The logs the running process has open keep its view until it dies."""
        if running:
            report = self.fs.page_cache_loss()
        elif rng is not None:
            report = {**self.fs.torn_power_loss(rng), "seed": seed}
        else:
            report = self.fs.power_loss()
        open_now = set(self._store.open_keys()) if running and self._store is not None else set()
        self._lost_under_process = self._lost_under_process or bool(open_now)
        scratch = self.fs.copy()  # one copy of the disk for every log's recovery below
        lost = self._recover_views(set(self.views) - open_now, "torn power loss" if rng else
                                   "page-cache loss" if running else "power loss", scratch)
        for key in sorted(open_now):  # what they will lose when the process dies
            lost[key] = _lost_records(self.views[key].records, self._recovery(key, scratch))
        logs = {f"{t}-{p}": n for (t, p), n in sorted(lost.items()) if n}
        return {**report, "lost_records": sum(logs.values()), "logs": logs}

    def corrupt(self, seed: str) -> dict[str, Any]:
        """`corrupt-segment` on a stopped broker's disk: one record of one segment file damaged,
        durably, chosen from `seed` exactly as on real hosts (nemesis/segment_damage.py).
        Returns its report with "lost_records". The damaged log's view becomes what the next
        recovery keeps; damage is not a failed fsync, so the records it cuts leave the synced
        prefix instead of counting against SyncedRecordsSurvive."""
        report = segment_damage.damage(self.fs, str(DATA_DIR), seed)
        if "file" not in report:
            return report
        topic, partition = report["file"].split("/")[0].rsplit("-", 1)
        key = (topic, int(partition))
        view = self.views[key]
        kept = self._recovery(key, self.fs.copy())
        view.synced = min(view.synced, len(kept))
        lost = _lost_records(view.records, kept)
        view.recovered(kept, "corrupt-segment")
        return {**report, "lost_records": lost}

    def check_recovery(self, after: str) -> None:
        """SyncedRecordsSurvive for every log as a kill would leave the disk now (the page
        cache kept): each view's synced records against what the real recovery of a copy
        keeps, a loss noted in its `lost_synced`. The views and the disk stay as they are.

        Only a log with synced records is recovered: `synced_record_lost` looks below
        `synced` alone, so with none there is nothing the recovery could find lost (a
        no-fault run of the safe cell, with no flush policy, ends with none on any disk, and
        recovering its three logs cost about 9 % of the run's instructions)."""
        keys = sorted(key for key, view in self.views.items() if view.synced > 0)
        if not keys:
            return
        scratch = self.fs.copy()
        for key in keys:
            view = self.views[key]
            kept = self._recovery(key, scratch)
            lost = synced_record_lost(view.synced, view.records, kept)
            if lost is not None:
                view.lost_synced.append({
                    "offset": lost, "synced": view.synced, "had": view.records[lost],
                    "found": kept[lost] if lost < len(kept) else None, "after": after})

    def _recover_views(self, keys: set[tuple[str, int]], after: str,
                       scratch: SimFs) -> dict[tuple[str, int], int]:
        """The views of `keys` become what the next recovery will keep (run on `scratch`, a
        copy of the disk); records lost each."""
        lost = {}
        for key in sorted(keys):
            view = self.views[key]
            kept = self._recovery(key, scratch)
            lost[key] = _lost_records(view.records, kept)
            view.recovered(kept, after)
        return lost

    def _recovery(self, key: tuple[str, int], scratch: SimFs) -> list[Record]:
        """The records the next recovery of the log keeps: the real recovery run on `scratch`,
        a copy of the disk (each log's files are its own, so one copy serves every log).
        Nothing if it fails (the next start would fail the same way)."""
        topic, partition = key
        try:
            log = SegmentLog(DATA_DIR / f"{topic}-{partition}", segment_bytes=self.log_config.segment_bytes,
                             fs=scratch)
            records = log.read(0, log.end_offset)
            log.close(clean=False)
        except (OSError, ValueError):
            return []
        return records

    # ---- what the monitor and the nemesis's oracle read -------------------------------------

    def metadata_records(self) -> list[dict]:
        """The controller's metadata log as a process would read it now."""
        return self.metadata_since(0)[0]

    def metadata_since(self, position: int) -> tuple[list[dict], int]:
        """The metadata records written from byte `position` on (a record boundary) and the
        position after them; from 0 again if the file is now shorter."""
        try:
            size = self.fs.size(METADATA_PATH)
        except FileNotFoundError:
            return [], 0
        if size == position:
            return [], position
        if size < position:
            position = 0
        fd = self.fs.open(METADATA_PATH, os.O_RDONLY)
        try:
            data = self.fs.pread(fd, size - position, position)
        finally:
            self.fs.close(fd)
        records, used = parse_records(data, METADATA_PATH)
        return records, position + used


def _same_prefix(a: list[Record], b: list[Record]) -> int:
    """How many records from offset 0 on `a` and `b` have alike."""
    same, n = 0, min(len(a), len(b))
    while same < n and (a[same] is b[same] or a[same] == b[same]):
        same += 1
    return same


def _lost_records(before: list[Record], after: list[Record]) -> int:
    """Records of `before` not at their offset in `after`."""
    return len(before) - _same_prefix(before, after)
