"""What `corrupt-segment` does to a stopped broker's segment files, written once for real hosts
and the simulator.

`choose` picks, from a seed alone, the damage to one record of one segment file: `bit-flip`
(1 to 3 bits flipped inside the record's body, after its length and CRC: bit rot) or
`truncate` (the file cut in the middle of the record). Real hosts run this very file with
the cluster's python (`python -c SOURCE DATA_DIR SEED`, nemesis/hosts_world.py), which
lists, reads and writes the files with `os`; the simulator hands it the files of a node's
simulated disk (simulation/disk.py). It imports only the standard library, since it runs
as a program on hosts where nothing else of the harness is installed.

The segment format is docs/formats.md "Segment files": u32 body_length | u32 crc32 | body,
the body starting with the record's u64 offset.
"""

from __future__ import annotations

import json
import os
import random
import re
import struct
import sys
from typing import Any

SEGMENT = re.compile(r"\d{20}\.log")
PARTITION_DIR = re.compile(r".+-\d+")


def choose(files: list[tuple[str, bytes]], seed: str) -> tuple[dict, list[tuple[int, int]], int | None]:
    """The damage to do, given the candidate segment files (at least one: path relative to the
    data directory, content, in listing order) and the seed: (the report, the bytes to write
    as (position, new byte), the length to cut the file to or None). With no complete record
    in the file drawn, the report is {"note": why} and nothing is to be done."""
    rng = random.Random("corrupt-segment:" + seed)
    mode = rng.choice(["bit-flip", "truncate"])  # drawn first: the seed alone decides it
    rel, data = rng.choice(files)
    records, pos = [], 0
    while pos + 8 <= len(data):
        length = struct.unpack_from(">I", data, pos)[0]
        end = pos + 8 + length
        if length < 20 or end > len(data):
            break
        records.append((pos, end, struct.unpack_from(">Q", data, pos + 8)[0]))
        pos = end
    if not records:
        return {"note": "no complete record in " + rel}, [], None
    start, end, offset = rng.choice(records)
    out = {"file": rel, "mode": mode, "record_offset": offset, "record_span": [start, end],
           "file_size": len(data)}
    if mode == "bit-flip":
        bits = sorted(rng.sample(range((start + 8) * 8, end * 8), rng.randint(1, 3)))
        changed = sorted({b // 8 for b in bits})
        writes = [(byte, data[byte] ^ sum(1 << (b % 8) for b in bits if b // 8 == byte))
                  for byte in changed]
        out.update(offset=changed[0], bytes=len(changed), bits=len(bits), positions=changed)
        return out, writes, None
    cut = rng.randrange(start + 1, end)
    out.update(offset=cut, bytes=len(data) - cut)
    return out, [], cut


class HostFs:
    """This host's files, with the calls of the storage code's filesystem port
    (replication/fs.py) that `damage` uses; the simulator passes its SimFs instead."""

    listdir, open, pwrite, ftruncate, fsync, close = (
        staticmethod(os.listdir), staticmethod(os.open), staticmethod(os.pwrite),
        staticmethod(os.ftruncate), staticmethod(os.fsync), staticmethod(os.close))
    size = staticmethod(os.path.getsize)

    @staticmethod
    def read_bytes(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()


def segment_files(fs: Any, data_dir: str) -> list[str]:
    """The non-empty segment files of every partition folder under `data_dir`, relative to
    it, in the order `choose` draws from."""
    files = []
    for part in sorted(fs.listdir(data_dir)):
        folder = os.path.join(data_dir, part)
        if not PARTITION_DIR.fullmatch(part):
            continue
        try:
            names = sorted(fs.listdir(folder))
        except NotADirectoryError:
            continue
        files += [os.path.join(part, name) for name in names
                  if SEGMENT.fullmatch(name) and fs.size(os.path.join(folder, name)) > 0]
    return files


def damage(fs: Any, data_dir: str, seed: str) -> dict:
    """Damage one segment file under `data_dir` (on `fs`), durably; returns the report."""
    files = [(rel, fs.read_bytes(os.path.join(data_dir, rel))) for rel in segment_files(fs, data_dir)]
    if not files:
        return {"note": "no segment data to corrupt in " + data_dir}
    out, writes, cut = choose(files, seed)
    if "note" in out:
        return out
    fd = fs.open(os.path.join(data_dir, out["file"]), os.O_WRONLY)
    try:
        for position, byte in writes:
            fs.pwrite(fd, bytes([byte]), position)
        if cut is not None:
            fs.ftruncate(fd, cut)
        fs.fsync(fd)
    finally:
        fs.close(fd)
    return out


if __name__ == "__main__":
    print(json.dumps(damage(HostFs, sys.argv[1], sys.argv[2])))
