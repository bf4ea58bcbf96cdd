"""The checker on a real standalone Spark cluster (master + worker on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest
from test_checker_anomalies import loss

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",  # every Spark server (RPC and web UI) binds to loopback
        SPARK_LOG_DIR=str(tmp_path / "logs"),
        SPARK_WORKER_DIR=str(tmp_path / "work"),
        PYSPARK_PYTHON=sys.executable,
    )
    env.pop("HARNESS_SPARK_MASTER", None)
    return env


def start(cls: str, args: list[str], env: dict, log: Path) -> subprocess.Popen:
    cmd = [str(SPARK_HOME / "bin" / "spark-class"), cls, *args]
    return subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def wait_for(log: Path, text: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            pytest.fail(f"{proc.args[1]} exited {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.5)
    pytest.fail(f"no {text!r} in {log} after {START_TIMEOUT} s:\n{log.read_text()}")


@pytest.fixture
def standalone(tmp_path):
    env = spark_env(tmp_path)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    master_args = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())]
    procs = [start("org.apache.spark.deploy.master.Master", master_args, env, master_log)]
    try:
        wait_for(master_log, "I have been elected leader", procs[0])
        worker_args = ["--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
                       "--webui-port", str(free_port()), url]  # fmt: skip
        procs.append(start("org.apache.spark.deploy.worker.Worker", worker_args, env, worker_log))
        wait_for(worker_log, "Successfully registered with master", procs[1])
        yield url, env
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def run_cli(path: Path, url: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "checkers", str(path), "--spark-master", url],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.mark.spark
@pytest.mark.slow
def test_checker_runs_on_a_standalone_cluster(standalone, tmp_path):
    url, env = standalone
    run = loss().write(tmp_path / "run")
    cli = run_cli(run / "history.jsonl", url, env)
    assert cli.returncode == 1, cli.stderr
    assert json.loads(cli.stdout.splitlines()[0])["anomalies"]["lost-write"] == 1
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] is False
    assert [e["value"] for e in results["anomalies"]["unseen"]["examples"]] == [14]
    # the work really ran on the cluster: the worker launched an executor for the check
    assert len(list((tmp_path / "work").glob("app-*/*/stderr"))) >= 1
