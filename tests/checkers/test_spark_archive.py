"""The Spark driver JVM's class archive (checkers/spark_archive.py): the session's JVM maps
the one bootstrap dumped, and an archive that anyone but its owner could have written is
never handed to a JVM."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from checkers import spark_archive
from checkers.spark import java_runs


def _mapped(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as fh:
        return {line.split(maxsplit=5)[5].strip() for line in fh if len(line.split()) == 6}


def test_the_driver_jvm_maps_the_class_archive_bootstrap_dumped(spark):
    java = java_runs()
    archive = spark_archive.archive_path(java)
    note = Path(sys.prefix) / ".skipped-spark-archive"
    if not archive.is_file() and note.is_file():
        pytest.skip(note.read_text().strip())
    assert spark_archive.options(java), f"no usable archive at {archive}: make bootstrap dumps it"
    jvm = spark.sparkContext._gateway.proc.pid
    assert os.path.realpath(archive) in _mapped(jvm)


@pytest.fixture
def archive_dir(tmp_path, monkeypatch):
    folder = tmp_path / "share"
    folder.mkdir(mode=0o755)
    monkeypatch.setattr(spark_archive, "ARCHIVE_DIR", folder)
    return folder


def _planted(java: str, mode: int = 0o644) -> Path:
    """An archive as `build` leaves one: the file and its seal."""
    path = spark_archive.archive_path(java)
    path.write_bytes(b"not really an archive")  # never mapped here: only the options are asked
    os.chmod(path, mode)
    spark_archive._seal_path(path).write_text(spark_archive._seal(os.stat(path)))
    return path


def test_an_archive_only_its_owner_can_write_is_used(archive_dir):
    java = java_runs()
    path = _planted(java)
    assert spark_archive.options(java) == (f"-XX:SharedArchiveFile={path} "
                                           f"{spark_archive.QUIET}")


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_an_archive_others_could_write_is_not_used(archive_dir, mode):
    java = java_runs()
    _planted(java, mode)
    assert spark_archive.options(java) == ""


def test_an_archive_cut_short_or_rewritten_since_its_dump_is_not_used(archive_dir, capsys):
    java = java_runs()
    path = _planted(java)
    with open(path, "r+b") as fh:
        fh.truncate(5)  # a JVM mapping it would die of SIGBUS
    assert spark_archive.options(java) == ""
    assert "not as it was dumped" in capsys.readouterr().err


def test_an_archive_without_its_seal_is_not_used(archive_dir):
    java = java_runs()
    path = _planted(java)
    spark_archive._seal_path(path).unlink()  # a dump that never finished
    assert spark_archive.options(java) == ""


def test_a_symlinked_archive_is_not_used(archive_dir, tmp_path):
    java = java_runs()
    real = tmp_path / "elsewhere.jsa"
    real.write_bytes(b"x")
    spark_archive.archive_path(java).symlink_to(real)
    assert spark_archive.options(java) == ""


def test_an_archive_below_a_folder_others_can_write_is_not_used(archive_dir):
    java = java_runs()
    _planted(java)
    os.chmod(archive_dir, 0o777)
    assert spark_archive.options(java) == ""


def test_another_jvm_or_other_jars_name_another_archive(monkeypatch, tmp_path):
    java = java_runs()
    before = spark_archive.digest(java)
    assert spark_archive.digest(java) == before  # the same JVM and jars: the same name
    monkeypatch.setattr(spark_archive, "JVM_OPTIONS", "-XX:+UseG1GC")
    assert spark_archive.digest(java) != before
    monkeypatch.undo()
    monkeypatch.setattr(spark_archive.pyspark, "__version__", "0.0.0")
    assert spark_archive.digest(java) != before
