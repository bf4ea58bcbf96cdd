"""BrokerStore on a real data directory: logs, clean-shutdown marker, HWM checkpoint."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from replication.broker_store import CLEAN_MARKER, HWM_CHECKPOINT, BrokerStore, LogConfig


class FsyncCounter:
    def __init__(self) -> None:
        self.synced: list[str] = []

    def __call__(self, fd: int) -> None:
        self.synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        os.fsync(fd)


def test_clean_marker_round_trip_is_read_once(tmp_path: Path) -> None:
    fsync = FsyncCounter()
    store = BrokerStore(tmp_path, fsync=fsync)
    assert store.read_and_delete_clean_marker() is None
    store.write_clean_marker(17)
    assert json.loads((tmp_path / CLEAN_MARKER).read_text()) == {"broker_epoch": 17}
    assert any(p.endswith(CLEAN_MARKER + ".tmp") for p in fsync.synced)
    assert BrokerStore(tmp_path).read_and_delete_clean_marker() == 17
    assert not (tmp_path / CLEAN_MARKER).exists()
    assert store.read_and_delete_clean_marker() is None  # a crash now is unclean


def test_clean_marker_deletion_syncs_the_directory(tmp_path: Path) -> None:
    fsync = FsyncCounter()
    store = BrokerStore(tmp_path, fsync=fsync)
    store.write_clean_marker(3)
    fsync.synced.clear()
    store.read_and_delete_clean_marker()
    assert fsync.synced == [str(tmp_path)]


@pytest.mark.parametrize("content", ["", "{", '{"epoch": 3}', '{"broker_epoch": "3"}', "[3]"])
def test_malformed_clean_marker_is_a_clear_error_and_kept(tmp_path: Path, content: str) -> None:
    (tmp_path / CLEAN_MARKER).write_text(content)
    with pytest.raises(ValueError, match=CLEAN_MARKER):
        BrokerStore(tmp_path).read_and_delete_clean_marker()
    assert (tmp_path / CLEAN_MARKER).read_text() == content


def test_open_log_creates_partition_folders_once(tmp_path: Path) -> None:
    store = BrokerStore(tmp_path, LogConfig(segment_bytes=100))
    log = store.open_log("my-topic", 3)
    assert store.open_log("my-topic", 3) is log
    log.append(0, [b"a"], 0)
    store.open_log("t", 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-topic-3", "t-0"]
    store.close(clean=True)
    again = BrokerStore(tmp_path).open_log("my-topic", 3)
    assert again.read(0, 1)[0].value == b"a"
    with pytest.raises(ValueError):
        store.open_log("../escape", 0)


def test_hwm_checkpoint_round_trip(tmp_path: Path) -> None:
    store = BrokerStore(tmp_path)
    assert store.read_hwm_checkpoint() == {}
    store.write_hwm_checkpoint({"t-12": 0, "a-b-0": 5})
    assert json.loads((tmp_path / HWM_CHECKPOINT).read_text()) == {"a-b-0": 5, "t-12": 0}
    assert BrokerStore(tmp_path).read_hwm_checkpoint() == {"a-b-0": 5, "t-12": 0}


@pytest.mark.parametrize("content", ["nope", "[]", '{"t": 1}', '{"t-0": -1}', '{"t-0": "1"}'])
def test_malformed_hwm_checkpoint_is_a_clear_error(tmp_path: Path, content: str) -> None:
    (tmp_path / HWM_CHECKPOINT).write_text(content)
    with pytest.raises(ValueError, match=HWM_CHECKPOINT):
        BrokerStore(tmp_path).read_hwm_checkpoint()
