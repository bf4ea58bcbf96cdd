"""Disk corruption: a stopped broker finds a damaged segment file when it starts again.

`corrupt-segment` kills the target broker, damages one record of one segment file in its data
directory, and starts it again when healed. The file, the record and the damage are seeded by
the fault's `pick` (and the node's name, so several targets are not hit identically):

- `bit-flip`: 1 to 3 bits flipped inside the record's body (after its length and CRC), so
  the stored CRC no longer matches: bit rot under a stopped process;
- `truncate`: the file is cut in the middle of the record (a lost tail, or a torn earlier
  segment when the file is not the last one).

The broker must detect the damage by CRC on recovery, cut its log to the last good record and
re-fetch the rest from the leader as a follower (replication.segment_log); it must never serve
the damaged record. Only real hosts have segment files (`simulated = False`). The controller
(n1) has none, so it is never a target. The damage is done on the host by a stdlib-only
Python snippet (`CORRUPT_SNIPPET`) run with the cluster's python, whose JSON report is recorded
in the history under the fault's `lost` details: {"file", "mode", "offset", "bytes", ...}.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from nemesis.kinds.base import FaultKind, Resolved, Topology, World, each
from nemesis.kinds.registry import register
from runformat import effects as fx

# argv: <data dir> <seed>. Prints one JSON object: what was done, or {"note": why nothing was}.
# The segment format is docs/formats.md "Segment files": u32 body_length | u32 crc32 | body.
CORRUPT_SNIPPET = r"""
import json, os, random, re, struct, sys
data_dir, seed = sys.argv[1], sys.argv[2]
rng = random.Random("corrupt-segment:" + seed)
mode = rng.choice(["bit-flip", "truncate"])  # drawn first: the seed alone decides it
files = []
for part in sorted(os.listdir(data_dir)):
    folder = os.path.join(data_dir, part)
    if re.fullmatch(r".+-\d+", part) and os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if re.fullmatch(r"\d{20}\.log", name) and os.path.getsize(path) > 0:
                files.append(path)
if not files:
    print(json.dumps({"note": "no segment data to corrupt in " + data_dir}))
    sys.exit(0)
path = rng.choice(files)
with open(path, "rb") as f:
    data = f.read()
records, pos = [], 0
while pos + 8 <= len(data):
    length = struct.unpack_from(">I", data, pos)[0]
    end = pos + 8 + length
    if length < 20 or end > len(data):
        break
    records.append((pos, end, struct.unpack_from(">Q", data, pos + 8)[0]))
    pos = end
rel = os.path.relpath(path, data_dir)
if not records:
    print(json.dumps({"note": "no complete record in " + rel}))
    sys.exit(0)
start, end, offset = rng.choice(records)
out = {"file": rel, "mode": mode, "record_offset": offset, "record_span": [start, end],
       "file_size": len(data)}
fd = os.open(path, os.O_WRONLY)
try:
    if mode == "bit-flip":
        bits = sorted(rng.sample(range((start + 8) * 8, end * 8), rng.randint(1, 3)))
        changed = sorted({b // 8 for b in bits})
        for byte in changed:
            mask = sum(1 << (b % 8) for b in bits if b // 8 == byte)
            os.pwrite(fd, bytes([data[byte] ^ mask]), byte)
        out.update(offset=changed[0], bytes=len(changed), bits=len(bits), positions=changed)
    else:
        cut = rng.randrange(start + 1, end)
        os.ftruncate(fd, cut)
        out.update(offset=cut, bytes=len(data) - cut)
    os.fsync(fd)
finally:
    os.close(fd)
print(json.dumps(out))
"""

_STOP_WAIT_S = 10.0


def corrupt_argv(python: str, data_dir: str, seed: str) -> list[str]:
    """The command that damages one segment file under `data_dir` (an argv list: Remote.run
    quotes each argument, no shell line is built from data)."""
    return [python, "-c", CORRUPT_SNIPPET, str(data_dir), str(seed)]


@register
class CorruptSegment(FaultKind):
    """Kill, damage one record of a segment file (bit flips or a cut mid-record), start again
    when healed."""

    name = "corrupt-segment"
    family = "disk"
    effects = frozenset({fx.KILLS_PROCESS, fx.CORRUPTS_DISK})
    phrase = "{who} {is} killed and a segment file damaged"
    simulated = False  # the simulated world has no segment files
    not_on_kafka = "it damages the embedded system's segment format, not Kafka's"
    # As process faults, but never the controller (it has no segments) and never the last
    # ISR member or the ELR alone: damaging the only complete copy is loss, not a repair.
    auto_targets = {"leader": 4, "random-broker": 2, "followers": 2}
    mode_targets = {"leader": "leader", "controller": "random-broker",
                    "random": "random-broker", "majority": "followers"}

    async def resolve(self, topology: Topology, target) -> Resolved:
        nodes = await super().resolve(topology, target)
        return [n for n in nodes if n != topology.controller and n in topology.brokers.values()]

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        from nemesis.hosts_world import HostsWorld  # real hosts only: SSH and Toxiproxy

        if not isinstance(world, HostsWorld):
            raise TypeError(f"corrupt-segment damages segment files on real hosts; it needs a "
                            f"HostsWorld, not {type(world).__name__} (the simulated world has "
                            "no segment files)")
        cluster = world.cluster

        def corrupt(node: str) -> dict[str, Any]:
            host = cluster.host(node)
            deadline = time.monotonic() + _STOP_WAIT_S
            while host.remote.is_running("node"):  # SIGKILL is asynchronous: no write after us
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{node}: node still running {_STOP_WAIT_S:.0f} s after SIGKILL")
                time.sleep(0.05)
            out = host.remote.run(corrupt_argv(cluster.python, str(host.data_dir), f"{pick}:{node}"),
                                  timeout=60).stdout
            try:
                return json.loads(out)
            except ValueError:
                return {"raw": out.strip()}

        async def kill_and_corrupt(node: str) -> dict[str, Any]:
            await world.kill(node)
            return await asyncio.get_running_loop().run_in_executor(None, corrupt, node)

        return await each(resolved, kill_and_corrupt)

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, world.start)
