"""A broker's data directory: partition logs, the clean-shutdown marker, the HWM checkpoint.

    <data>/<topic>-<partition>/          one SegmentLog per partition replica
    <data>/clean_shutdown                {"broker_epoch": N}, only after a clean shutdown
    <data>/replication-offset-checkpoint {"topic-partition": hwm}, for pre-KIP-101 truncation

Every method does its own I/O at once, on the caller's thread; the broker runtime calls the
slow ones (`write_hwm_checkpoint`) on its storage thread. With `defer_sync=True` the logs
it opens hand their fsyncs out as jobs (log.py, "Storage port"). All I/O goes through `fs`
(replication/fs.py), the real OS unless the simulator passes its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from replication.fs import OS_FS, Fs
from replication.segment_log import (
    DEFAULT_SEGMENT_BYTES,
    Fsync,
    SegmentLog,
    atomic_write_json,
    fsync_dir,
)

CLEAN_MARKER = "clean_shutdown"
HWM_CHECKPOINT = "replication-offset-checkpoint"
PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


@dataclass(frozen=True, slots=True)
class LogConfig:
    flush_messages: int | None = None  # flush.messages: fsync once this many are unflushed
    flush_ms: int | None = None  # flush.ms: fsync data unflushed for this long
    segment_bytes: int = DEFAULT_SEGMENT_BYTES  # segment.bytes: roll past this size


class BrokerStore:
    """Owns a broker's data directory; opens each partition's log at most once."""

    def __init__(
        self, data_dir: Path, log_config: LogConfig | None = None, *,
        fsync: Fsync | None = None, defer_sync: bool = False, fs: Fs = OS_FS,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.log_config = log_config or LogConfig()
        self._fs = fs
        self._fsync = fs.fsync if fsync is None else fsync
        self.defer_sync = defer_sync
        self._logs: dict[tuple[str, int], SegmentLog] = {}
        # made once: rewritten every second, and a path made anew is parsed anew
        self._hwm_path = self.data_dir / HWM_CHECKPOINT
        fs.makedirs(self.data_dir)

    def open_log(self, topic: str, partition: int) -> SegmentLog:
        """The partition's log, recovered on first open (see its recovery_info)."""
        key = (topic, partition)
        if key not in self._logs:
            if not topic or "/" in topic or topic in (".", ".."):
                raise ValueError(f"invalid topic name {topic!r}")
            self._logs[key] = self.new_log(key, self.data_dir / f"{topic}-{partition}")
        return self._logs[key]

    def new_log(self, key: tuple[str, int], path: Path) -> SegmentLog:
        """Open (recover) partition `key`'s log in `path` with this store's settings (the
        simulator's store, simulation/disk.py, opens a subclass that it watches)."""
        cfg = self.log_config
        return SegmentLog(path, cfg.flush_messages, cfg.flush_ms, cfg.segment_bytes,
                          fsync=self._fsync, defer_sync=self.defer_sync, fs=self._fs)

    def open_keys(self) -> list[tuple[str, int]]:
        """The partitions whose logs are open."""
        return list(self._logs)

    def close(self, clean: bool) -> None:
        """Close every open log; clean closes flush them. The marker is separate."""
        for log in self._logs.values():
            log.close(clean)
        self._logs.clear()

    # -- clean-shutdown marker -----------------------------------------------------------

    def write_clean_marker(self, broker_epoch: int) -> None:
        """Call after every log is flushed: the next start then counts as clean."""
        atomic_write_json(
            self._fs, self.data_dir / CLEAN_MARKER, {"broker_epoch": broker_epoch}, self._fsync
        )

    def read_and_delete_clean_marker(self) -> int | None:
        """The broker epoch of the last clean shutdown, or None; the marker is then gone
        durably, so a crash from now on is an unclean shutdown."""
        path = self.data_dir / CLEAN_MARKER
        try:
            text = self._fs.read_bytes(path).decode()
        except FileNotFoundError:
            return None
        try:
            epoch = json.loads(text)["broker_epoch"]
            if not isinstance(epoch, int) or isinstance(epoch, bool):
                raise TypeError(f"broker_epoch is {epoch!r}")
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(
                f'{path}: malformed clean-shutdown marker, expected {{"broker_epoch": N}}: {exc}'
            ) from exc
        self._fs.unlink(path)
        fsync_dir(self._fs, self.data_dir, self._fsync)
        return epoch

    # -- high-watermark checkpoint ---------------------------------------------------------

    def write_hwm_checkpoint(self, hwms: Mapping[str, int]) -> None:
        """{"topic-partition": hwm}, as Broker.hwm_snapshot gives it and the file holds it."""
        atomic_write_json(
            self._fs, self._hwm_path, dict(sorted(hwms.items())), self._fsync
        )

    def read_hwm_checkpoint(self) -> dict[str, int]:
        """{"topic-partition": hwm}; empty if there is no checkpoint yet."""
        path = self._hwm_path
        try:
            raw = json.loads(self._fs.read_bytes(path).decode())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise ValueError(f"{path}: not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a JSON object of \"topic-partition\": hwm")
        out = {}
        for key, hwm in raw.items():
            if not PARTITION_DIR.match(key) or not isinstance(hwm, int) or isinstance(hwm, bool) or hwm < 0:
                raise ValueError(f"{path}: bad entry {key!r}: {hwm!r}")
            out[key] = hwm
        return out
