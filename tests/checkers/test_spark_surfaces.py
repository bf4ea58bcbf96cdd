"""What the checker's Spark listens on while it checks: a local master's driver (its RPC server
and block manager) only on loopback, with authentication on, so no other user of the machine
reaches it from outside loopback; and the standalone cluster the harness starts authenticates
with a secret no command line shows. Run as root, with the unprivileged user of
tests/support/users.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import spark_cluster
from support.users import reaches

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (useradd, runuser)"),
]

# A check's Spark, alive: its session made as the checker makes it, a job that starts Python
# workers and a shuffle run, then every listening socket of the driver's processes, printed.
CHECKING = """
import json, os, subprocess, sys
from checkers.spark import get_session
s = get_session(sys.argv[1])
s.sparkContext.parallelize(range(100), 2).map(lambda x: x * 2).count()
s.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()

def tree(pid):
    ps = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                        text=True).stdout.split()
    return {pid}.union(*(tree(int(c)) for c in ps))

pids = tree(s.sparkContext._gateway.proc.pid) | {os.getpid()}
sockets = []
for line in subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout.splitlines():
    f = line.split()
    if len(f) > 5 and any(f"pid={p}," in f[5] for p in pids):
        address, _, port = f[3].rpartition(":")
        sockets.append([address.strip("[]").removeprefix("::ffff:"), int(port),
                        f[5].split('"')[1]])
conf = dict(s.sparkContext.getConf().getAll())
print(json.dumps({"sockets": sorted(sockets), "authenticate": conf.get("spark.authenticate")}),
      flush=True)
sys.stdin.readline()  # alive until the test has tried every socket
"""


def machine_addresses() -> list[str]:
    return subprocess.run(["hostname", "-I"], capture_output=True, text=True,
                          check=True).stdout.split()


@pytest.mark.usefixtures("attacker")
def test_a_local_checks_spark_listens_on_loopback_only():
    checking = subprocess.Popen([sys.executable, "-c", CHECKING, "local[2]"], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        seen = json.loads(checking.stdout.readline())
        print(seen["sockets"])  # the record of what listens: `pytest -s` shows it
        assert seen["sockets"], "found no socket of the check's Spark"
        ports = {port for _, port, _ in seen["sockets"]}
        reached = {(a, p) for a in machine_addresses() if ":" not in a for p in ports
                   if reaches(a, p)}
        assert reached == set(), seen["sockets"]
        assert {a for a, _, _ in seen["sockets"]} <= {"127.0.0.1", "::1"}, seen["sockets"]
        assert seen["authenticate"] == "true"
    finally:
        checking.communicate("\n", timeout=120)


@pytest.mark.slow
def test_the_standalone_cluster_authenticates_with_a_secret_no_command_line_shows(tmp_path):
    with spark_cluster.standalone(tmp_path, workers=1, cores=1, memory="1g") as cluster:
        conf = spark_cluster.conf_dir(tmp_path) / "spark-defaults.conf"
        secret = conf.read_text().split("spark.authenticate.secret ")[1].split()[0]
        assert len(secret) == 64
        assert oct(conf.stat().st_mode & 0o777) == "0o600"
        assert oct(conf.parent.stat().st_mode & 0o777) == "0o700"
        driver = subprocess.Popen([sys.executable, "-c", CHECKING, cluster.url], cwd=ROOT,
                                  env={**cluster.env, "PYTHONPATH": str(ROOT)}, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            seen = json.loads(driver.stdout.readline())  # its job ran: it was let in
            assert seen["authenticate"] == "true"
            shown = [p for p in Path("/proc").glob("[0-9]*/cmdline")
                     if secret.encode() in _read(p)]
            assert shown == []
        finally:
            driver.communicate("\n", timeout=120)
        logs = (tmp_path / "master.log").read_text() + (tmp_path / "worker-0.log").read_text()
        assert "authentication enabled" in logs


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # exited meanwhile
        return b""
