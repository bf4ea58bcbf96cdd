"""`harness run` end to end on real netns hosts: the run folder, the history contract, the
realised schedule, cleanup after a normal and after a SIGKILLed run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from support.history import read_history

from harness.config import load_config, typed
from harness.runner import run_test
from harness.test import Test
from nemesis.schedule import plan

pytestmark = [pytest.mark.netns, pytest.mark.fuse]

FAST = ["nodes=4", "time_limit=15", "nemesis.interval=3", "nemesis.duration=2",
        "workload.final_read_timeout=40"]


def _leftovers(marker: str) -> list[str]:
    """Processes and mounts that still mention this run's cluster directory."""
    found = [line for line in Path("/proc/mounts").read_text().splitlines() if marker in line]
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd and "pytest" not in cmd:
            found.append(f"{pid}: {cmd[:120]}")
    return found


def _check_pairs(ops: list[dict]) -> None:
    invokes, completions = Counter(), Counter()
    for op in ops:
        if op["process"] == "nemesis":
            assert op["type"] == "info"
            continue
        (invokes if op["type"] == "invoke" else completions)[op["process"]] += 1
    assert invokes == completions, "every invoke needs exactly one completion"
    assert [op["index"] for op in ops] == list(range(len(ops)))


def test_run_with_kills_and_partitions(tmp_path):
    config = load_config("fast", [*FAST, "nemesis.faults=['kill', 'partition', 'power-loss']", "seed=7"])
    run_dir = run_test(Test.of(config, tmp_path))
    ops = read_history(run_dir / "history.jsonl")
    _check_pairs(ops)
    sends = [op for op in ops if op["f"] == "send" and op["type"] == "ok"]
    assert len(sends) > 500, "the workload should have made progress"
    assert any(op["f"] == "final-poll" and op["type"] == "ok" for op in ops)

    schedule = json.loads((run_dir / "schedule.json").read_text())
    planned = plan(typed(config).schedule_params)
    strip = [{k: f[k] for k in ("id", "kind", "start_s", "duration_s", "target")} for f in schedule["faults"]]
    assert strip == [{k: f[k] for k in ("id", "kind", "start_s", "duration_s", "target")} for f in planned], \
        "the realised schedule is the seed's plan"
    started = [f for f in schedule["faults"] if f["started_s"] is not None]
    assert started, "some fault should have started in 15 s"
    nemesis_fs = Counter(op["f"] for op in ops if op["process"] == "nemesis")
    for f in started:
        assert nemesis_fs[f"start-{f['kind']}"] >= 1

    for host in ("n1", "n2", "n3", "n4"):
        assert (run_dir / "nodes" / host / "node.log").exists()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert {"broker-registered", "partition-change"} <= {e["kind"] for e in events}
    assert all("time" in e and "host" in e for e in events)

    results = json.loads((run_dir / "results.json").read_text())
    lost = {k: v["count"] for k, v in results["anomalies"].items() if k in ("lost-write", "unseen")}
    assert not lost, f"the safe config lost acknowledged records: {lost}"
    assert (run_dir / "report.html").exists()
    assert not _leftovers(run_dir.name)


def test_sigkilled_run_leaves_a_checkable_history_and_is_cleaned_up(tmp_path):
    env = {**os.environ, "HARNESS_RESULTS": str(tmp_path)}
    cmd = [sys.executable, "-m", "harness.cli", "run", "--config", "fast", "--time-limit", "40",
           "--nemesis", "kill", "--nodes", "4", "--seed", "3"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    history = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = list(tmp_path.glob("default/*/history.jsonl")) + list(tmp_path.glob("fast/*/history.jsonl"))
        if found and found[0].stat().st_size > 50_000:
            history = found[0]
            break
        time.sleep(0.5)
    assert history is not None, "the run never got going"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ops = read_history(history)  # every line parses (a torn last line is tolerated)
    assert [op["index"] for op in ops] == list(range(len(ops)))
    run_dir = history.parent
    assert _leftovers(run_dir.name), "a SIGKILLed run leaves its nodes behind for the next run to clean"

    clean = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--cleanup-only"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stderr
    assert not _leftovers(run_dir.name)

    check = subprocess.run([sys.executable, "-m", "harness.cli", "check", str(run_dir)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert check.returncode in (0, 1, 2), check.stderr
    assert (run_dir / "results.json").exists(), check.stdout[-2000:] + check.stderr[-2000:]


def test_cleanup_only_prunes_the_lazyfs_registry_entries_of_daemons_that_are_gone(tmp_path):
    """A SIGKILLed lossy-filesystem daemon never removes its registry entry; `--cleanup-only`
    (like the start of every run) removes it, and keeps a live daemon's."""
    registry = tmp_path / "lazyfs-mounts"
    registry.mkdir(mode=0o700)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (registry / "dead.json").write_text(json.dumps({"pid": gone.pid, "mountpoint": "/x"}))
    (registry / "garbage.json").write_text("{not json")
    env = {**os.environ, "LAZYFS_RUN_DIR": str(registry), "HARNESS_RESULTS": str(tmp_path)}
    clean = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--cleanup-only"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stderr
    assert "2 stale lazyfs registry entries" in clean.stderr
    assert list(registry.iterdir()) == []
