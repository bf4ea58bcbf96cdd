"""Host faults: a host loses power (its page cache with it) or only its page cache.

On real hosts the node's data directory is the lossy filesystem (nemesis.lazyfs), which
keeps unsynced writes in memory and drops them on command, as a power failure would."""

from __future__ import annotations

import random
from typing import Any

from nemesis.kinds.base import (
    PICK_RANGE,
    FaultKind,
    PlanParams,
    Resolved,
    Topology,
    World,
    each,
    resolve_selector,
)
from nemesis.kinds.registry import register
from runformat import effects as fx

HOST_AUTO = {"leader": 4, "random-broker": 2, "controller": 1, "last-isr-member": 1,
             "elr-members": 1}
HOST_MODES = {"leader": "leader", "controller": "controller", "random": "random-broker",
              "txn-coordinator": "txn-coordinator", "group-coordinator": "group-coordinator",
              "majority": "random-broker"}
# An outage aimed at a coordinator powers off every replica of its log's partition.
COORDINATOR_LOGS = {"txn-coordinator": "txn-log-replicas",
                    "group-coordinator": "offsets-log-replicas"}


class HostFault(FaultKind):
    family = "host"
    auto_targets = HOST_AUTO
    mode_targets = HOST_MODES
    needs_lazyfs = True


class _PowerLoss(HostFault):
    torn: bool
    effects = frozenset({fx.KILLS_PROCESS, fx.LOSES_UNSYNCED})

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        return await each(resolved, lambda node: world.power_loss(node, self.torn, pick))

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, world.start)


@register
class PowerLoss(_PowerLoss):
    """The node dies and every write it had not fsynced is gone."""

    name = "power-loss"
    torn = False
    phrase = "{who} {loses} power"


@register
class PageCacheLoss(HostFault):
    """Unsynced writes are dropped under a running node (the kernel evicting dirty pages it
    failed to write back). Its open files fail with EIO from then on, so the node halts at its
    next disk I/O, as Kafka halts when its only log directory fails; the heal starts it again
    (a supervisor's restart), if it is not running."""

    name = "page-cache-loss"
    effects = frozenset({fx.LOSES_UNSYNCED})
    phrase = "{who} {loses} its page cache"
    heal_phrase = "{who} {restarts}"

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        return await each(resolved, world.page_cache_loss)

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, world.start)


@register
class TornPowerLoss(_PowerLoss):
    """Power loss where the last unsynced writes are torn: a seeded prefix of them survives."""

    name = "torn-power-loss"
    torn = True
    phrase = "{who} {loses} power mid-write (torn)"


@register
class Outage(_PowerLoss):
    """A correlated outage: several broker hosts lose power together (a rack, a zone); aimed
    at a coordinator (of transactions, of the group), every replica of its log at once."""

    name = "outage"
    family = "outage"
    torn = False
    phrase = "{who} {loses} power together"

    def plan_target(self, rng: random.Random, params: PlanParams) -> dict[str, Any]:
        if params.targets in COORDINATOR_LOGS:
            return {"select": COORDINATOR_LOGS[params.targets], "pick": rng.randrange(PICK_RANGE)}
        return {"count": rng.randint(min(2, params.brokers), params.brokers),
                "pick": rng.randrange(PICK_RANGE)}

    async def resolve(self, topology: Topology, target) -> Resolved:
        if "fixed" in target:
            return await super().resolve(topology, target)
        if "select" in target:
            return await resolve_selector(topology, target)
        rng = random.Random(target.get("pick", 0))
        brokers = sorted(topology.brokers)
        return topology.nodes_of(rng.sample(brokers, min(target["count"], len(brokers))))
