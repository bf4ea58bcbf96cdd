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
the damaged record. The controller (n1) has none, so it is never a target. The damage is
nemesis/segment_damage.py's, written once: on real hosts the World runs it as a program with
the cluster's python (nemesis.hosts_world), in the simulator on the node's simulated disk
(simulation/disk.py). Its JSON report is recorded in the history under the fault's `lost`
details: {"file", "mode", "offset", "bytes", ...}.
"""

from __future__ import annotations

from typing import Any

from nemesis.kinds.base import FaultKind, Resolved, Topology, World, each
from nemesis.kinds.registry import register
from runformat import effects as fx


@register
class CorruptSegment(FaultKind):
    """Kill, damage one record of a segment file (bit flips or a cut mid-record), start again
    when healed."""

    name = "corrupt-segment"
    family = "disk"
    effects = frozenset({fx.KILLS_PROCESS, fx.CORRUPTS_DISK})
    phrase = "{who} {is} killed and a segment file damaged"
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
        return await each(resolved, lambda node: world.corrupt_segment(node, pick))

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, world.start)
