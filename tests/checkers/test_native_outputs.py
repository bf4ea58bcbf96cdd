"""histingest replaces its two output files, so it refuses an output that replacing would
harm: a device node (root would remove it), a FIFO, a directory, a symlink, the history it
reads, or the other output. It says why in one line, exits nonzero and touches nothing. The
exact path (checkers/ingest.py) refuses the same outputs."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from checkers import native_ingest
from checkers.exitcodes import UserError
from checkers.ingest import ingest

HISTORY = '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "send", ' \
          '"partition": 0, "value": 1}\n'


pytestmark = pytest.mark.native


@pytest.fixture
def histingest() -> str:
    binary = native_ingest.binary()
    assert binary is not None, "histingest is not built: make bootstrap builds it"
    return binary


def _plant(path: Path, kind: str, tmp_path: Path) -> None:
    if kind == "device":  # a null device of our own (needs root, as the harness runs)
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        (tmp_path / "target").write_text("keep me")
        path.symlink_to(tmp_path / "target")


def _snapshot(tmp_path: Path) -> dict[str, tuple]:
    """Every entry of the folder: its type, inode and, for a file, its bytes."""
    out = {}
    for p in sorted(tmp_path.iterdir()):
        st = p.lstat()
        data = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[p.name] = (stat.S_IFMT(st.st_mode), st.st_ino, st.st_rdev, data)
    return out


def _run(binary: str, history: Path, ops: Path, reads: Path) -> subprocess.CompletedProcess:
    return subprocess.run([binary, str(history), str(ops), str(reads)], capture_output=True,
                          text=True, timeout=30, check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="a device node needs root")
@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "symlink"])
@pytest.mark.parametrize("which", ["ops", "reads"])
def test_a_non_regular_output_is_refused_and_left_alone(histingest, tmp_path, kind, which):
    history = tmp_path / "history.jsonl"
    history.write_text(HISTORY)
    outputs = {"ops": tmp_path / "ops.parquet", "reads": tmp_path / "reads.parquet"}
    _plant(outputs[which], kind, tmp_path)
    before = _snapshot(tmp_path)
    done = _run(histingest, history, outputs["ops"], outputs["reads"])
    assert done.returncode != 0
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(outputs[which]) in done.stderr and "refusing" in done.stderr
    assert _snapshot(tmp_path) == before  # nothing removed, created or written


def test_an_output_that_is_the_history_is_refused(histingest, tmp_path):
    history = tmp_path / "history.jsonl"
    history.write_text(HISTORY)
    (tmp_path / "link.parquet").hardlink_to(history)
    before = _snapshot(tmp_path)
    for ops in (history, tmp_path / "link.parquet"):
        done = _run(histingest, history, ops, tmp_path / "reads.parquet")
        assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
        assert "same file" in done.stderr
    done = _run(histingest, history, tmp_path / "both.parquet", tmp_path / "both.parquet")
    assert done.returncode != 0 and "both outputs" in done.stderr
    assert _snapshot(tmp_path) == before


def test_regular_outputs_are_still_replaced(histingest, tmp_path):
    history = tmp_path / "history.jsonl"
    history.write_text(HISTORY)
    for name in ("ops.parquet", "reads.parquet"):
        (tmp_path / name).write_text("stale")
    done = _run(histingest, history, tmp_path / "ops.parquet", tmp_path / "reads.parquet")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ops.parquet").read_bytes()[:4] == b"PAR1"


def test_the_exact_path_refuses_the_same_outputs(tmp_path):
    history = tmp_path / "history.jsonl"
    history.write_text(HISTORY)
    os.mkfifo(tmp_path / "reads.parquet")
    before = _snapshot(tmp_path)
    with pytest.raises(UserError, match="a FIFO: refusing to replace it"):
        ingest(history, tmp_path, native=False)
    assert _snapshot(tmp_path) == before
