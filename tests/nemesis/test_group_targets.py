"""Faults aimed at the consumer group's coordinator (targets = "group-coordinator"): which
`__consumer_offsets` partition coordinates the workload's group, how the fault kinds resolve
the target, the roles recorded and cast again on replay, and the refusals where no group
runs. Pure logic on partition states; the real-Kafka run is in
tests/workloads/test_rdkafka_ctp.py."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

import pytest
from support.coordinator_targets import BROKERS, NODES, group_topology, resolve, state

from checkers.exitcodes import UserError
from harness.config import load_config
from harness.system import consumer_group, system_of
from harness.test import Test
from nemesis.kinds import lookup
from nemesis.kinds.base import NO_GROUPS, PlanParams
from nemesis.kinds.partition import GROUP_SHAPE
from nemesis.roles import (
    GROUP_ROLES,
    as_fixed,
    both_coordinators_roles_in,
    coordinator_roles_in,
    role_entries,
    role_target,
    roles_now,
)
from nemesis.schedule import RealisedFault, ScheduleParams, plan
from workloads.rdkafka_ctp import CTP_GROUP
from workloads.rdkafka_txn import GROUP, coordinator_partition

KAFKA_TXN = ["system.kind=kafka", "workload.kind=txn", "nemesis.targets=group-coordinator"]


def java_hash(s: str) -> int:
    """String.hashCode as Java defines it (s[0]*31^(n-1) + ... + s[n-1], in 32-bit two's
    complement): the reference the shared hash is checked against, written differently."""
    h = sum(ord(c) * 31 ** (len(s) - 1 - i) for i, c in enumerate(s)) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize("group", [GROUP, CTP_GROUP, "harness-workload"])
@pytest.mark.parametrize("partitions", [1, 3, 50])
def test_a_group_is_coordinated_by_abs_of_its_java_hash_modulo_the_offsets_partitions(
        group, partitions):
    assert coordinator_partition(group, partitions) == abs(java_hash(group)) % partitions


@pytest.mark.parametrize(("group", "partition"), [
    # from OpenJDK 17: "harness-txn-group".hashCode() == -1634397121, "harness-ctp-group"'s
    # -1873709004; Math.abs(h) % 50
    (GROUP, 21), (CTP_GROUP, 4)])
def test_the_workloads_groups_partitions_are_javas(group, partition):
    assert coordinator_partition(group, 50) == partition


def test_the_workloads_groups_land_on_different_partitions_of_kafkas_default_fifty():
    # with Kafka's default 50 offsets partitions the two groups have two coordinators; the
    # harness's one-partition log (control.kafka) gives both the same one
    assert coordinator_partition(GROUP, 50) != coordinator_partition(CTP_GROUP, 50)
    assert coordinator_partition(GROUP, 1) == coordinator_partition(CTP_GROUP, 1) == 0


def test_the_partition_count_matters():
    """The must-fail twin: with a wrong partition count the coordinator is another one."""
    assert coordinator_partition(CTP_GROUP, 50) != coordinator_partition(CTP_GROUP, 49)


def test_process_host_and_link_faults_hit_the_leader_of_the_offsets_partition():
    topo = group_topology(state(1), state(3, replicas=(3, 1, 2)))
    for kind in ("kill", "pause", "restart", "power-loss", "slow-link"):
        target = lookup(kind).plan_target(random.Random(1),
                                          PlanParams(3, 4, "group-coordinator"))
        assert target["select"] == "group-coordinator"
        assert resolve(kind, target, topo) == ["n4"]  # broker 3, not the data leader n2


def test_an_outage_aimed_at_the_group_powers_off_every_replica_of_its_offsets_partition():
    topo = group_topology(None, state(3, replicas=(3, 1, 4)))
    target = lookup("outage").plan_target(random.Random(1), PlanParams(3, 4, "group-coordinator"))
    assert target["select"] == "offsets-log-replicas"
    assert resolve("outage", target, topo) == ["n4", "n2", "n5"]


def test_an_unknown_offsets_log_resolves_to_nobody():
    topo = group_topology(state(1), None)  # before the first group member made Kafka create it
    assert resolve("kill", {"select": "group-coordinator"}, topo) == []


def test_roles_are_read_off_the_offsets_log_and_cast_on_its_next_coordinator():
    then = coordinator_roles_in(group_topology(None, None), state(2, replicas=(2, 1, 3)), GROUP_ROLES)
    assert then == {"n1": "controller", "n3": "group-coordinator", "n2": "offsets-log-replica#1",
                    "n4": "offsets-log-replica#2", "n5": "broker#1"}
    target = {"roles": role_target(["n3"], then)}
    now = asyncio.run(roles_now(group_topology(state(2), state(4, replicas=(4, 1))), target))
    assert now["n5"] == "group-coordinator"  # the coordinator moved to broker 4
    assert as_fixed(now, target)["fixed"] == {"nodes": ["n5"]}


def test_a_system_without_groups_refuses_the_target_in_words():
    topo = group_topology(state(1), None, groups=False)
    with pytest.raises(ValueError, match="no consumer groups"):
        resolve("kill", {"select": "group-coordinator"}, topo)
    with pytest.raises(ValueError, match="cannot be aimed by targets = 'group-coordinator'"):
        lookup("corrupt-segment").plan_target(random.Random(1),
                                              PlanParams(3, 4, "group-coordinator"))


def test_a_partition_aimed_at_the_group_cuts_it_off_from_the_transaction_coordinator():
    target = lookup("partition").plan_target(random.Random(1),
                                             PlanParams(3, 4, "group-coordinator"))
    assert target["shape"] == GROUP_SHAPE == "group-coordinator-from-txn-coordinator"
    # broker 3 (n4) coordinates the group, broker 1 (n2) the transactions, broker 2 (n3)
    # leads the data: only the two coordinators drop each other's packets
    topo = group_topology(state(2), state(3, replicas=(3, 1, 2)), txn=state(1, replicas=(1, 2, 3)))
    assert resolve("partition", target, topo) == {"n4": frozenset({"n2"}),
                                                  "n2": frozenset({"n4"})}


def test_one_broker_coordinating_both_is_cut_off_from_the_other_brokers_not_the_controller():
    topo = group_topology(state(1), state(2, replicas=(2, 1, 3)), txn=state(2, replicas=(2, 3, 1)))
    grudge = resolve("partition", {"shape": GROUP_SHAPE}, topo)
    assert grudge == {"n3": frozenset({"n2", "n4", "n5"}), "n2": frozenset({"n3"}),
                      "n4": frozenset({"n3"}), "n5": frozenset({"n3"})}


@pytest.mark.parametrize(("offsets", "txn"), [
    (None, state(1)), (state(1), None), (state(None), state(1)), (state(1), state(None))])
def test_a_cut_between_the_coordinators_waits_for_both_to_be_known(offsets, txn):
    assert resolve("partition", {"shape": GROUP_SHAPE}, group_topology(None, offsets, txn=txn)) == {}


def test_the_partition_planned_for_the_group_is_the_cut_between_the_coordinators():
    entries = plan(ScheduleParams(seed=3, faults=("kill", "partition"), time_limit=60,
                                  interval=3, duration=3, partitions=3,
                                  targets="group-coordinator"))
    shapes = {e["target"].get("shape") for e in entries if e["kind"] == "partition"}
    assert shapes == {GROUP_SHAPE}


def _cut(offsets: dict, txn: dict) -> RealisedFault:
    """A realised partition between the coordinators, its roles recorded as the nemesis
    records them (roles_now on the planned target)."""
    topo = group_topology(None, offsets, txn=txn)
    roles = asyncio.run(roles_now(topo, {"shape": GROUP_SHAPE}))
    grudge = resolve("partition", {"shape": GROUP_SHAPE}, topo)
    return RealisedFault(0, "partition", 2.0, 5.0, {"shape": GROUP_SHAPE, "pick": 4},
                         resolved={"grudge": {n: sorted(m) for n, m in grudge.items()}},
                         started_s=2.0, ended_s=7.0, outcome="ok", roles=roles)


def _replayed(entry: dict, offsets: dict, txn: dict):
    """What a role entry hits on a cluster whose logs are led as given now."""
    topo = group_topology(None, offsets, txn=txn)
    now = asyncio.run(roles_now(topo, entry["target"]))
    return resolve("partition", as_fixed(now, entry["target"]), topo)


def test_the_cut_is_recorded_by_role_and_cast_on_the_coordinators_of_the_replay():
    fault = _cut(state(3, replicas=(3, 1, 2)), state(1, replicas=(1, 2, 3)))
    assert fault.roles == {"n1": "controller", "n4": "group-coordinator",
                           "n2": "txn-coordinator", "n3": "offsets-log-replica#2",
                           "n5": "broker#1"}
    [entry] = role_entries([fault])
    assert entry["target"]["roles"] == {"grudge": {"group-coordinator": ["txn-coordinator"],
                                                   "txn-coordinator": ["group-coordinator"]}}
    # on the replay broker 4 (n5) coordinates the group and broker 2 (n3) the transactions
    again = _replayed(entry, state(4, replicas=(4, 1, 2)), state(2, replicas=(2, 4, 1)))
    assert again == {"n5": frozenset({"n3"}), "n3": frozenset({"n5"})}


def test_a_replay_where_one_broker_coordinates_both_stands_in_or_cuts_nothing():
    fault = _cut(state(3, replicas=(3, 1, 2)), state(1, replicas=(1, 2, 3)))
    [entry] = role_entries([fault])
    # nobody plays the transaction coordinator apart from the group's: the broker outside
    # both logs stands in (nemesis.roles' nearest part)...
    again = _replayed(entry, state(2, replicas=(2, 1, 3)), state(2, replicas=(2, 1, 3)))
    assert again == {"n3": frozenset({"n5"}), "n5": frozenset({"n3"})}
    # ...and where there is none (three brokers, all replicas, as the campaigns run), the
    # cast names the group coordinator alone: skipped, not a grudge that drops nobody
    # recorded as applied
    both = state(2, replicas=(2, 1, 3))
    three = replace(group_topology(None, both, txn=both), nodes=NODES[:4],
                    brokers={b: n for b, n in BROKERS.items() if b < 4})
    now = asyncio.run(roles_now(three, entry["target"]))
    assert as_fixed(now, entry["target"])["fixed"] == {"grudge": {"n3": []}}
    assert resolve("partition", as_fixed(now, entry["target"]), three) == {}


def test_the_cut_of_one_coordinator_of_both_is_replayed_on_the_group_coordinator():
    fault = _cut(state(2, replicas=(2, 1, 3)), state(2, replicas=(2, 3, 1)))
    assert both_coordinators_roles_in(group_topology(None, None), state(2, replicas=(2, 1, 3)),
                                      state(2)) == fault.roles
    [entry] = role_entries([fault])
    assert entry["target"]["roles"]["grudge"]["group-coordinator"] == [
        "broker#1", "offsets-log-replica#1", "offsets-log-replica#2"]
    again = _replayed(entry, state(1, replicas=(1, 2, 3)), state(3, replicas=(3, 1, 2)))
    assert again["n2"] == frozenset({"n3", "n4", "n5"})  # broker 1, the group's now


@pytest.mark.parametrize(("sets", "group"), [
    ([], None), (["workload.consumers=1"], None), (["workload.consumers=2"], GROUP),
    (["workload.consumers=0", "workload.transformers=1"], CTP_GROUP),
    (["workload.consumers=4", "workload.transformers=2"], CTP_GROUP)])
def test_the_group_aimed_at_is_the_transformers_else_the_group_members(tmp_path, sets, group):
    base = ["system.kind=kafka", "workload.kind=txn", "workload.consumers=0"]
    test = Test.of(load_config(None, [*base, *sets]), tmp_path)
    assert consumer_group(test.config.workload) == group


def test_the_embedded_system_refuses_group_coordinator_targets(tmp_path):
    test = Test.of(load_config(None, ["nemesis.targets=group-coordinator"]), tmp_path)
    with pytest.raises(UserError) as refused:
        system_of(test)
    assert str(refused.value) == NO_GROUPS


@pytest.mark.parametrize("sets", [["workload.kind=log"], ["workload.consumers=1"]])
def test_kafka_without_a_consumer_group_refuses_group_coordinator_targets(tmp_path, sets):
    test = Test.of(load_config(None, [*KAFKA_TXN, *sets]), tmp_path)
    with pytest.raises(UserError, match="aims at a consumer group: workload.kind = 'txn' with"):
        system_of(test)
