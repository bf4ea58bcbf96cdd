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
