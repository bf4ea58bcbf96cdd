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
from support.procs import alive, children, wait_for

from checkers import native_ingest


@pytest.mark.native
@pytest.mark.parametrize("program", ["histingest", "histcheck"])
def test_the_native_programs_die_with_their_parent(tmp_path, program):
    binary = native_ingest.binary(program)
    assert binary is not None, f"{program} is not built: make bootstrap builds it"
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)
    if program == "histingest":
        argv = [binary, str(fifo), str(tmp_path / "ops.parquet"), str(tmp_path / "reads.parquet")]
    else:
        argv = [binary, str(fifo), str(fifo), "--acks", "all", "--examples", "1"]
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys; subprocess.run(sys.argv[1:])", *argv])
    try:
        assert wait_for(lambda: children(parent.pid), 10), f"{program} did not start"
        (child,) = children(parent.pid)
        time.sleep(0.2)  # past its first instructions: it waits in open() on the FIFO
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert wait_for(lambda: not alive(child), 5), f"{program} outlived its parent"
    finally:
        parent.kill()
        for pid in children(1):  # an orphan left behind by a failure above
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(binary.encode()):
                os.kill(pid, signal.SIGKILL)

