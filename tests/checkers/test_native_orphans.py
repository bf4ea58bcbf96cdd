"""The checkers' native programs end with the process that started them: a checker or a Spark
worker killed outright (SIGKILL) must not leave histingest or histcheck reading on. Each is
started by a Python parent on a FIFO that nobody writes, so it blocks in open() for ever;
the parent is SIGKILLed and the program must be gone soon after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkers import native_ingest


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.mark.parametrize("program", ["histingest", "histcheck"])
def test_the_native_programs_die_with_their_parent(tmp_path, program):
    binary = native_ingest.binary(program)
    if binary is None:
        pytest.skip(f"{program} is not built: make bootstrap builds it")
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)
    if program == "histingest":
        argv = [binary, str(fifo), str(tmp_path / "ops.parquet"), str(tmp_path / "reads.parquet")]
    else:
        argv = [binary, str(fifo), str(fifo), "--acks", "all", "--examples", "1"]
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys; subprocess.run(sys.argv[1:])", *argv])
    try:
        assert _wait_for(lambda: _children(parent.pid), 10), f"{program} did not start"
        (child,) = _children(parent.pid)
        time.sleep(0.2)  # past its first instructions: it waits in open() on the FIFO
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _wait_for(lambda: not _alive(child), 5), f"{program} outlived its parent"
    finally:
        parent.kill()
        for pid in _children(1):  # an orphan left behind by a failure above
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(binary.encode()):
                os.kill(pid, signal.SIGKILL)

