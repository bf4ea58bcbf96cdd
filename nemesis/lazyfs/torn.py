"""Which unsynced bytes a torn power loss keeps: seeded, deterministic choices."""

from __future__ import annotations

import random

from nemesis.lazyfs.extents import DirtyExtents

MODES = ("prefix", "pages")


def kept_pieces(extents: DirtyExtents, rng: random.Random, mode: str) -> list[tuple[int, bytes]]:
    """The (offset, bytes) pieces of a file's unsynced data that reach the disk.

    prefix: a uniformly random number of unsynced bytes, taken in offset order
            (for an append-only log: the log is cut at a random point).
    pages:  every 4 KiB page piece independently, with probability 1/2 (the disk
            wrote back pages in arbitrary order; skipped pages leave zero holes).
    """
    if mode == "prefix":
        keep = rng.randint(0, extents.dirty_bytes)
        out: list[tuple[int, bytes]] = []
        for start, data in extents.pieces():
            if keep <= 0:
                break
            out.append((start, data[:keep]))
            keep -= len(data)
        return out
    if mode == "pages":
        return [piece for piece in extents.pages() if rng.random() < 0.5]
    raise ValueError(f"unknown torn mode {mode!r}; expected one of {', '.join(MODES)}")
