"""Children forked from a warm process: `harness mutate`'s children without their imports.

A child (child.py) spent most of its start importing the libraries the checks and reports
use (pandas, numpy, pyarrow, matplotlib, pyspark: 1.4 s of the 1.8 s of CPU `import
harness.simulate` takes, and 8-13 s of wall time on the loaded machine), before its first
seed. The zygote, `python -m harness.mutate.zygote FD`, imports them once, then forks a child
per request on the Unix socket FD: the request carries the child's stdin, stdout and stderr
(SCM_RIGHTS), the answer is the child's pid. The child leads a process group of its own (it
is killed whole, as a started child's is), dies with the zygote (`PR_SET_PDEATHSIG`), which
ends when the campaign's end of the socket closes, and runs child.main as `python -m
harness.mutate.child` would.

No protocol module is imported in the zygote (it exits with an error if one is): the mutant's
import hook must still come before the protocol's first import, in the child."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from harness.mutate import child

# What `import harness.simulate` spends its time on outside the project (python -X importtime).
# Not matplotlib: it is imported when a report draws (harness/report/plots.py), which no child does.
PRELOAD = ("numpy", "pandas", "pyarrow", "pyarrow.parquet", "pyspark.sql", "msgspec", "tqdm")
PROTOCOL = "replication"


def protocol_loaded() -> list[str]:
    return sorted(m for m in sys.modules if m == PROTOCOL or m.startswith(PROTOCOL + "."))


def _forked(fds: list[int], listener: socket.socket) -> None:
    """In the new child: its pipes as 0, 1, 2, a process group of its own, then child.main."""
    listener.close()
    os.setpgid(0, 0)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ[child.PARENT] = str(os.getppid())  # die with the zygote (child.die_with_parent)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # its own subprocesses are waited for
    code = 1
    try:
        child.main()
        code = 0
    finally:
        sys.stdout.flush()
        sys.__stdout__.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(listener: socket.socket) -> None:
    """Fork a child per request until the campaign's end of the socket closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children are reaped by the kernel
    while True:
        msg, fds, _, _ = socket.recv_fds(listener, 16, 3)
        if not msg:
            return
        pid = os.fork()
        if pid == 0:
            _forked(fds, listener)
        try:  # here too, so that the group exists before anyone is told the pid to kill it by
            os.setpgid(pid, pid)
        except OSError:  # it set it itself already, or died
            pass
        for fd in fds:
            os.close(fd)
        listener.sendall(f"{pid}\n".encode())


def main() -> None:
    # Not child.die_with_parent here: PR_SET_PDEATHSIG follows the thread that started the
    # zygote (a lane's, which ends with its race), not the campaign's process. The socket is
    # enough: however the campaign ends, its end closes and the zygote's next receive is empty.
    for name in PRELOAD:
        __import__(name)
    if protocol_loaded():
        sys.exit(f"the zygote imported the protocol ({', '.join(protocol_loaded())}): "
                 "a mutant could not replace it")
    serve(socket.socket(fileno=int(sys.argv[1])))


class Forked:
    """A child forked by the zygote, used as run_child uses a subprocess.Popen: its pid (the
    leader of its own process group) and communicate(). Its exit status is the zygote's to
    reap, so `returncode` stays None: a child that died says so by giving no answer."""

    returncode = None

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int) -> None:
        self.pid, self._stdin, self._out = pid, stdin, {stdout: [], stderr: []}
        self._stdout, self._stderr = stdout, stderr
        self._closed = False

    def communicate(self, text: str | None = None,
                    timeout: float | None = None) -> tuple[str, str]:
        """Write the job, read stdout and stderr to their ends; TimeoutExpired after `timeout`.
        Once it has timed out (or ended), nothing more: ("", "")."""
        if self._closed:
            return "", ""
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        try:
            with os.fdopen(self._stdin, "w") as job:
                job.write(text or "")
        except BrokenPipeError:  # it died before reading: it gives no answer, which says so
            pass
        with selectors.DefaultSelector() as sel:
            for fd in self._out:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    self.close()
                    raise subprocess.TimeoutExpired("harness.mutate.child", timeout)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        self._out[key.fd].append(data)
                    else:
                        sel.unregister(key.fd)
        self.close()
        return (b"".join(self._out[self._stdout]).decode(errors="replace"),
                b"".join(self._out[self._stderr]).decode(errors="replace"))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for fd in self._out:
                os.close(fd)


class Zygote:
    """The campaign's end: the zygote process and the socket it forks children on."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._sock, theirs = socket.socketpair()
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.mutate.zygote", str(theirs.fileno())], cwd=child.ROOT,
            env={**env, "OPENBLAS_NUM_THREADS": "1"}, pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL)
        theirs.close()
        self._replies = self._sock.makefile("rb")

    def fork(self) -> Forked:
        """A new child with fresh pipes; OSError if the zygote is gone."""
        pipes = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        try:
            with self._lock:
                socket.send_fds(self._sock, [b"f"], theirs)
                reply = self._replies.readline()
        finally:
            for fd in theirs:
                os.close(fd)
        if not reply:
            for fd in (pipes[0][1], pipes[1][0], pipes[2][0]):
                os.close(fd)
            raise OSError(f"the zygote exited ({self.proc.poll()})")
        return Forked(int(reply), pipes[0][1], pipes[1][0], pipes[2][0])

    def close(self) -> None:
        """Close our end (the zygote sees it and exits) and wait for it."""
        self._replies.close()
        self._sock.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    main()
