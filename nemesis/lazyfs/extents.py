"""Sparse map of a file's dirty (written, not yet flushed) byte ranges.

Extents are kept sorted, non-overlapping and non-adjacent (adjacent writes are
coalesced), so a sequential append stream is one growing bytearray: appends are
amortised O(1) instead of re-copying the buffer. Only an append onto an extent of
EXTENT_MAX bytes or more starts a new, adjacent one: growing a buffer re-copies it now
and then, and a copy of a buffer of hundreds of MB costs more than the append.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator

PAGE_SIZE = 4096
EXTENT_MAX = 1 << 20  # the largest write the kernel sends (fs.MAX_WRITE): one copy each


class DirtyExtents:
    """Dirty byte ranges of one file, keyed by offset."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._bufs: list[bytearray] = []
        self.dirty_bytes = 0

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __iter__(self) -> Iterator[tuple[int, bytearray]]:
        return iter(zip(self._starts, self._bufs, strict=True))

    def write(self, offset: int, data: bytes | memoryview) -> int:
        """Record `data` at `offset`; returns how many bytes became newly dirty."""
        if not data:
            return 0
        end = offset + len(data)
        i = bisect_right(self._starts, offset) - 1
        if i >= 0 and self._starts[i] + len(self._bufs[i]) >= offset:
            first = i  # extent i overlaps or touches the write
            if self._starts[i] + len(self._bufs[i]) == offset and len(self._bufs[i]) >= EXTENT_MAX:
                first = i + 1  # only touches it, and it is full
        else:
            first = i + 1
        last = first
        while last < len(self._starts) and self._starts[last] <= end:
            last += 1
        # extents [first, last) overlap or touch [offset, end)
        if first == last:
            self._starts.insert(first, offset)
            self._bufs.insert(first, bytearray(data))
            self.dirty_bytes += len(data)
            return len(data)
        if last - first == 1:
            return self._write_into(first, offset, data)
        return self._merge(first, last, offset, data)

    def _write_into(self, i: int, offset: int, data: bytes | memoryview) -> int:
        start, buf = self._starts[i], self._bufs[i]
        added = 0
        if offset < start:
            buf[0:0] = bytes(start - offset)
            added += start - offset
            start = self._starts[i] = offset
        rel = offset - start
        grow = rel + len(data) - len(buf)
        if grow > 0:
            added += grow
        buf[rel : rel + len(data)] = data
        self.dirty_bytes += added
        return added

    def _merge(self, first: int, last: int, offset: int, data: bytes | memoryview) -> int:
        start = min(offset, self._starts[first])
        end = max(offset + len(data), self._starts[last - 1] + len(self._bufs[last - 1]))
        merged = bytearray(end - start)
        old = 0
        for s, b in zip(self._starts[first:last], self._bufs[first:last], strict=True):
            merged[s - start : s - start + len(b)] = b
            old += len(b)
        merged[offset - start : offset - start + len(data)] = data
        self._starts[first:last] = [start]
        self._bufs[first:last] = [merged]
        added = len(merged) - old
        self.dirty_bytes += added
        return added

    def touches(self, offset: int, size: int) -> bool:
        """Whether any dirty byte lies inside [offset, offset + size)."""
        i = bisect_right(self._starts, offset + size - 1) - 1
        return i >= 0 and self._starts[i] + len(self._bufs[i]) > offset

    def overlapping(self, offset: int, size: int) -> Iterator[tuple[int, memoryview]]:
        """Yield (start, bytes) for every dirty piece inside [offset, offset + size)."""
        end = offset + size
        i = max(bisect_right(self._starts, offset) - 1, 0)
        while i < len(self._starts) and self._starts[i] < end:
            s, b = self._starts[i], self._bufs[i]
            lo, hi = max(s, offset), min(s + len(b), end)
            if lo < hi:
                yield lo, memoryview(b)[lo - s : hi - s]
            i += 1

    def truncate(self, size: int) -> int:
        """Drop everything at or beyond `size`; returns the dirty bytes dropped."""
        i = bisect_right(self._starts, size - 1) if size > 0 else 0
        removed = sum(len(b) for b in self._bufs[i:])
        del self._starts[i:]
        del self._bufs[i:]
        if i > 0:
            s, b = self._starts[i - 1], self._bufs[i - 1]
            if s + len(b) > size:
                removed += s + len(b) - size
                del b[size - s :]
        self.dirty_bytes -= removed
        return removed

    def pieces(self) -> list[tuple[int, bytes]]:
        """Every dirty extent as (offset, bytes), in offset order."""
        return [(s, bytes(b)) for s, b in self]

    def pages(self) -> list[tuple[int, bytes]]:
        """Dirty data cut at PAGE_SIZE boundaries, as (offset, bytes) in offset order."""
        out: list[tuple[int, bytes]] = []
        for s, b in self:
            pos, end = s, s + len(b)
            while pos < end:
                cut = min(end, (pos // PAGE_SIZE + 1) * PAGE_SIZE)
                out.append((pos, bytes(b[pos - s : cut - s])))
                pos = cut
        return out
