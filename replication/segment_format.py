"""Encoding and decoding of segment files (docs/formats.md, "Segment files").

    u32 body_length | u32 crc32(body) | body
    body = u64 offset | u32 leader_epoch | i64 timestamp_ms | value bytes

Decoding never raises on bad bytes: it stops at the first record that is incomplete, fails
its CRC, or does not continue the log (offset not the next one, epoch going backwards), and
reports how many bytes were valid. Recovery truncates the segment there.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from replication.fs import OS_FS, Fs
from replication.log import Record

HEADER = struct.Struct(">II")
BODY = struct.Struct(">QIq")
HEADER_SIZE = HEADER.size
MIN_BODY = BODY.size
MAX_BODY = 1 << 30  # a larger length can only be garbage: no append is that big
SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def base_offset_of(path: Path) -> int | None:
    """The base offset in a segment file's name, or None if it is not a segment file."""
    m = SEGMENT_NAME.match(path.name)
    return int(m.group(1)) if m else None


def encoded_size(record: Record) -> int:
    return HEADER_SIZE + MIN_BODY + len(record.value)


def encode_record(record: Record) -> bytes:
    body = BODY.pack(record.offset, record.epoch, record.timestamp_ms) + record.value
    return HEADER.pack(len(body), zlib.crc32(body)) + body


def encode_records(records: list[Record]) -> tuple[bytes, list[int]]:
    """One buffer for a whole append, and each record's position within it."""
    parts, positions, pos = [], [], 0
    for r in records:
        data = encode_record(r)
        parts.append(data)
        positions.append(pos)
        pos += len(data)
    return b"".join(parts), positions


def iter_buffer(
    buf: bytes | memoryview, next_offset: int | None = None, min_epoch: int = 0
) -> Iterator[tuple[Record, int, int]]:
    """Yield (record, position, end position) for each valid record at the start of buf.

    next_offset: the offset the first record must have (None: whatever it has).
    Stops silently at a torn, corrupt or discontinuous record.
    """
    view = memoryview(buf)
    pos = 0
    while pos + HEADER_SIZE <= len(view):
        length, crc = HEADER.unpack_from(view, pos)
        end = pos + HEADER_SIZE + length
        if length < MIN_BODY or length > MAX_BODY or end > len(view):
            return
        body = view[pos + HEADER_SIZE : end]
        if zlib.crc32(body) != crc:
            return
        offset, epoch, timestamp_ms = BODY.unpack_from(body)
        if (next_offset is not None and offset != next_offset) or epoch < min_epoch:
            return
        yield Record(offset, epoch, timestamp_ms, bytes(body[MIN_BODY:])), pos, end
        next_offset, min_epoch, pos = offset + 1, epoch, end


def iter_records(path: Path, fs: Fs = OS_FS) -> Iterator[Record]:
    """The records of a segment file, up to its first torn or corrupt record."""
    for record, _, _ in iter_buffer(fs.read_bytes(path), base_offset_of(Path(path))):
        yield record


def scan_segment(
    path: Path, min_epoch: int = 0, fs: Fs = OS_FS
) -> tuple[list[Record], int, int]:
    """Recovery scan: (records, valid_bytes, file_size).

    The first record must carry the base offset in the file name (when it has one) and no
    record may have an epoch below min_epoch (the last epoch of the previous segment).
    """
    data = fs.read_bytes(path)
    records, valid = [], 0
    for record, _, end in iter_buffer(data, base_offset_of(Path(path)), min_epoch):
        records.append(record)
        valid = end
    return records, valid, len(data)
