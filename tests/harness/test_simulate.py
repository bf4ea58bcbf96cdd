"""`harness simulate`: simulated run folders that check, report and campaigns read unchanged,
byte-for-byte determinism, seed searches, campaigns that mix simulated and real cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli
from harness.campaign import run_campaign
from harness.campaign_spec import load_spec
from harness.config import load_config, typed
from harness.sim_run import as_simulated, simulate_into
from harness.simulate import (
    broken_before_loss,
    check_determinism,
    first_divergence,
    search,
    simulate_test,
)
from harness.test import Test

ROOT = Path(__file__).resolve().parents[2]
VALIDATION = ROOT / "campaigns" / "validation.toml"


def small(*sets: str, faults: str = "['kill','partition','power-loss']", limit: int = 8) -> dict:
    return load_config("fast", ["nodes=4", "topic.partitions=1", f"time_limit={limit}",
                                f"nemesis.faults={faults}", "workload.final_read_timeout=20",
                                *sets])


def cell(name: str) -> dict:
    _, cells = load_spec(VALIDATION)
    return next(c.resolved for c in cells if c.config == name)


def test_a_simulated_run_folder_is_a_run_folder(tmp_path):
    run_dir = simulate_test(Test.of(small("seed=2"), tmp_path), backend="reference")
    test = json.loads((run_dir / "test.json").read_text())
    assert test["hosts"] == "sim" and test["config"]["hosts"]["provider"] == "sim"
    for name in ("history.jsonl", "events.jsonl", "schedule.json", "results.json", "report.html"):
        assert (run_dir / name).stat().st_size > 0, name
    schedule = json.loads((run_dir / "schedule.json").read_text())
    assert schedule["faults"] and all(f["outcome"] in ("ok", "skipped") for f in schedule["faults"])
    assert any(f["outcome"] == "ok" for f in schedule["faults"])
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True, results["anomalies"]
    # the history's nemesis ops are on the same clock as the client ops
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    starts = [o["time"] for o in ops if o["process"] == "nemesis" and o["f"].startswith("start-")]
    assert starts and 0 < min(starts) < max(o["time"] for o in ops)


@pytest.mark.spark
def test_harness_check_and_report_read_a_simulated_folder(tmp_path, capsys):
    run_dir = simulate_test(Test.of(small("seed=3"), tmp_path, check=False))
    assert cli.main(["check", str(run_dir), "--spark-master", "local[1]"]) == 0
    assert cli.main(["report", str(run_dir)]) == 0
    assert "report.html" in capsys.readouterr().out


def test_the_same_seed_gives_the_same_bytes_even_with_another_hash_seed():
    config = small("seed=5", faults="['kill','partition','power-loss','slow-link']")
    assert check_determinism(typed(config), 5) is None


def test_different_seeds_differ_and_divergence_is_located(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, seed in ((a, 1), (b, 2)):
        folder.mkdir()
        config = as_simulated(small(f"seed={seed}"))
        simulate_into(Test.of(config, folder, check=False), folder)
    where = first_divergence(a, b)
    assert where is not None and where.startswith("history.jsonl line ")


def test_a_search_finds_the_last_replica_standing_loss_without_elr():
    summary = search(typed(cell("no-elr")), range(1, 9), jobs=1, stop_after=1)
    assert summary.failing, summary.rows
    row = next(r for r in summary.rows if r["seed"] == summary.failing[0])
    assert row["anomalies"].get("lost-write", 0) > 0 and row["lost"] > 0


def test_a_search_of_the_safe_configuration_finds_nothing():
    summary = search(typed(cell("safe")), range(1, 4), jobs=2)
    assert summary.runs == 3 and not summary.failing and not summary.errors, summary.rows


def test_real_host_only_faults_are_refused(capsys):
    code = cli.main(["simulate", "--config", "fast", "--nemesis", "bandwidth"])
    assert code == 3
    assert "real hosts only" in capsys.readouterr().err


def test_simulate_takes_a_campaign_cell_and_a_seed_range(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path))
    code = cli.main(["simulate", "--campaign", str(VALIDATION), "--cell", "safe",
                     "--seeds", "1-2", "--jobs", "1", "--time-limit", "8"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "runs 2 in" in out and "failing 0" in out
    search_file = next((tmp_path / "validation-safe-safe-mix").glob("search-*.json"))
    assert [r["seed"] for r in json.loads(search_file.read_text())["rows"]] == [1, 2]


def test_a_campaign_mixes_simulated_and_real_cells(tmp_path):
    spec = tmp_path / "mixed.toml"
    spec.write_text("""
name = "mixed"
base = "fast"
seeds = [1]
time_limit = 6
[set]
nodes = 4
"topic.partitions" = 1
[[config]]
name = "sim-many"
expect = "no-loss"
hosts = "sim"
seeds = "1-40"
[[config]]
name = "real-few"
expect = "no-loss"
[[nemesis]]
name = "kills"
faults = ["kill"]
""")
    _, cells = load_spec(spec)
    sim = [c for c in cells if c.config == "sim-many"]
    real = [c for c in cells if c.config == "real-few"]
    assert len(sim) == 40 and all(c.resolved["hosts"]["provider"] == "sim" for c in sim)
    assert len(real) == 1 and real[0].resolved["hosts"]["provider"] == "netns"


@pytest.mark.spark
def test_a_simulated_campaign_runs_end_to_end(tmp_path):
    spec = tmp_path / "simulated.toml"
    spec.write_text("""
name = "simulated"
base = "fast"
hosts = "sim"
seeds = "1-2"
time_limit = 6
[set]
nodes = 4
"topic.partitions" = 1
"checker.spark_master" = "local[1]"
[[config]]
name = "safe"
expect = "no-loss"
[[nemesis]]
name = "kills"
faults = ["kill"]
""")
    folder = run_campaign(spec, results_root=tmp_path / "results")
    state = json.loads((folder / "campaign.json").read_text())
    assert [c["status"] for c in state["cells"]] == ["done", "done"], state["cells"]
    assert state["verdict"] == "pass" and (folder / "index.html").exists()


@pytest.mark.spark
def test_a_search_runs_on_spark_with_the_same_rows_as_locally():
    config = typed(small(limit=6))
    local = search(config, range(1, 3), jobs=1)
    spark = search(config, range(1, 3), spark_master="local[1]")
    assert spark.runs == local.runs == 2
    key = ("seed", "valid", "anomalies", "lost", "acked")
    assert [{k: r[k] for k in key} for r in spark.rows] == \
        [{k: r[k] for k in key} for r in local.rows]


def test_a_campaign_cell_takes_set_items_and_refuses_another_config():
    """--set was dropped with --campaign: the last-leader searches of docs/differential.md
    (finding 5) ran the safe cell's own balanced strategy."""
    from argparse import Namespace

    from checkers.exitcodes import UserError
    from harness.commands.simulate import campaign_config

    args = Namespace(campaign=VALIDATION, cell="safe", seed=4, time_limit=None, nodes=None,
                     nemesis="kill", config=None,
                     set=["system.unclean.recovery.strategy=last-leader", "hosts.startup_s=[2,10]"])
    config = campaign_config(args)
    assert config["system"]["unclean.recovery.strategy"] == "last-leader"
    assert config["hosts"]["startup_s"] == [2.0, 10.0]
    assert config["seed"] == 4 and config["nemesis"]["faults"] == ["kill"]
    assert config["workload"]["rate"] == 300  # the cell's own settings stay
    with pytest.raises(UserError, match="--set"):
        campaign_config(Namespace(**{**vars(args), "config": "fast"}))


def test_the_start_up_delay_holds_each_broker_back_before_it_registers(tmp_path):
    registered = {}
    for startup in (None, "[3, 3.5]"):
        config = as_simulated(small("seed=2", *([f"hosts.startup_s={startup}"] if startup else []),
                                    faults="[]", limit=1))
        folder = tmp_path / str(startup)
        folder.mkdir()
        simulate_into(Test.of(config, folder, check=False), folder)
        events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
        registered[startup] = [e["time"] / 1e9 for e in events if e["kind"] == "broker-registered"]
    assert len(registered[None]) == len(registered["[3, 3.5]"]) == 3
    assert max(registered[None]) < 0.6
    assert all(3.0 <= t < 3.6 for t in registered["[3, 3.5]"])


def test_a_second_run_that_fails_in_the_worker_is_said_with_the_jobs_error(tmp_path):
    import subprocess
    import sys

    from harness.simulate import _worker_error
    job = json.dumps({"config": {"name": "broken"}, "folder": str(tmp_path)}) + "\n"
    done = subprocess.run([sys.executable, "-m", "harness.sim_worker"], input=job, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0  # the worker lives on: the job's error is its answer
    # the worker loads the job's config record as a config file is read: refused by name
    assert _worker_error(done).startswith("ConfigError: config: nodes: missing")
    crashed = subprocess.CompletedProcess([], 1, "", "Traceback ...\nSystemExit: boom\n")
    assert _worker_error(crashed) == "Traceback ...\nSystemExit: boom"


def _write_lines(path, objects) -> None:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))


def test_a_seeds_row_names_the_invariants_broken_before_its_first_fault_that_loses_data(tmp_path):
    """The mutation oracle's evidence in a lossy cell (harness/mutate/oracle.py): what broke
    while no fault had yet lost unsynced writes or damaged a disk. A kill or a partition
    before it loses nothing; an invariant at or after it does not count."""
    _write_lines(tmp_path / "history.jsonl", [
        {"index": 0, "time": 100, "process": 0, "type": "invoke", "f": "send", "value": 1},
        {"index": 1, "time": 200, "process": "nemesis", "type": "info", "f": "start-kill",
         "value": {"nodes": ["n2"], "effects": ["kills-process"]}},
        {"index": 2, "time": 500, "process": "nemesis", "type": "info", "f": "start-outage",
         "value": {"nodes": ["n2", "n3"], "effects": ["kills-process", "loses-unsynced"]}}])
    _write_lines(tmp_path / "invariants.jsonl", [
        {"time": 300, "name": "invariant:LeaderCompleteness"},
        {"time": 500, "name": "invariant:NoCommittedRecordLostGlobally"},
        {"time": 900, "name": "invariant:ConsistentRead"}])
    assert broken_before_loss(tmp_path) == ["invariant:LeaderCompleteness"]
    _write_lines(tmp_path / "history.jsonl", [  # no fault that loses data: everything counts
        {"index": 0, "time": 200, "process": "nemesis", "type": "info", "f": "start-kill",
         "value": {"nodes": ["n2"], "effects": ["kills-process"]}}])
    assert broken_before_loss(tmp_path) == ["invariant:ConsistentRead",
                                            "invariant:LeaderCompleteness",
                                            "invariant:NoCommittedRecordLostGlobally"]
    (tmp_path / "invariants.jsonl").unlink()  # a run without the simulator's invariants
    assert broken_before_loss(tmp_path) == []
