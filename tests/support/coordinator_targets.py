"""A five-host topology (n1 the controller, brokers 1-4 on n2-n5) for the pure-logic tests of
faults aimed at a coordinator (tests/nemesis/test_txn_targets.py, test_group_targets.py): the
partition states they hand its hooks, and the fault kinds' resolution run to completion."""

from __future__ import annotations

import asyncio

from nemesis.kinds import lookup
from nemesis.kinds.base import Topology

NODES = ("n1", "n2", "n3", "n4", "n5")
BROKERS = {i: f"n{i + 1}" for i in range(1, 5)}  # broker 1 is n2, ..., broker 4 is n5


def state(leader, replicas=(1, 2, 3)) -> dict:
    return {"leader": leader, "isr": list(replicas), "elr": [], "replicas": list(replicas)}


def resolve(kind: str, target: dict, topo: Topology):
    return asyncio.run(lookup(kind).resolve(topo, target))
