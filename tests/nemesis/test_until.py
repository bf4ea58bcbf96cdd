"""Scripted plans that wait for a partition state ("until", nemesis.until) and aim at the
successor or an ELR member: the targets and tests as pure logic, and one plan carried out by
the nemesis on real namespace hosts (the same plan tests/simulation/test_invariants_sim.py runs
in the simulator)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.scenarios import weakness_plan

from harness.config import load_config
from harness.runner import run_test
from harness.sim_run import simulate_into, simulated
from harness.test import Plan, Test
from nemesis.kinds.base import Topology, resolve_selector
from nemesis.schedule import load_schedule, plan_entries
from nemesis.until import await_state, state_holds, until_error

STATE = {"leader": 2, "replicas": [2, 3, 1], "isr": [2, 1], "elr": [3]}


def _topology(states: list[dict]) -> Topology:
    """A topology whose partition 0 goes through `states`, one per question, the last kept."""
    asked = iter(states)

    async def partition_state(partition: int) -> dict | None:
        return next(asked, states[-1]) if partition == 0 else None

    return Topology(("n1", "n2", "n3", "n4"), "n1", {1: "n2", 2: "n3", 3: "n4"}, partition_state)


def _resolve(state: dict, select: str, pick: int = 0) -> list[str]:
    return asyncio.run(resolve_selector(_topology([state]),
                                        {"select": select, "partition": 0, "pick": pick}))


def test_the_successor_is_the_first_other_isr_member_in_replica_order_then_the_elr():
    assert _resolve(STATE, "successor") == ["n2"]  # broker 1: replica order, not broker id
    assert _resolve({**STATE, "isr": [2]}, "successor") == ["n4"]  # none in the ISR: ELR
    assert _resolve({**STATE, "isr": [2], "elr": []}, "successor") == []


def test_an_elr_member_is_one_of_the_elr_chosen_by_pick():
    both = {**STATE, "isr": [2], "elr": [1, 3]}
    assert {_resolve(both, "elr-member", pick)[0] for pick in range(20)} == {"n2", "n4"}
    assert _resolve(both, "elr-member", 5) == _resolve(both, "elr-member", 5)
    assert _resolve({**STATE, "elr": []}, "elr-member") == []


def test_until_tests_hold_on_a_state_and_never_on_an_unknown_one():
    assert state_holds(STATE, {"isr_at_most": 2, "elr_at_least": 1})
    assert not state_holds(STATE, {"isr_at_most": 1})
    assert not state_holds(None, {"isr_at_most": 3})


@pytest.mark.parametrize("until, message", [
    ({}, "must name at least one"), ({"timeout_s": 3}, "must name at least one"),
    ({"isr_below": 1}, "unknown isr_below"), ({"isr_at_most": -1}, "integers >= 0"),
    ({"isr_at_most": True}, "integers >= 0"), ({"isr_at_most": 1, "timeout_s": 0}, "seconds > 0"),
])
def test_a_bad_until_in_a_plan_file_is_named(until, message):
    assert message in until_error(until)
    entry = {"id": 0, "kind": "kill", "start_s": 1, "duration_s": 1,
             "target": {"select": "leader", "until": until}}
    with pytest.raises(ValueError, match=f"plan.json: schedule\\[0\\]: target .*{message}"):
        plan_entries([entry], "plan.json")


def test_a_wait_ends_when_the_state_holds_or_at_its_timeout():
    shrinking = [{**STATE, "isr": [2, 1, 3]}, STATE, {**STATE, "isr": [2]}]
    clock = [0.0]

    async def sleep(s: float) -> None:
        clock[0] += s

    target = {"select": "leader", "partition": 0, "until": {"isr_at_most": 1, "timeout_s": 5}}
    asyncio.run(await_state(_topology(shrinking), target, sleep, lambda: clock[0]))
    assert clock[0] == pytest.approx(0.2)  # asked three times, 0.1 s apart
    clock[0] = 0.0
    asyncio.run(await_state(_topology([STATE]), target, sleep, lambda: clock[0]))
    assert 5.0 <= clock[0] < 5.0 + 0.1 + 1e-9  # no more than one poll past the timeout


def test_every_weakness_plan_is_a_valid_plan_file():
    for kind in ("isolate-leader", "pause-pair", "stale-follower", "elr-power-loss", "halves"):
        entries = weakness_plan(kind)
        assert plan_entries(json.loads(json.dumps(entries)), kind) == entries


def _waited_for_the_shrinks(run_dir: Path) -> None:
    """The stale-follower episode as carried out: the successor paused; the next successor
    only once the first has left the ISR (a different node); the leader killed only once it
    is the ISR alone; the first pause healed no earlier than that kill, the second with it,
    however long the shrinks took."""
    first, second, kill = load_schedule(run_dir / "schedule.json").faults
    assert [f.outcome for f in (first, second, kill)] == ["ok"] * 3, (first, second, kill)
    assert first.resolved != second.resolved
    # the follower leaves the ISR after replica.lag.time.max.ms (2 s) paused, not at once
    assert second.started_s - second.start_s > 1.0, second
    assert kill.roles[kill.resolved["nodes"][0]] == "last-isr-member", kill
    assert first.roles[first.resolved["nodes"][0]].startswith("isr-follower")
    assert first.ended_s >= kill.started_s, (first, kill)
    assert second.ended_s >= kill.started_s + kill.duration_s - 0.5, (second, kill)


def _stale_follower_test(tmp_path: Path) -> Test:
    config = load_config("fast", ["nodes=4", "time_limit=18", "seed=3", "topic.partitions=1",
                                  "workload.final_read_timeout=40",
                                  "nemesis.faults=['kill', 'pause']"])
    return Test.of(config, tmp_path, plan=Plan.scripted(weakness_plan("stale-follower", hold=3.0)))


def test_the_stale_follower_plan_waits_for_the_isr_to_shrink_in_the_simulator(tmp_path: Path):
    test = _stale_follower_test(tmp_path)
    simulate_into(replace(test, config=simulated(test.config)), tmp_path, keep_going=True)
    _waited_for_the_shrinks(tmp_path)


@pytest.mark.netns
def test_the_stale_follower_plan_waits_for_the_isr_to_shrink_on_real_hosts(tmp_path: Path):
    """The same plan on the embedded system's real nodes (namespace hosts)."""
    _waited_for_the_shrinks(run_test(_stale_follower_test(tmp_path)))
