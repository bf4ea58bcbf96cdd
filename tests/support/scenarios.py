"""Scripted fault callbacks for `run_simulation` and the analysis tests need.

`shrink_then` is a plan the nemesis carries out (`planned`), as in any run. `tour` and
`weakness` are still hand-written scripts calling the World's verbs and writing `start-<kind>`
/ `stop-<kind>` nemesis operations themselves: their episodes wait for partition states (a
follower out of the ISR, the ISR the leader alone) and aim at roles (the successor, an ELR
member, "halves" with the controller) the nemesis's targets cannot express yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.sim_run import nemesis_faults
from nemesis.faults import metadata_topology
from nemesis.schedule import ScheduleParams, ScheduleRecord
from simulation.loop import SimLoop
from simulation.world import World
from workloads.history import read_history

Faults = Callable[[World, SimLoop], Awaitable[Any] | None]


async def partition_state(world: World, topic: str, partition: int = 0) -> dict | None:
    """The partition's live state from the cluster's metadata, as the nemesis resolves it."""
    topology = metadata_topology(world.nodes, world.bootstrap(), topic, pool_factory=world.pool)
    return await topology.partition_state(partition)


def _note(world: World, f: str, value: Any) -> None:
    if world.history is not None:
        world.history.nemesis(f, value)


def planned(entries: list[dict[str, Any]], topic: str, run_dir: Path) -> Faults:
    """A scripted plan carried out by the nemesis (its kinds, targets resolved against live
    metadata, history operations and run_dir/schedule.json), as `harness simulate` carries
    out a cell's schedule."""
    end = max(e["start_s"] + e["duration_s"] for e in entries)
    params = ScheduleParams(seed=0, faults=tuple(sorted({e["kind"] for e in entries})),
                            time_limit=end, interval=end, duration=end)  # recorded only

    def faults(world: World, loop: SimLoop) -> Awaitable[Any]:
        schedule = ScheduleRecord(Path(run_dir) / "schedule.json", params, entries)
        return nemesis_faults(schedule, topic, {})(world, loop)

    return faults


def shrink_then(hit: str, topic: str, run_dir: Path, partition: int = 0, *, at: float = 2.0,
                shrink_wait: float = 3.0, down: float = 1.0, pick: int = 0) -> Faults:
    """nemesis.schedule's shrink-first episode as a plan: at `at` s the partition's followers
    are paused; `shrink_wait` s later (time for the leader's ISR to shrink to itself) `hit`
    ("kill", "power-loss" or "torn-power-loss") strikes the last ISR member; the followers
    resume `down` s after that and the node starts again `down` s later."""
    if hit not in ("kill", "power-loss", "torn-power-loss"):
        raise ValueError(f"unknown hit {hit!r}")
    return planned([
        {"id": 0, "kind": "pause", "start_s": at, "duration_s": shrink_wait + down,
         "target": {"select": "followers", "partition": partition, "pick": 0}},
        {"id": 1, "kind": hit, "start_s": at + shrink_wait, "duration_s": 2 * down, "after": 0,
         "target": {"select": "last-isr-member", "partition": partition, "pick": pick}},
    ], topic, run_dir)


def tour(topic: str, partition: int = 0, *, start: float = 1.0, step: float = 1.5) -> Faults:
    """One fault of (almost) every kind in turn, each healed before the next, aimed at the
    partition's leader where that means something: partition, slow link, pause, kill, lossy
    link, torn power loss, reset link, clock jump, controlled restart, page-cache loss of a
    follower (healed by restarting it: after the loss its process fails with EIO), clock
    drift. For determinism tests and the benchmark's fault mode."""
    settings = {"link_delay_ms": 200.0, "link_jitter_ms": 50.0, "link_loss_percent": 20.0,
                "reset_probability": 0.05}

    async def faults(world: World, loop: SimLoop) -> None:
        async def leader() -> str | None:
            state = await partition_state(world, topic, partition)
            if state is None or state["leader"] is None:
                return None
            return world.brokers[state["leader"]]

        async def episode(kind: str, apply: Callable[[str], Any], heal: Callable[[str], Any],
                          node: str | None = None) -> None:
            await asyncio.sleep(start if kind == "partition" else step / 2)
            target = node or await leader()
            if target is None:
                return
            result = apply(target)
            if asyncio.iscoroutine(result):
                result = await result
            _note(world, f"start-{kind}", {"nodes": [target], **({"lost": {target: result}}
                                                                  if isinstance(result, dict) else {})})
            await asyncio.sleep(step / 2)
            done = heal(target)
            if asyncio.iscoroutine(done):
                await done
            _note(world, f"stop-{kind}", {"nodes": [target]})

        def isolate(node: str) -> None:
            others = frozenset(n for n in world.nodes if n != node)
            world.partition({node: others, **{n: frozenset({node}) for n in others}})

        await episode("partition", isolate, lambda n: world.heal_partition())
        await episode("slow-link", lambda n: world.degrade_link(n, "slow-link", settings, 1),
                      world.restore_link)
        await episode("pause", world.pause, world.resume)
        await episode("kill", world.kill, world.start)
        await episode("lossy-link", lambda n: world.degrade_link(n, "lossy-link", settings, 2),
                      world.restore_link)
        await episode("torn-power-loss", lambda n: world.power_loss(n, True, 3), world.start)
        await episode("reset-link", lambda n: world.degrade_link(n, "reset-link", settings, 4),
                      world.restore_link)
        await episode("clock-jump", lambda n: world.clock_jump(n, 5000), world.clock_reset)
        await episode("restart", world.stop_clean, world.start)
        follower = sorted(set(world.brokers.values()) - {await leader() or ""})[0]

        def restart(node: str) -> None:  # the broken process (EIO) is replaced, as an operator would
            world.kill(node)
            world.start(node)

        await episode("page-cache-loss", world.page_cache_loss, restart, follower)
        await episode("clock-drift", lambda n: world.clock_drift(n, 1.5), world.clock_reset)

    return faults


def weakness(kind: str, topic: str, partition: int = 0, *, at: float = 2.0, hold: float = 4.0,
             pick: int = 0) -> Faults:
    """One scripted episode aimed at one weakness of docs/replication.md's "Alternative
    behaviours" (the invariant twins of tests/simulation/test_invariants_sim.py use them):

    - "isolate-leader" (acks=1): the leader is cut off from the controller and the other
      brokers (the clients still reach it) for `hold` s: it acknowledges on alone until it
      learns it was replaced.
    - "pause-pair" (replica.truncation=high-watermark): the leader, then (0.5 s later) the
      follower the controller will elect next are paused for `hold` s: the last follower
      follows the successor (truncating to its own stale HWM without KIP-101), cannot fetch
      from it, and is elected when the successor is fenced in turn.
    - "stale-follower" (unclean.leader.election.enable): one follower is paused until it
      has left the ISR, then the other until the leader is the ISR alone (it goes to the
      ELR), then the leader is killed and the first follower resumed: an out-of-sync
      replica is the only unfenced one; `hold` s later everything is healed.
    - "elr-power-loss" (unclean.shutdown.detection=false): the followers are paused until
      the leader is the ISR alone, an ELR member among them loses power and restarts, the
      leader is killed: the restarted follower is the only candidate while the other is
      still paused; then everything is healed.
    - "halves" (isr.update=local-first): the controller and one follower are cut off from the
      leader and the other follower for `hold` s."""

    async def faults(world: World, loop: SimLoop) -> None:
        await asyncio.sleep(at)
        state = await partition_state(world, topic, partition)
        if state is None or state["leader"] is None:
            return
        leader_id = state["leader"]
        leader = world.brokers[leader_id]
        others = [r for r in state["replicas"] if r != leader_id]
        followers = [world.brokers[r] for r in others]
        if kind == "isolate-leader":
            rest = frozenset(n for n in world.nodes if n != leader)
            world.partition({leader: rest, **{n: frozenset({leader}) for n in rest}})
            _note(world, "start-partition", {"nodes": [leader]})
            await asyncio.sleep(hold)
            world.heal_partition()
            _note(world, "stop-partition", {"nodes": [leader]})
        elif kind == "pause-pair":
            successor = world.brokers[next(r for r in state["replicas"] if r != leader_id and r in state["isr"])]
            pair = [leader, successor]
            world.pause(leader)  # fenced first: the successor, still unfenced, is elected
            await asyncio.sleep(0.5)
            world.pause(successor)
            _note(world, "start-pause", {"nodes": pair})
            await asyncio.sleep(hold)
            for node in pair:
                world.resume(node)
            _note(world, "stop-pause", {"nodes": pair})
        elif kind == "elr-power-loss":
            for node in followers:
                world.pause(node)
            _note(world, "start-pause", {"nodes": followers})
            deadline = loop.time() + 16.0
            while loop.time() < deadline:
                await asyncio.sleep(0.1)
                state = await partition_state(world, topic, partition)
                if state is not None and list(state["isr"]) == [leader_id]:
                    break
            # an ELR member (the followers fenced while the ISR was below MinISR)
            elr = [world.brokers[r] for r in (state or {}).get("elr", ())]
            lost_one = elr[-1] if elr else followers[0]
            still = [n for n in followers if n != lost_one]
            lost = world.power_loss(lost_one, pick=pick)
            _note(world, "start-power-loss", {"nodes": [lost_one], "lost": {lost_one: lost}})
            world.kill(leader)
            _note(world, "start-kill", {"nodes": [leader]})
            await asyncio.sleep(0.5)
            world.start(lost_one)
            _note(world, "stop-power-loss", {"nodes": [lost_one]})
            await asyncio.sleep(hold)
            for node in still:
                world.resume(node)
            _note(world, "stop-pause", {"nodes": followers})
            world.start(leader)
            _note(world, "stop-kill", {"nodes": [leader]})
        elif kind == "stale-follower":
            stale, other = followers[0], followers[1:]
            world.pause(stale)
            await _until(world, loop, topic, partition, lambda st: others[0] not in st["isr"])
            for node in other:
                world.pause(node)
            await _until(world, loop, topic, partition, lambda st: list(st["isr"]) == [leader_id])
            world.kill(leader)
            _note(world, "start-kill", {"nodes": [leader], "paused": followers})
            world.resume(stale)
            await asyncio.sleep(hold)
            for node in other:
                world.resume(node)
            world.start(leader)
            _note(world, "stop-kill", {"nodes": [leader], "resumed": followers})
        elif kind == "halves":
            one, other = followers[0], followers[1:]
            a = frozenset({world.controller, one})
            b = frozenset({leader, *other})
            world.partition({**{n: b for n in a}, **{n: a for n in b}})
            _note(world, "start-partition", {"nodes": sorted(a), "from": sorted(b)})
            await asyncio.sleep(hold)
            world.heal_partition()
            _note(world, "stop-partition", {"nodes": sorted(a)})
        else:
            raise ValueError(f"unknown weakness episode {kind!r}")

    return faults


async def _until(world: World, loop: SimLoop, topic: str, partition: int, done: Callable[[dict], bool],
                 timeout: float = 16.0) -> None:
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        await asyncio.sleep(0.1)
        state = await partition_state(world, topic, partition)
        if state is not None and done(state):
            return


@dataclass
class Loss:
    """Acknowledged sends against the last complete final read."""

    acked: set[int] = field(default_factory=set)
    read: set[int] = field(default_factory=set)
    final_complete: bool = False

    @property
    def lost(self) -> list[int]:
        return sorted(self.acked - self.read)


def acknowledged_loss(history: str | Path, partition: int = 0) -> Loss:
    """Which acknowledged values of a partition its last successful final read lacks."""
    ops = read_history(history)
    out = Loss()
    out.acked = {o["value"] for o in ops
                 if o["f"] == "send" and o["type"] == "ok" and o.get("partition") == partition}
    finals = [o for o in ops if o["f"] == "final-poll" and o["type"] == "ok"
              and o.get("partition") == partition]
    if finals:
        out.read = {v for _, v in finals[-1]["records"]}
        out.final_complete = bool(finals[-1].get("complete"))
    return out
