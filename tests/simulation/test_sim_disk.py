"""A simulated node's disk (simulation/disk.py): the real storage code over SimFs, and the
durability invariant SyncedRecordsSurvive (checkers/invariants.py) checked on it.

Must-fail twin: a run whose follower's disk has a broken fsync (a no-op: every sync job
still runs to its end, so the log counts its records as synced) loses those records at a
power loss, and the invariant says so; the same run with the real fsync loses nothing it
synced."""

from __future__ import annotations

import asyncio

import pytest

from checkers.invariants import SYNCED_RECORDS_SURVIVE, synced_record_lost
from replication.client import Client, ClientError
from replication.config import NodeConfig
from replication.log import Record
from simulation.disk import METADATA_PATH, DiskConfig
from simulation.invariants import InvariantMonitor
from simulation.world import World

NAME = "invariant:" + SYNCED_RECORDS_SURVIVE


def _world(seed: int, disk: DiskConfig | None = None, **config) -> tuple[World, InvariantMonitor]:
    world = World(seed=seed, n_nodes=4, node_config=NodeConfig(min_insync_replicas=2, **config),
                  disk=disk)
    world.monitor = InvariantMonitor(world, keep_going=True)
    return world, world.monitor


def _produce(world: World, n: int) -> None:
    """Create topic t (1 partition, RF 3) and produce n records at acks=all, one at a time."""

    async def main():
        client = Client(world.bootstrap(), request_timeout_s=3, pool=world.pool())
        while True:
            await asyncio.sleep(0.2)
            try:
                md = await client.metadata(refresh=True)
            except ClientError:
                continue
            if len(md.brokers) == 3 and not any(b.fenced for b in md.brokers.values()):
                break
        await client.create_topic("t", 1, 3)
        await asyncio.sleep(2)
        for i in range(n):
            await client.produce("t", 0, f"v{i}")
        await asyncio.sleep(1)
        await client.close()

    world.start_all()
    world.loop.run(main())


def _follower(world: World) -> str:
    """A broker that does not lead t-0."""
    ctrl = world.process(world.controller).machine
    leader = ctrl.partitions[("t", 0)].leader
    return next(n for b, n in world.brokers.items() if b != leader)


@pytest.mark.parametrize("inline", [False, True], ids=["deferred", "inline"])
@pytest.mark.parametrize("torn", [False, True], ids=["power-loss", "torn"])
@pytest.mark.parametrize("broken", [False, True], ids=["fsync", "broken-fsync"])
def test_a_record_whose_fsync_completed_survives_a_power_loss(broken, torn, inline):
    """Deferred: the brokers' storage port, each sync a job (as on real hosts); inline: the
    logs fsync as they append (instant fsyncs)."""
    world, monitor = _world(3, DiskConfig(fsync=None) if inline else None, flush_messages=1)
    node = "n3"
    if broken:
        world.disks[node].fsync = lambda fd: None  # what the storage code fsyncs with
    _produce(world, 30)
    view = world.disks[node].views[("t", 0)]
    assert view.end_offset == 30 and view.synced == 30  # flush.messages=1: every job ran
    report = world.power_loss(node, torn=torn, pick=1)
    lost = [v for v in monitor.violations if v["name"] == NAME]
    kept = 30 - report["lost_records"]  # torn: a seeded part of the unsynced bytes stays
    if broken:
        assert kept < 30 and (kept == 0 or torn)
        (v,) = lost
        assert v["topic"] == "t" and f"offset {kept} holds nothing" in v["detail"]
        assert "fault power_loss" in v["recent_steps"][-1]["step"]
    else:
        assert report["lost_records"] == 0 and view.end_offset == 30 and lost == []
    assert [v["name"] for v in monitor.violations] == [NAME] * broken
    if not broken:  # (with it, a torn loss may also tear the HWM checkpoint it never synced)
        world.start(node)
        world.run_for(3)
        assert view.end_offset == 30 and monitor.violations == []


def test_a_kill_keeps_every_record_even_unsynced_and_the_restart_recovers_them():
    world, monitor = _world(5)  # no flush policy: nothing is synced but the empty log
    _produce(world, 20)
    node = _follower(world)
    view = world.disks[node].views[("t", 0)]
    assert (view.end_offset, view.synced) == (20, 0)
    records = list(view.records)
    world.kill(node)
    world.start(node)
    world.run_for(2)
    assert view.records == records and view.synced == 20  # the reopen's sync job ran
    assert monitor.violations == []


def test_a_page_cache_loss_under_the_process_shows_on_its_disk_when_it_dies():
    """The running broker keeps what it holds (its files fail with EIO); the records it
    loses are gone from its log view only once it exits, as the next start will see."""
    world, monitor = _world(6)
    _produce(world, 20)
    node = _follower(world)
    view = world.disks[node].views[("t", 0)]
    report = world.page_cache_loss(node)
    assert report["lost_records"] == 20 and report["logs"] == {"t-0": 20}
    assert view.end_offset == 20  # the process's view until it dies
    world.kill(node)
    assert view.end_offset == 0
    assert [v["name"] for v in monitor.violations if v["name"] == NAME] == []


def test_a_loss_computes_the_next_recovery_on_a_copy_and_leaves_the_disk_as_it_was():
    world, _ = _world(7)
    _produce(world, 10)
    node = _follower(world)
    world.kill(node)
    fs = world.disks[node].fs
    before = fs.copy()
    world.power_loss(node)  # the recovery of the views runs on a scratch copy
    after = fs.copy()
    assert sorted(before._visible.files) == sorted(after._visible.files)
    for path, inode in after._visible.files.items():  # only the unsynced bytes went
        assert bytes(inode.data) == before._visible.files[path].durable


def test_the_controller_metadata_log_is_a_file_on_its_simulated_disk():
    world, monitor = _world(8)
    _produce(world, 1)
    disk = world.disks[world.controller]
    records = disk.metadata_records()
    assert {r["type"] for r in records} >= {"partition"}
    assert disk.fs.size(METADATA_PATH) == sum(len(line) + 1 for line in
                                              disk.fs.read_bytes(METADATA_PATH).split(b"\n")[:-1])
    world.power_loss(world.controller)  # every record was fsynced as it was appended
    assert disk.metadata_records() == records
    world.start(world.controller)
    world.run_for(3)
    assert disk.metadata_records()[: len(records)] == records
    assert monitor.violations == []


def test_synced_record_lost_states_the_invariant():
    a, b, c = (Record(i, 1, 0, b"x%d" % i) for i in range(3))
    assert synced_record_lost(2, [a, b, c], [a, b]) is None  # the unsynced tail may go
    assert synced_record_lost(3, [a, b, c], [a, b]) == 2
    assert synced_record_lost(2, [a, b], [a, Record(1, 2, 0, b"x1")]) == 1  # another epoch
    assert synced_record_lost(0, [a], []) is None
