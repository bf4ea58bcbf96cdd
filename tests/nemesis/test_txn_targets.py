"""Faults aimed at the transaction coordinator (targets = "txn-coordinator"): which
`__transaction_state` partition coordinates a transactional id, how each fault kind resolves
the target on a system with transactions, the roles recorded, and the refusals where there
are no transactions. Pure logic on partition states."""

from __future__ import annotations

import asyncio
import random

import pytest
from support.coordinator_targets import BROKERS, NODES, resolve, state

from checkers.exitcodes import UserError
from harness.config import load_config
from harness.system import system_of
from harness.test import Test
from nemesis.kinds import lookup
from nemesis.kinds.base import NO_TRANSACTIONS, PlanParams, Topology, resolve_selector
from nemesis.roles import TXN_ROLES, as_fixed, coordinator_roles_in, role_target, roles_now
from nemesis.schedule import ScheduleParams, plan
from workloads.rdkafka_txn import coordinator_partition


def topology(data: dict[int, dict | None], log: dict | None, transactions: bool = True
             ) -> Topology:
    async def partition_state(partition: int) -> dict | None:
        return data.get(partition)

    async def txn_state() -> dict | None:
        return log

    return Topology(NODES, "n1", BROKERS, partition_state,
                    txn_state=txn_state if transactions else None)


@pytest.mark.parametrize(("tid", "partitions", "expected"), [
    ("a", 50, 97 % 50),  # "a".hashCode() == 97
    ("hello", 50, 99162322 % 50),  # "hello".hashCode() == 99162322
    ("Aa", 7, 2112 % 7), ("BB", 7, 2112 % 7),  # Java's classic hash collision
    ("polygenelubricants", 50, 0),  # hashes to Integer.MIN_VALUE: Kafka's Utils.abs gives 0
    ("anything", 1, 0),  # the harness's one-partition log: one coordinator for every id
])
def test_the_coordinating_partition_is_javas_string_hash_as_kafka_takes_it(tid, partitions,
                                                                           expected):
    assert coordinator_partition(tid, partitions) == expected


def test_process_and_host_faults_hit_the_leader_of_the_transaction_log():
    topo = topology({0: state(1)}, state(3, replicas=(3, 1, 2)))
    for kind in ("kill", "pause", "restart", "power-loss"):
        target = lookup(kind).plan_target(random.Random(1), PlanParams(3, 4, "txn-coordinator"))
        assert target["select"] == "txn-coordinator"
        assert resolve(kind, target, topo) == ["n4"]  # broker 3, not the data leader n2


def test_an_outage_aimed_at_transactions_powers_off_every_replica_of_the_log():
    topo = topology({}, state(3, replicas=(3, 1, 4)))
    target = lookup("outage").plan_target(random.Random(1), PlanParams(3, 4, "txn-coordinator"))
    assert target["select"] == "txn-log-replicas"
    assert resolve("outage", target, topo) == ["n4", "n2", "n5"]


def test_the_coordinator_is_cut_off_from_the_data_partitions_leaders_only():
    topo = topology({0: state(1), 1: state(2), 2: state(3)}, state(3))
    target = lookup("partition").plan_target(random.Random(1),
                                             PlanParams(3, 4, "txn-coordinator"))
    assert target["shape"] == "txn-coordinator-from-leaders" and target["partitions"] == 3
    grudge = resolve("partition", target, topo)
    # n4 coordinates (and leads partition 2): it and n2, n3 (the other leaders) drop each
    # other, both ways; the controller n1 and the broker n5 stay reachable by everyone
    assert grudge == {"n4": frozenset({"n2", "n3"}), "n2": frozenset({"n4"}),
                      "n3": frozenset({"n4"})}


def test_a_coordinator_leading_every_partition_is_cut_off_from_the_other_brokers():
    topo = topology({0: state(2), 1: state(2)}, state(2))
    grudge = resolve("partition", {"shape": "txn-coordinator-from-leaders", "partitions": 2},
                     topo)
    assert grudge["n3"] == frozenset({"n2", "n4", "n5"})
    assert all(grudge[n] == frozenset({"n3"}) for n in ("n2", "n4", "n5"))


def test_an_unknown_transaction_log_resolves_to_nobody():
    topo = topology({0: state(1)}, None)  # before the first transactional producer
    assert asyncio.run(resolve_selector(topo, {"select": "txn-coordinator"})) == []
    assert resolve("partition", {"shape": "txn-coordinator-from-leaders"}, topo) == {}


def test_a_system_without_transactions_refuses_the_target_in_words():
    topo = topology({0: state(1)}, None, transactions=False)
    with pytest.raises(ValueError, match="no transactions"):
        asyncio.run(resolve_selector(topo, {"select": "txn-coordinator"}))
    with pytest.raises(ValueError, match="no transactions"):
        asyncio.run(roles_now(topo, {"select": "txn-coordinator"}))


def test_roles_are_read_off_the_transaction_log_and_cast_on_its_next_coordinator():
    then = coordinator_roles_in(topology({}, None), state(2, replicas=(2, 1, 3)), TXN_ROLES)
    assert then == {"n1": "controller", "n3": "txn-coordinator", "n2": "txn-log-replica#1",
                    "n4": "txn-log-replica#2", "n5": "broker#1"}
    target = {"roles": role_target(["n3"], then)}
    assert target["roles"] == {"nodes": ["txn-coordinator"]}
    topo = topology({0: state(1)}, state(1))  # the coordinator moved to broker 1
    now = asyncio.run(roles_now(topo, target))
    assert now["n2"] == "txn-coordinator"
    assert as_fixed(now, target)["fixed"] == {"nodes": ["n2"]}


def test_a_fault_kind_that_cannot_aim_at_the_coordinator_is_refused_before_the_run():
    with pytest.raises(ValueError, match="'corrupt-segment' cannot be aimed by targets"):
        ScheduleParams(seed=1, faults=("kill", "corrupt-segment"), time_limit=30, interval=3,
                       duration=3, targets="txn-coordinator")
    entries = plan(ScheduleParams(seed=1, faults=("kill", "partition", "outage"), time_limit=60,
                                  interval=3, duration=3, partitions=3,
                                  targets="txn-coordinator"))
    assert entries and all(
        e["target"].get("select") in ("txn-coordinator", "txn-log-replicas")
        or e["target"].get("shape") == "txn-coordinator-from-leaders" for e in entries)


def test_the_embedded_system_refuses_coordinator_targets(tmp_path):
    test = Test.of(load_config(None, ["nemesis.targets=txn-coordinator"]), tmp_path)
    with pytest.raises(UserError) as refused:
        system_of(test)
    assert str(refused.value) == NO_TRANSACTIONS


def test_kafka_without_transactions_refuses_coordinator_targets(tmp_path):
    test = Test.of(load_config(None, ["nemesis.targets=txn-coordinator", "system.kind=kafka"]),
                   tmp_path)
    with pytest.raises(UserError, match="workload.kind = 'txn'"):
        system_of(test)
