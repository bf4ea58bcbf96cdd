"""A five-host topology (n1 the controller, brokers 1-4 on n2-n5) for the pure-logic tests of
faults aimed at a coordinator (tests/nemesis/test_txn_targets.py, test_group_targets.py,
test_client_partition.py): the
partition states they hand its hooks, and the fault kinds' resolution run to completion."""

from __future__ import annotations

import asyncio

from nemesis.kinds import lookup
from nemesis.kinds.base import Topology

NODES = ("n1", "n2", "n3", "n4", "n5")
BROKERS = {i: f"n{i + 1}" for i in range(1, 5)}  # broker 1 is n2, ..., broker 4 is n5


def state(leader, replicas=(1, 2, 3)) -> dict:
    return {"leader": leader, "isr": list(replicas), "elr": [], "replicas": list(replicas)}


def group_topology(data: dict | None, offsets: dict | None, groups: bool = True,
                   txn: dict | None = None) -> Topology:
    """The topology whose topic partition, offsets-log partition and transaction-log partition
    have these states (None: not created yet); `groups=False`: a system without groups."""
    async def partition_state(partition: int) -> dict | None:
        return data

    async def group_state() -> dict | None:
        return offsets

    async def txn_state() -> dict | None:
        return txn

    return Topology(NODES, "n1", BROKERS, partition_state, txn_state=txn_state,
                    group_state=group_state if groups else None)


def resolve(kind: str, target: dict, topo: Topology):
    return asyncio.run(lookup(kind).resolve(topo, target))
