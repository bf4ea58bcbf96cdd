"""A standalone Spark cluster started from the installed pyspark, every server on 127.0.0.1.

Loopback is still open to every local user, so the cluster authenticates (spark.authenticate):
its master, workers and the drivers started with its `env` share a random secret, which lives
only in `<work>/conf/spark-defaults.conf` (0600, in a 0700 folder; SPARK_CONF_DIR points every
Spark program there), never on a command line, where /proc would show it to everyone. The
workers hand it to their executors in their environment. Killing applications from the web
UIs is off.

For measuring and testing the checker on a real cluster on one machine (the checker benchmark's
`--standalone`, tests/checkers/test_checker_cluster.py); a user's own cluster is any master URL
(`--spark-master`)."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark

from checkers.spark import MASTER_ENV
from control.files import private_dir, write_text_atomic

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Standalone:
    url: str  # spark://127.0.0.1:PORT
    env: dict[str, str]  # what a driver process pointed at it needs (SPARK_HOME, loopback)
    worker_pids: list[int]


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def conf_dir(work: Path) -> Path:
    return work / "conf"


def write_defaults(work: Path) -> Path:
    """The cluster's spark-defaults.conf, with a new secret; its path."""
    path = private_dir(conf_dir(work)) / "spark-defaults.conf"
    write_text_atomic(path, "spark.authenticate true\n"
                            f"spark.authenticate.secret {secrets.token_hex(32)}\n"
                            "spark.ui.killEnabled false\n", mode=0o600)
    return path


def cluster_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_CONF_DIR=str(conf_dir(work)),  # the secret (write_defaults), for every program
        SPARK_LOCAL_IP="127.0.0.1",  # every Spark server (RPC and web UI) binds to loopback
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_WORKER_DIR=str(work / "work"),  # each app's executor logs
        PYSPARK_PYTHON=sys.executable,
    )
    env.pop(MASTER_ENV, None)  # the cluster's own URL, not one from the caller's environment
    return env


@contextlib.contextmanager
def standalone(work: Path, *, workers: int = 1, cores: int = 1, memory: str = "2g"
               ) -> Iterator[Standalone]:
    """A master and `workers` workers of `cores` cores and `memory` each, logs under `work`;
    stopped (terminated, killed after 30 s) on the way out. A server that exits or is not
    ready within START_TIMEOUT_S raises RuntimeError with the end of its log."""
    write_defaults(work)
    env = cluster_env(work)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def start(cls: str, args: list[str], log: Path, ready: str) -> None:
        out = open(log, "w")  # noqa: SIM115 - the server writes to it until stopped
        procs.append(subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
                                      env=env, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + START_TIMEOUT_S
        while ready not in log.read_text(errors="replace"):
            if procs[-1].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{cls} did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)

    try:
        start("org.apache.spark.deploy.master.Master",
              ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
              work / "master.log", "I have been elected leader")
        for i in range(workers):
            start("org.apache.spark.deploy.worker.Worker",
                  ["--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                   "--webui-port", str(free_port()), url],
                  work / f"worker-{i}.log", "Successfully registered with master")
        yield Standalone(url, env, [p.pid for p in procs[1:]])
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
