"""The controller's metadata log file (replication/metadata_file.py), on real files and on the
simulator's lossy filesystem: the same code on both."""

from __future__ import annotations

from pathlib import Path

import pytest

from replication.metadata_file import METADATA_LOG, MetadataFile
from simulation.simfs import SimFs

RECORDS = [{"type": "broker", "id": 1}, {"type": "partition", "state": {"topic": "t", "p": [1, 2]}}]


def test_records_survive_a_restart_on_real_files(tmp_path: Path) -> None:
    log = MetadataFile(tmp_path / METADATA_LOG)
    assert log.read_metadata() == []
    for r in RECORDS:
        log.append_metadata(r)
    assert (tmp_path / METADATA_LOG).read_bytes().count(b"\n") == 2
    again = MetadataFile(tmp_path / METADATA_LOG)
    assert again.read_metadata() == RECORDS
    again.append_metadata({"type": "broker", "id": 2})
    assert MetadataFile(tmp_path / METADATA_LOG).read_metadata() == [*RECORDS, {"type": "broker", "id": 2}]


@pytest.mark.parametrize("tail", [b'{"type": "bro', b'{"type": "broker"}'],
                         ids=["torn", "whole-but-no-newline"])
def test_a_torn_last_line_is_cut_off_and_the_next_append_starts_clean(tmp_path: Path, tail) -> None:
    """An append writes its newline with the record and fsyncs both, so a last line without
    one was never acknowledged, even when it parses."""
    path = tmp_path / METADATA_LOG
    log = MetadataFile(path)
    log.append_metadata(RECORDS[0])
    with open(path, "ab") as f:
        f.write(tail)
    again = MetadataFile(path)
    assert again.read_metadata() == RECORDS[:1]
    again.append_metadata(RECORDS[1])
    assert MetadataFile(path).read_metadata() == RECORDS


def test_a_bad_line_before_the_last_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / METADATA_LOG
    path.write_bytes(b'{"type": "broker"}\nnot json\n{"type": "broker"}\n')
    with pytest.raises(SystemExit, match=f"{METADATA_LOG}:2: corrupt metadata record"):
        MetadataFile(path).read_metadata()


def test_every_append_is_durable_before_it_returns_on_the_lossy_filesystem() -> None:
    fs = SimFs()
    fs.makedirs("/data")
    log = MetadataFile(Path("/data") / METADATA_LOG, fs)
    for r in RECORDS:
        log.append_metadata(r)
    fs.power_loss()  # the file's creation and both records were fsynced
    assert MetadataFile(Path("/data") / METADATA_LOG, fs).read_metadata() == RECORDS
    with pytest.raises(OSError) as e:  # the descriptor was open across the loss
        log.append_metadata(RECORDS[0])
    assert e.value.errno == 5


def test_without_its_fsync_the_records_are_lost(monkeypatch) -> None:
    """Must-fail twin of the test above: the same appends with fsync a no-op lose the file."""
    fs = SimFs()
    fs.makedirs("/data")
    monkeypatch.setattr(fs, "fsync", lambda fd: None)
    log = MetadataFile(Path("/data") / METADATA_LOG, fs)
    for r in RECORDS:
        log.append_metadata(r)
    fs.power_loss()
    assert MetadataFile(Path("/data") / METADATA_LOG, fs).read_metadata() == []
