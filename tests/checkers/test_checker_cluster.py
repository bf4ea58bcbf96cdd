"""The checker on a real standalone Spark cluster (master + worker on 127.0.0.1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import spark_cluster
from test_checker_anomalies import loss


@pytest.fixture
def standalone(tmp_path):
    with spark_cluster.standalone(tmp_path, workers=1, cores=2, memory="2g") as cluster:
        yield cluster.url, cluster.env


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


_EXECUTOR_PATH = """
import os, sys
from checkers.spark import get_session
sc = get_session(sys.argv[1]).sparkContext
print(sc.parallelize([0], 1).map(lambda _: os.environ.get("PYTHONPATH", "")).collect()[0])
"""


@pytest.mark.spark
@pytest.mark.slow
def test_a_clusters_python_workers_get_the_drivers_pythonpath(standalone, tmp_path):
    """`harness mutate` puts its checkout first on the driver's PYTHONPATH; a standalone
    cluster's workers start their Python from their own environment, so without
    spark.executorEnv.PYTHONPATH they imported the installed code instead."""
    url, env = standalone
    marker = str(tmp_path / "checkout")
    done = subprocess.run([sys.executable, "-c", _EXECUTOR_PATH, url], capture_output=True,
                          text=True, timeout=600, env={**env, "PYTHONPATH": marker})
    assert done.returncode == 0, done.stderr[-2000:]
    assert marker in done.stdout.splitlines()[-1].split(":")
