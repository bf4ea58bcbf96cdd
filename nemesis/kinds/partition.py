"""Network partitions: a grudge (who drops whose packets) built from a shape, applied to the
whole cluster at once, healed by removing every partition rule."""

from __future__ import annotations

import random
from typing import Any

from nemesis import partition as grudges
from nemesis.kinds.base import FaultKind, Resolved, Topology, World
from nemesis.kinds.registry import register
from runformat import effects as fx

SHAPES = {"isolate": grudges.isolate_one, "halves": grudges.halves,
          "majority-ring": grudges.majority_ring, "bridge": grudges.bridge}


@register
class Partition(FaultKind):
    name = "partition"
    family = "partition"
    effects = frozenset({fx.CUTS_NETWORK})
    heal_phrase = "the network heals"
    auto_targets = {"isolate": 2, "halves": 2, "majority-ring": 1, "bridge": 1,
                    "isolate-leader": 3, "isolate-controller": 1}
    mode_targets = {"leader": "isolate-leader", "controller": "isolate-controller",
                    "random": "isolate", "majority": "halves"}

    @property
    def target_key(self) -> str:
        return "shape"

    async def resolve(self, topology: Topology, target) -> Resolved:
        if "fixed" in target:
            return await super().resolve(topology, target)
        names = list(topology.nodes)
        shape = target.get("shape")
        if shape in SHAPES:
            return SHAPES[shape](names, random.Random(target.get("pick", 0)))
        if shape == "isolate-controller":
            return grudges.isolate_node(names, topology.controller)
        if shape == "isolate-leader":
            state = await topology.partition_state(target.get("partition", 0))
            if state is None or state["leader"] is None:
                return {}
            return grudges.isolate_node(names, topology.brokers[state["leader"]])
        raise ValueError(f"unknown partition shape {shape!r}")

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        await world.partition(resolved)
        return {}

    async def heal(self, world: World, resolved: Resolved) -> None:
        await world.heal_partition()
