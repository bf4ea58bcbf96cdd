"""Faults by role (nemesis.roles): who played which part, and who plays it now. Pure logic on
partition states, plus the nemesis casting a role target in the simulated world."""

from __future__ import annotations

import asyncio

import pytest

from nemesis.kinds.base import Topology
from nemesis.roles import (
    as_fixed,
    await_last_member,
    holders,
    role_entries,
    role_target,
    roles_in,
    waits_for_role,
)
from nemesis.schedule import RealisedFault, plan_entries

NODES = ("n1", "n2", "n3", "n4", "n5")


def topology(state: dict | None) -> Topology:
    async def partition_state(partition: int) -> dict | None:
        return state

    return Topology(NODES, "n1", {i: f"n{i + 1}" for i in range(1, 5)}, partition_state)


def state(leader, isr, elr=(), replicas=(1, 2, 3)) -> dict:
    return {"leader": leader, "isr": list(isr), "elr": list(elr), "replicas": list(replicas)}


def test_every_node_gets_the_part_it_plays_in_the_partition():
    roles = roles_in(topology(None), state(2, [2, 3], elr=[1]))
    assert roles == {"n1": "controller", "n3": "leader", "n4": "isr-follower#1",
                     "n2": "elr-member#1", "n5": "broker#1"}


def test_the_leader_alone_in_its_isr_is_the_last_member():
    roles = roles_in(topology(None), state(1, [1], replicas=(1, 2, 3)))
    assert roles["n2"] == "last-isr-member"
    assert roles["n3"] == "lagging-follower#1" and roles["n4"] == "lagging-follower#2"


def test_an_unknown_partition_leaves_only_brokers():
    roles = roles_in(topology(None), None)
    assert sorted(roles.values()) == ["broker#1", "broker#2", "broker#3", "broker#4",
                                      "controller"]


def test_a_role_target_is_cast_on_whoever_plays_the_part_now():
    then = roles_in(topology(None), state(1, [1, 2, 3]))
    target = {"roles": role_target(["n2", "n4"], then)}
    assert target["roles"] == {"nodes": ["leader", "isr-follower#2"]}
    now = roles_in(topology(None), state(3, [3, 1, 2]))  # leadership moved to broker 3
    assert as_fixed(now, target)["fixed"] == {"nodes": ["n4", "n3"]}


def test_a_missing_role_goes_to_the_nearest_stand_in_and_no_node_twice():
    now = roles_in(topology(None), state(1, [1], replicas=(1, 2, 3)))
    who = holders(now, ["leader", "isr-follower#1", "isr-follower#2"])
    assert who == {"leader": "n2", "isr-follower#1": "n3", "isr-follower#2": "n4"}
    who = holders(now, ["isr-follower#1", "isr-follower#2", "isr-follower#3", "lagging-follower#1"])
    assert len(set(who.values())) == len(who)


def test_a_grudge_is_recast_side_by_side():
    then = roles_in(topology(None), state(1, [1, 2, 3]))
    grudge = {"n2": frozenset({"n1", "n3"}), "n1": frozenset({"n2"}), "n3": frozenset({"n2"})}
    target = {"roles": role_target(grudge, then)}
    now = roles_in(topology(None), state(2, [2, 1, 3]))
    fixed = as_fixed(now, target)["fixed"]["grudge"]
    assert fixed == {"n3": ["n1", "n2"], "n1": ["n3"], "n2": ["n3"]}


def test_role_entries_replay_a_realised_schedule_by_role():
    then = roles_in(topology(None), state(1, [1]))
    faults = [
        RealisedFault(0, "pause", 1.0, 5.0, {"select": "followers", "partition": 0, "pick": 7},
                      resolved={"nodes": ["n3", "n4"]}, started_s=1.01, ended_s=6.02,
                      outcome="ok", roles=roles_in(topology(None), state(1, [1, 2, 3]))),
        RealisedFault(1, "power-loss", 3.0, 0.25, {"select": "last-isr-member", "pick": 9},
                      after=0, resolved={"nodes": ["n2"]}, started_s=3.0, ended_s=3.3,
                      outcome="ok", roles=then),
        RealisedFault(2, "kill", 9.0, 1.0, {"select": "leader"}, outcome="skipped"),
    ]
    entries = role_entries(faults)
    assert [e["target"]["roles"] for e in entries] == [
        {"nodes": ["isr-follower#1", "isr-follower#2"]}, {"nodes": ["last-isr-member"]}]
    assert entries[1]["after"] == 0 and entries[1]["duration_s"] == pytest.approx(0.3)
    assert plan_entries(entries, "test") == entries  # a valid plan
    assert waits_for_role(entries[1]["target"]) and not waits_for_role(entries[0]["target"])


def test_a_malformed_role_target_is_refused_naming_the_entry():
    bad = [{"id": 0, "kind": "kill", "start_s": 1, "duration_s": 1,
            "target": {"roles": {"nodes": "leader"}}}]
    with pytest.raises(ValueError, match=r"schedule\[0\]: target roles"):
        plan_entries(bad, "minimal.json")


def test_the_last_member_is_awaited_until_the_isr_shrinks():
    states = iter([state(1, [1, 2]), state(1, [1, 2]), state(1, [1])])
    current = {"s": next(states)}

    async def partition_state(partition: int) -> dict:
        return current["s"]

    async def sleep(seconds: float) -> None:
        current["s"] = next(states, current["s"])

    topo = Topology(NODES, "n1", {i: f"n{i + 1}" for i in range(1, 5)}, partition_state)
    target = {"roles": {"nodes": ["last-isr-member"]}}
    first = roles_in(topo, current["s"])
    roles = asyncio.run(await_last_member(topo, target, first, sleep))
    assert roles["n2"] == "last-isr-member"
    # a target that does not need the last member does not wait
    assert asyncio.run(await_last_member(topo, {"roles": {"nodes": ["leader"]}}, first,
                                         sleep)) is first
