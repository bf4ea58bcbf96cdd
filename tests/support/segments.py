"""One record in the segment files' format, for tests that build segment bytes by hand."""

from __future__ import annotations

from replication.log import Record
from replication.segment_format import encode_records


def encode_record(record: Record) -> bytes:
    return encode_records([record])[0]
