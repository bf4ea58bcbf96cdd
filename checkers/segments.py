"""Find which lost values still sit in some node's segment files (docs/formats.md).

Segments are decoded by replication.segment_format, the code that writes them.
"""

from __future__ import annotations

from pathlib import Path

from replication.segment_format import iter_records


def _partition_of(dirname: str, topic: str | None) -> int | None:
    name, _, part = dirname.rpartition("-")
    if not part.isdigit() or (topic is not None and name != topic):
        return None
    return int(part)


def find_on_disk(
    nodes_dir: Path, wanted: dict[int, set[int]], topic: str | None
) -> dict[tuple[int, int], list[str]]:
    """Map (partition, value) -> ["host@offset", ...] for the wanted values found on disk.

    `wanted` is partition -> values; only those partitions' segments are read.
    """
    found: dict[tuple[int, int], list[str]] = {}
    for seg in sorted(nodes_dir.glob("*/data/**/*.log")):
        part = _partition_of(seg.parent.name, topic)
        if part is None or part not in wanted:
            continue
        host = seg.relative_to(nodes_dir).parts[0]
        for rec in iter_records(seg):
            try:
                value = int(rec.value)
            except ValueError:
                continue
            if value in wanted[part]:
                found.setdefault((part, value), []).append(f"{host}@{rec.offset}")
    return found
