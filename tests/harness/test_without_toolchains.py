"""A machine without Go or Rust (`make bootstrap` skips Toxiproxy and the native programs):
the checkers take their Python and Spark paths and say so, and a run that needs Toxiproxy is
refused before anything starts, in one line that says how to install it. Each case runs the
real `harness` in an environment where histingest, histcheck and toxiproxy-server cannot be
found: $HARNESS_TOOLS (control/tools.py) names an empty folder instead of .venv/bin, and the
PATH keeps only folders without them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import tools
from test_hardening_exits import SMALL_HISTORY

from control.tools import TOOLS_ENV

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("histingest", "histcheck", "toxiproxy-server")



def bare_env(tmp_path: Path) -> dict[str, str]:
    """This environment, as a machine without the built programs would have it."""
    empty = tmp_path / "no-tools"
    empty.mkdir(exist_ok=True)
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any((Path(d) / tool).exists() for tool in TOOLS)]
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_SPARK_MASTER"}
    env.update({TOOLS_ENV: str(empty), "PATH": os.pathsep.join(path), "PYTHONPATH": str(ROOT),
                "HARNESS_RESULTS": str(tmp_path / "results")})
    assert not any(shutil.which(tool, path=env["PATH"]) for tool in TOOLS)
    return env


def harness(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=tmp_path,
                          env=bare_env(tmp_path), capture_output=True, text=True, timeout=600,
                          check=False)


def run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.jsonl").write_text("".join(json.dumps(op) + "\n" for op in SMALL_HISTORY))
    return run


def test_check_in_process_reads_the_history_in_python_and_says_so_once(tmp_path):
    done = harness(tmp_path, "check", str(run_folder(tmp_path)), "--in-process")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["valid"] is True
    assert done.stderr.count("histingest is not built") == 1, done.stderr


@pytest.mark.spark
def test_check_on_spark_takes_the_sql_plans_and_says_so_once(tmp_path):
    done = harness(tmp_path, "check", str(run_folder(tmp_path)), "--spark-master", "local[1]")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["valid"] is True
    assert done.stderr.count("histingest is not built") == 1, done.stderr
    assert done.stderr.count("histcheck is not built: the SQL plans check") == 1, done.stderr


def test_a_run_with_a_toxic_fault_is_refused_before_it_starts(tmp_path):
    done = harness(tmp_path, "run", "--nemesis", "bandwidth", "--time-limit", "5", "--seed", "1")
    assert done.returncode == 3, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines[0].startswith("harness: error: Toxiproxy is not installed"), lines
    assert "make bootstrap" in lines[0] and "Go >= 1.21" in lines[0]
    assert not (tmp_path / "results").exists()  # refused before a run folder or a host


def test_a_campaign_with_a_toxic_cell_is_refused_before_its_folder(tmp_path):
    (tmp_path / "toxic.toml").write_text(
        'name = "toxic"\nbase = "fast"\nseeds = [1]\ntime_limit = 5\n'
        '[[config]]\nname = "safe"\nexpect = "no-loss"\n[[nemesis]]\nname = "slow"\nfaults = ["kill", "latency"]\n')
    done = harness(tmp_path, "campaign", "toxic.toml")
    assert done.returncode == 3, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: Toxiproxy is not installed")
    assert not (tmp_path / "results").exists()  # no campaign folder, no run folder


def test_only_a_run_that_needs_toxiproxy_is_refused(tmp_path, monkeypatch):
    """The same check in process, on validated configs: without toxics (or on an inventory's
    hosts, which name their own server) nothing is asked of this machine."""
    from control.toxiproxy import ToxiproxyError
    from harness.config import load_config, require_toxiproxy, typed

    monkeypatch.setenv(TOOLS_ENV, str(tmp_path))
    monkeypatch.setenv("PATH", bare_env(tmp_path)["PATH"])
    require_toxiproxy(typed(load_config(overrides={"nemesis.faults": ["kill", "partition"]})).hosts)
    with pytest.raises(ToxiproxyError, match="Toxiproxy is not installed"):
        require_toxiproxy(typed(load_config(overrides={"nemesis.faults": ["kill", "latency"]})).hosts)


def test_a_part_is_skipped_in_bootstraps_words_only_when_bootstrap_skipped_it(monkeypatch, tmp_path):
    """tests/support/tools.py: the `native` and `toxiproxy` markers skip a test only where the
    program is missing AND make bootstrap left its note; a broken build still fails."""
    monkeypatch.setattr(sys, "prefix", str(tmp_path))  # where bootstrap writes its notes
    monkeypatch.setitem(tools.PARTS, "native", (lambda: None, "skipped-native"))
    assert tools.skip_reason("native") is None  # missing, no note: the test runs, and fails
    (tmp_path / ".skipped-native").write_text("make bootstrap: no Rust cargo\n")
    assert tools.skip_reason("native") == "make bootstrap: no Rust cargo"
    monkeypatch.setitem(tools.PARTS, "native", (lambda: "/usr/bin/histcheck", "skipped-native"))
    assert tools.skip_reason("native") is None  # built: never skipped, note or not
