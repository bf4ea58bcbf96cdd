"""The controller's metadata log file: a JSON record a line, each fsynced before append returns.

    <data>/metadata.log      {"type": ..., ...}\\n per record (replication/controller.py)

A torn last line (a crash mid-append, so never acknowledged: an append fsyncs its newline
too) is cut off when the log is read, even one that happens to parse; a bad whole line is
corruption and ends the process. All I/O goes through `fs`
(replication/fs.py): the real OS on hosts, the simulator's in-memory filesystem there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from replication.fs import OS_FS, Fs
from replication.segment_log import write_all

METADATA_LOG = "metadata.log"


class MetadataFile:
    """The controller's `MetadataDisk` (replication/driver.py) in one file."""

    def __init__(self, path: Path, fs: Fs = OS_FS) -> None:
        self.path = Path(path)
        self._fs = fs
        self._fd: int | None = None
        self._end = 0  # where the next record goes

    def read_metadata(self) -> list[dict]:
        """Every whole record, in order; a torn last line is cut off the file."""
        try:
            data = self._fs.read_bytes(self.path)
        except FileNotFoundError:
            return []
        records, good = parse_records(data, self.path)
        self._fs.truncate(self.path, good)
        self._end = good
        return records

    def append_metadata(self, record: dict) -> None:
        """Append one record and fsync it."""
        fs = self._fs
        if self._fd is None:
            self._fd = fs.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            self._end = fs.size(self.path)
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        write_all(fs, self._fd, line, self._end)
        self._end += len(line)
        fs.fsync(self._fd)


def parse_records(data: bytes, path: Path) -> tuple[list[dict], int]:
    """The records of a metadata log's bytes and how many bytes they take (a torn last line
    is left out); SystemExit on a bad line before the last."""
    *lines, _torn = data.split(b"\n")  # after the last newline: a torn line or nothing
    records, good = [], 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            raise SystemExit(f"{path}:{i + 1}: corrupt metadata record") from None
        good += len(line) + 1
    return records, good
