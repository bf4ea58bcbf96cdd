"""Find which lost values still sit in some node's segment files (docs/formats.md)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

_HEAD = struct.Struct(">II")  # body_length, crc32(body)
_BODY = struct.Struct(">QIq")  # offset, leader_epoch, timestamp_ms


class Record(NamedTuple):
    offset: int
    epoch: int
    timestamp_ms: int
    value: bytes


def read_segment(path: Path) -> Iterator[Record]:
    """Records of one segment file up to its first torn or corrupt record.

    Used when replication.segment_format is not importable (the reader there is the
    authority: it belongs to the system that writes the files).
    """
    data = path.read_bytes()
    pos = 0
    while pos + _HEAD.size <= len(data):
        length, crc = _HEAD.unpack_from(data, pos)
        body = data[pos + _HEAD.size : pos + _HEAD.size + length]
        if length < _BODY.size or len(body) < length or zlib.crc32(body) != crc:
            return
        offset, epoch, ts = _BODY.unpack_from(body)
        yield Record(offset, epoch, ts, body[_BODY.size :])
        pos += _HEAD.size + length


def segment_reader() -> tuple[Callable[[Path], Iterable], str]:
    try:
        from replication.segment_format import iter_records
    except ImportError:
        return read_segment, "checkers.segments.read_segment"
    return iter_records, "replication.segment_format.iter_records"


def _partition_of(dirname: str, topic: str | None) -> int | None:
    name, _, part = dirname.rpartition("-")
    if not part.isdigit() or (topic is not None and name != topic):
        return None
    return int(part)


def find_on_disk(
    nodes_dir: Path, wanted: dict[int, set[int]], topic: str | None
) -> tuple[dict[tuple[int, int], list[str]], str]:
    """Map (partition, value) -> ["host@offset", ...] for the wanted values found on disk.

    `wanted` is partition -> values; only those partitions' segments are read.
    """
    reader, name = segment_reader()
    found: dict[tuple[int, int], list[str]] = {}
    for seg in sorted(nodes_dir.glob("*/data/**/*.log")):
        part = _partition_of(seg.parent.name, topic)
        if part is None or part not in wanted:
            continue
        host = seg.relative_to(nodes_dir).parts[0]
        for rec in reader(seg):
            try:
                value = int(rec.value)
            except ValueError:
                continue
            if value in wanted[part]:
                found.setdefault((part, value), []).append(f"{host}@{rec.offset}")
    return found, name
