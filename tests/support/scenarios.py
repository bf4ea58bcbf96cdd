"""Scripted fault plans for `run_simulation` and the analysis tests need.

Each (`shrink_then`, `tour`, `weakness`) is a list of plan entries the nemesis carries out
(`planned`), as in any run: the same kinds, targets resolved against live metadata, waits for
partition states ("until", nemesis.until), history operations and schedule.json. The same
entries run on real hosts (tests/nemesis/test_until.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.sim_run import nemesis_faults
from nemesis.faults import metadata_topology
from nemesis.schedule import ScheduleParams, ScheduleRecord
from simulation.loop import SimLoop
from simulation.world import World
from support.history import read_history

Faults = Callable[[World, SimLoop], Awaitable[Any] | None]


async def partition_state(world: World, topic: str, partition: int = 0) -> dict | None:
    """The partition's live state from the cluster's metadata, as the nemesis resolves it."""
    topology = metadata_topology(world.nodes, world.bootstrap(), topic, pool_factory=world.pool)
    return await topology.partition_state(partition)


def planned(entries: list[dict[str, Any]], topic: str, run_dir: Path,
            settings: dict[str, Any] | None = None) -> Faults:
    """A scripted plan carried out by the nemesis (its kinds, targets resolved against live
    metadata, history operations and run_dir/schedule.json), as `harness simulate` carries
    out a cell's schedule; `settings`: the [nemesis] settings its kinds apply."""
    end = max(e["start_s"] + e["duration_s"] for e in entries)
    params = ScheduleParams(seed=0, faults=tuple(sorted({e["kind"] for e in entries})),
                            time_limit=end, interval=end, duration=end)  # recorded only

    def faults(world: World, loop: SimLoop) -> Awaitable[Any]:
        schedule = ScheduleRecord(Path(run_dir) / "schedule.json", params, entries)
        return nemesis_faults(schedule, topic, settings or {})(world, loop)

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


# The [nemesis] settings the tour's link and clock faults apply.
TOUR_SETTINGS = {"link_delay_ms": 200.0, "link_jitter_ms": 50.0, "link_loss_percent": 20.0,
                 "reset_probability": 0.05, "clock_skew_ms": 5000.0}
TOUR = ("partition", "slow-link", "pause", "kill", "lossy-link", "torn-power-loss", "reset-link",
        "clock-skew", "restart", "corrupt-segment", "page-cache-loss")


def tour(topic: str, run_dir: Path, partition: int = 0, *, start: float = 1.0,
         step: float = 1.5) -> Faults:
    """One fault of every simulated kind but the outage in turn, `step` s apart, each healed
    after half a step, aimed at the partition's leader (the partition isolates it): partition,
    slow link, pause, kill, lossy link, torn power loss, reset link, clock skew, controlled
    restart, a damaged segment, and last a page-cache loss of the successor (its process then
    halts at its next disk I/O, as Kafka halts when its log directory fails, and the fault's
    heal starts it again). For determinism
    tests and the benchmark's fault mode."""
    entries = []
    for i, kind in enumerate(TOUR):
        if kind == "partition":
            target: dict[str, Any] = {"shape": "isolate-leader"}
        else:
            target = {"select": "successor" if kind == "page-cache-loss" else "leader"}
        entries.append({"id": i, "kind": kind, "start_s": start + i * step,
                        "duration_s": step / 2,
                        "target": {**target, "partition": partition, "pick": i}})
    return planned(entries, topic, run_dir, TOUR_SETTINGS)


def weakness(kind: str, topic: str, run_dir: Path, partition: int = 0, *, at: float = 2.0,
             hold: float = 4.0, pick: int = 0) -> Faults:
    """One scripted episode aimed at one weakness of docs/replication.md's "Alternative
    behaviours" (the invariant twins of tests/simulation/test_invariants_sim.py use them),
    as a plan the nemesis carries out (`weakness_plan`)."""
    return planned(weakness_plan(kind, partition, at=at, hold=hold, pick=pick), topic, run_dir)


def weakness_plan(kind: str, partition: int = 0, *, at: float = 2.0, hold: float = 4.0,
                  pick: int = 0) -> list[dict[str, Any]]:
    """The plan entries of one weakness episode, starting at `at` s:

    - "isolate-leader" (acks=1): the leader is cut off from the controller and the other
      brokers (the clients still reach it) for `hold` s: it acknowledges on alone until it
      learns it was replaced.
    - "pause-pair" (replica.truncation=high-watermark): the leader, then (0.5 s later) the
      successor (the follower the controller will elect next) are paused for `hold` s: the
      last follower follows the successor (truncating to its own stale HWM without KIP-101),
      cannot fetch from it, and is elected when the successor is fenced in turn.
    - "stale-follower" (unclean.leader.election.enable): the successor is paused; once it has
      left the ISR, the next successor is paused; once the leader is the ISR alone (it goes
      to the ELR), the leader is killed and the first follower resumed: an out-of-sync
      replica is the only unfenced one; `hold` s later everything is healed.
    - "elr-power-loss" (unclean.shutdown.detection=false): the followers are paused; once
      the leader is the ISR alone, an ELR member loses power (and restarts 0.5 s later) and
      the leader is killed: the restarted follower is the only candidate while the other is
      still paused; `hold` s later everything is healed.
    - "halves" (isr.update=local-first): the controller and one follower are cut off from the
      leader and the other follower for `hold` s."""
    def entry(i: int, kind: str, start: float, duration: float, target: dict[str, Any],
              **more: Any) -> dict[str, Any]:
        return {"id": i, "kind": kind, "start_s": round(at + start, 3),
                "duration_s": round(duration, 3),
                "target": {**target, "partition": partition, "pick": pick}, **more}

    leader, successor = {"select": "leader"}, {"select": "successor"}
    if kind == "isolate-leader":
        return [entry(0, "partition", 0, hold, {"shape": "isolate-leader"})]
    if kind == "pause-pair":  # the leader fenced first: the successor, still unfenced, is elected
        return [entry(0, "pause", 0, hold + 0.5, leader),
                entry(1, "pause", 0.5, hold, successor, after=0)]
    if kind == "stale-follower":
        return [entry(0, "pause", 0, 0.2, successor),
                entry(1, "pause", 0.1, 0.1 + hold, {**successor, "until": {"isr_at_most": 2}},
                      after=0),
                entry(2, "kill", 0.2, hold, {**leader, "until": {"isr_at_most": 1}}, after=0)]
    if kind == "elr-power-loss":
        return [entry(0, "pause", 0, 0.6 + hold, {"select": "followers"}),
                entry(1, "power-loss", 0.1, 0.5,
                      {"select": "elr-member", "until": {"isr_at_most": 1}}, after=0),
                entry(2, "kill", 0.1, 0.5 + hold, leader, after=0)]
    if kind == "halves":
        a, b = ["controller", "isr-follower#1"], ["leader", "isr-follower#2"]
        grudge = {**{n: b for n in a}, **{n: a for n in b}}
        return [entry(0, "partition", 0, hold, {"roles": {"grudge": grudge}})]
    raise ValueError(f"unknown weakness episode {kind!r}")


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
