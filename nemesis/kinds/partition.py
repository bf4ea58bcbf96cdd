"""Network partitions: a grudge (who drops whose packets) built from a shape, applied to the
whole cluster at once, healed by removing every partition rule; and a node cut off from the
clients' host at its service port (client-partition), which a grudge between hosts cannot
say: the clients share their address with the harness's SSH (nemesis.client_partition)."""

from __future__ import annotations

import random
from typing import Any

from nemesis import partition as grudges
from nemesis.kinds.base import FaultKind, PlanParams, Resolved, Topology, World, each
from nemesis.kinds.registry import register
from runformat import effects as fx

# The transaction coordinator cut off from the data partitions' leaders (which its commit
# markers must reach), while both still reach the controller, the clients and the rest.
TXN_SHAPE = "txn-coordinator-from-leaders"
# The group coordinator cut off from the transaction coordinator, whose markers make a
# transformer's offsets committed in its transaction stable (KIP-447): see
# group_from_txn_coordinator.
GROUP_SHAPE = "group-coordinator-from-txn-coordinator"
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
                    "random": "isolate", "majority": "halves", "txn-coordinator": TXN_SHAPE,
                    "group-coordinator": GROUP_SHAPE}

    @property
    def target_key(self) -> str:
        return "shape"

    def plan_target(self, rng: random.Random, params: PlanParams) -> dict[str, Any]:
        target = super().plan_target(rng, params)
        if target["shape"] == TXN_SHAPE:
            target["partitions"] = params.partitions  # whose leaders to cut it off from
        return target

    async def resolve(self, topology: Topology, target) -> Resolved:
        if "fixed" in target:
            grudge = await super().resolve(topology, target)
            # a role cast on nobody (say the two coordinators are one broker now) cuts nothing
            return grudge if any(grudge.values()) else {}
        names = list(topology.nodes)
        shape = target.get("shape")
        if shape in SHAPES:
            return SHAPES[shape](names, random.Random(target.get("pick", 0)))
        if shape == "isolate-controller":
            return grudges.isolate_node(names, topology.controller)
        if shape == TXN_SHAPE:
            return await coordinator_from_leaders(topology, target.get("partitions", 1))
        if shape == GROUP_SHAPE:
            return await group_from_txn_coordinator(topology)
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


async def coordinator_from_leaders(topology: Topology, partitions: int) -> Resolved:
    """The coordinator and the topic's partition leaders drop each other's packets. Where it
    leads every partition itself, it is cut off from the other brokers instead (its log's
    followers and the data partitions' followers). {} while it is unknown."""
    log = await topology.txn_log()
    if log is None or log.get("leader") is None:
        return {}
    coordinator = topology.brokers[log["leader"]]
    states = [await topology.partition_state(p) for p in range(partitions)]
    leaders = {topology.brokers[s["leader"]] for s in states
               if s is not None and s.get("leader") is not None} - {coordinator}
    others = leaders or set(topology.brokers.values()) - {coordinator}
    # symmetric, as every grudge here: each side drops the other's packets
    return {coordinator: frozenset(others), **{n: frozenset({coordinator}) for n in others}}


async def group_from_txn_coordinator(topology: Topology) -> Resolved:
    """The group coordinator and the transaction coordinator drop each other's packets: the
    markers that end a transformer's transaction cannot reach the group's offsets (they stay
    pending, unstable to a fetch that asks for stable offsets), and each one's log loses the
    other as a follower. Where one broker coordinates both, it is cut off from the other
    brokers instead, keeping the controller and the clients: its markers to the partitions'
    leaders and its logs' replication are cut alike. {} while either log is unknown."""
    group, txn = await topology.offsets_log(), await topology.txn_log()
    if group is None or txn is None or group.get("leader") is None or txn.get("leader") is None:
        return {}
    coordinator = topology.brokers[group["leader"]]
    others = {topology.brokers[txn["leader"]]} - {coordinator}
    others = others or set(topology.brokers.values()) - {coordinator}
    return {coordinator: frozenset(others), **{n: frozenset({coordinator}) for n in others}}


@register
class ClientPartition(FaultKind):
    """The target nodes drop what the clients' host sends to their service port and what they
    send it from there (the workload's clients, and the harness's own metadata queries, which
    ask every broker at once and so get their answer elsewhere); SSH and the other nodes still
    reach them. Aimed by selector, so recorded and cast again by role as a process fault is:
    at the group coordinator, a member's heartbeats, joins, offset fetches and its
    producer's TxnOffsetCommit stop while the controller, which sees the broker alive, keeps
    it the coordinator."""

    name = "client-partition"
    family = "partition"
    effects = frozenset({fx.CUTS_NETWORK})
    phrase = "{who} {is} cut off from the clients"
    heal_phrase = "the clients reach {who} again"
    auto_targets = {"leader": 3, "random-broker": 1}
    mode_targets = {"leader": "leader", "random": "random-broker",
                    "txn-coordinator": "txn-coordinator", "group-coordinator": "group-coordinator"}
    simulated = False  # the simulated world's clients have no host of their own to cut off

    async def apply(self, world: World, resolved: Resolved, pick: int, settings) -> dict[str, Any]:
        return await each(resolved, world.cut_from_clients)

    async def heal(self, world: World, resolved: Resolved) -> None:
        await each(resolved, world.rejoin_clients)
