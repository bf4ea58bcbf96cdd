"""Segment rolls in simulation: with a small `segment.bytes` the simulated brokers' logs (the
real `SegmentLog` over SimFs, simulation/disk.py) roll many segments, so a roll, a recovery
of a log of several segments after a (torn) power loss, and a truncation back across a
segment boundary all run in a simulated run, and the durability invariant and the verdict
hold there as they do with one segment.

Must-fail twin: the same run with the brokers' fsync broken (a no-op) violates
SyncedRecordsSurvive with small segments (each roll's sync claims its segment's records
durable, the power loss takes them), and not with the default 64 MB ones, which never roll
and, with no flush policy, never claim a record synced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.scenarios import acknowledged_loss, shrink_then

from replication.segment_format import base_offset_of
from simulation.run import SimResult, run_simulation
from simulation.world import World
from workloads.kafka import WorkloadParams

# harness/profiles/fast.toml's timeouts with MinISR 2 (campaigns/validation.toml's base)
SAFE = {"broker.session.timeout.ms": 2000, "broker.heartbeat.interval.ms": 200,
        "replica.lag.time.max.ms": 2000, "unclean.recovery.timeout.ms": 500,
        "min.insync.replicas": 2}
SMALL = 512  # bytes: about 16 of the workload's records a segment
LOG = "/data/chaos-0"


class Watched:
    """The run's world, and the segment files each node's storage code deleted, with when (a
    recorder around the real SimFs.unlink, which it calls unchanged)."""

    def __init__(self) -> None:
        self.world: World | None = None
        self.deleted: dict[str, list[tuple[int, int]]] = {}  # node: [(virtual ns, base)]

    def hook(self, world: World) -> None:
        self.world = world
        for node, disk in world.disks.items():
            unlink = disk.fs.unlink

            def recorded(path, missing_ok=False, unlink=unlink, node=node):
                base = base_offset_of(Path(path))
                if base is not None:
                    self.deleted.setdefault(node, []).append((world.loop.time_ns(), base))
                return unlink(path, missing_ok)

            disk.fs.unlink = recorded

    def segments(self, node: str) -> int:
        return sum(base_offset_of(Path(name)) is not None
                   for name in self.world.disks[node].fs.listdir(LOG))


def simulate(tmp: Path, seed: int, segment_bytes: int, hit: str, hook=None) -> SimResult:
    params = WorkloadParams(topic="chaos", partitions=1, acks="all", rate=300.0, producers=16,
                            consumers=2, request_timeout_s=3.0, seed=seed)
    return run_simulation(tmp, seed=seed, params=params, time_limit=8.0,
                          system={**SAFE, "segment.bytes": segment_bytes},
                          faults=shrink_then(hit, "chaos", tmp), final_read_timeout=30,
                          keep_going=True, world_hook=hook)


def events(r: SimResult, kind: str) -> list[dict]:
    return [e for e in map(json.loads, r.events.read_text().splitlines()) if e["kind"] == kind]


def test_small_segments_roll_recover_and_truncate_across_segments_losing_nothing(tmp_path):
    """The last ISR member loses power (torn) with its followers paused: its log, many
    segments long, recovers a torn tail; it then truncates back to the new leader's log, across
    a segment boundary on some seed. No invariant is violated, nothing acknowledged is lost."""
    crossed = []
    for seed in (1, 2, 3):
        watched = Watched()
        r = simulate(tmp_path / f"s{seed}", seed, SMALL, "torn-power-loss", watched.hook)
        brokers = sorted(watched.world.brokers.values())
        assert all(watched.segments(n) >= 10 for n in brokers), \
            {n: watched.segments(n) for n in brokers}
        assert r.invariants == [], r.invariants[0]
        loss = acknowledged_loss(r.history)
        assert loss.final_complete and loss.lost == [] and len(loss.acked) > 300
        assert [e for e in events(r, "log-recovery") if e["reason"] == "torn-tail"]
        crossed += [(seed, t["host"]) for t in events(r, "truncate")
                    if any(when == t["time"] and base > t["to_offset"]  # deleted by it
                           for when, base in watched.deleted.get(t["host"], []))]
        if crossed:
            break
    assert crossed, "no seed truncated a log back across a segment boundary"


@pytest.mark.parametrize("segment_bytes, violated", [(SMALL, True), (64 << 20, False)],
                         ids=["small-segments", "one-segment"])
def test_a_broken_fsync_loses_the_records_a_roll_claimed_synced(tmp_path, segment_bytes, violated):
    def broken_fsync(world: World) -> None:
        for node in world.brokers.values():
            world.disks[node].fsync = lambda fd: None  # what the storage code fsyncs with

    r = simulate(tmp_path, 1, segment_bytes, "power-loss", broken_fsync)
    names = {v["name"] for v in r.invariants}
    assert ("invariant:SyncedRecordsSurvive" in names) is violated, names
