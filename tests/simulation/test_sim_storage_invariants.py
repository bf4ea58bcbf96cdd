"""The simulation-only invariants on what the storage code does (simulation/invariants.py):
CleanCloseDurable, TruncationAtDivergence, and SyncedRecordsSurvive checked once more at
the end of a run (`InvariantMonitor.end_of_run`). Each is shown silent on the unmutated code
and, in a must-fail twin, reporting the fault it is for: a clean close that does not flush,
a follower truncating every log to 0, a segment file gone from under a running broker (what
the three mutants of docs/mutation.md's "The three survivors" do)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from checkers.invariants import SYNCED_RECORDS_SURVIVE
from harness.commands.mutate import cells
from harness.simulate import simulate_seed
from replication.broker_store import CLEAN_MARKER, BrokerStore
from replication.log import Log
from replication.partition import Replica
from replication.segment_log import segment_name
from simulation.disk import DATA_DIR, NodeDisk
from simulation.invariants import (
    CLEAN_CLOSE_DURABLE,
    CLEAN_START_AFTER_CLEAN_STOP,
    TRUNCATION_AT_DIVERGENCE,
)
from tests.simulation.test_sim_disk import _follower, _produce, _world

CAMPAIGN = Path(__file__).resolve().parents[2] / "campaigns" / "mutation.toml"


def _names(monitor) -> list[str]:
    return [v["name"] for v in monitor.violations]


@pytest.mark.parametrize("broken", [False, True], ids=["flushing-close", "close-without-flush"])
def test_a_clean_close_leaves_its_log_durable_to_its_end(monkeypatch, broken):
    """The safe configuration has no flush policy: a follower's records wait unsynced until
    its controlled shutdown's clean close flushes them, before the clean-shutdown marker."""
    if broken:
        monkeypatch.setattr(Log, "close", _close_without_flush)
    world, monitor = _world(11)
    _produce(world, 20)
    node = _follower(world)
    view = world.disks[node].views[("t", 0)]
    assert view.synced < view.end_offset == 20  # something for the close to flush
    world.loop.run(world.stop_clean(node))
    assert world.disks[node].fs.listdir(DATA_DIR).count("clean_shutdown") == 1
    assert _names(monitor) == ["invariant:" + CLEAN_CLOSE_DURABLE] * broken
    assert (view.synced == 20) is not broken


def _close_without_flush(self: Log, clean: bool) -> None:
    self._closed = True


def _search(cell: str, seed: int) -> dict:
    (c,) = cells(argparse.Namespace(cell=[cell], campaign=str(CAMPAIGN)))
    return simulate_seed(c.config, seed)


@pytest.mark.parametrize("broken", [False, True], ids=["kip-101", "truncate-to-0"])
def test_a_follower_truncates_where_its_log_diverges_from_the_leader(monkeypatch, broken):
    """Safe-mix seed 1: two leaders come back to diverged logs and truncate them. Truncated
    to the point of divergence (as the leader answers), nothing the leader holds is removed;
    truncated to 0, the committed prefix goes with the diverged tail."""
    truncations: list[int] = []
    real = Replica._truncate

    def truncate(self: Replica, offset: int, reason: str):
        truncations.append(offset)
        return real(self, 0 if broken else offset, reason)

    monkeypatch.setattr(Replica, "_truncate", truncate)
    row = _search("safe/safe-mix", 1)
    assert truncations and all(o > 0 for o in truncations)
    name = "invariant:" + TRUNCATION_AT_DIVERGENCE
    assert (name in row["anomalies"]) is broken, row
    assert (row["valid"] is True) is not broken


@pytest.mark.parametrize("damaged", [False, True], ids=["intact", "segment-unlinked"])
def test_the_end_of_a_run_recovers_every_disk_against_what_its_syncs_covered(damaged):
    """A follower no fault hits: only the end-of-run recovery (on a copy of its disk, as a
    kill would leave it) looks at its files. With flush.messages = 1 every record is synced."""
    world, monitor = _world(12, flush_messages=1)
    _produce(world, 30)
    node = _follower(world)
    disk = world.disks[node]
    assert disk.views[("t", 0)].synced == 30
    if damaged:  # as SegmentLog._drop_from's off-by-one does to a log truncated twice
        disk.fs.unlink(DATA_DIR / "t-0" / segment_name(0))
    files = sorted(disk.fs.listdir(DATA_DIR / "t-0"))
    monitor.end_of_run()
    assert _names(monitor) == ["invariant:" + SYNCED_RECORDS_SURVIVE] * damaged
    if damaged:
        assert "after a kill at the end of the run, offset 0 holds nothing" in \
            monitor.violations[0]["detail"]
    assert sorted(disk.fs.listdir(DATA_DIR / "t-0")) == files  # the check changed no file


@pytest.mark.parametrize("flush_messages", [None, 1], ids=["nothing-synced", "all-synced"])
def test_the_end_of_a_run_recovers_only_logs_with_synced_records(monkeypatch, flush_messages):
    """With no flush policy nothing is synced, so SyncedRecordsSurvive holds whatever a
    recovery keeps (even with the log's segment gone): the end of the run recovers nothing
    and reports nothing. With every record synced it recovers the log and reports the loss
    (the twin: a shortcut that skipped every disk would miss it)."""
    recovered: list[tuple[str, int]] = []
    real = NodeDisk._recovery

    def recovery(self: NodeDisk, key: tuple[str, int], scratch):
        recovered.append(key)
        return real(self, key, scratch)

    monkeypatch.setattr(NodeDisk, "_recovery", recovery)
    world, monitor = _world(12, flush_messages=flush_messages)
    _produce(world, 30)
    node = _follower(world)
    disk = world.disks[node]
    synced = disk.views[("t", 0)].synced
    assert synced == (30 if flush_messages else 0)
    disk.fs.unlink(DATA_DIR / "t-0" / segment_name(0))
    monitor.end_of_run()
    assert (("t", 0) in recovered) is bool(synced)
    assert _names(monitor) == ["invariant:" + SYNCED_RECORDS_SURVIVE] * bool(synced)


@pytest.mark.parametrize("broken", [False, True], ids=["marker-deleted", "marker-kept"])
def test_a_broker_claims_a_clean_shutdown_only_after_one(monkeypatch, broken):
    """A clean restart, then a kill: the start after the kill must find no clean-shutdown
    marker. The must-fail twin keeps the marker at start (`BrokerStore.
    read_and_delete_clean_marker` without its unlink: a surviving mutant of docs/mutation.md's
    sample of 64), so the start after the kill claims the clean restart's shutdown."""
    if broken:
        monkeypatch.setattr(BrokerStore, "read_and_delete_clean_marker", _read_marker_only)
    world, monitor = _world(11)
    _produce(world, 20)
    node = _follower(world)
    world.loop.run(world.stop_clean(node))
    world.start(node)
    world.run_for(2)
    assert _names(monitor) == []  # the clean restart's own claim is true
    world.kill(node)
    world.start(node)
    world.run_for(2)
    assert _names(monitor) == ["invariant:" + CLEAN_START_AFTER_CLEAN_STOP] * broken


def _read_marker_only(self: BrokerStore) -> int | None:
    try:
        return json.loads(self._fs.read_bytes(self.data_dir / CLEAN_MARKER))["broker_epoch"]
    except FileNotFoundError:
        return None
