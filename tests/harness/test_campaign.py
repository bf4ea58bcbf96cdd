"""Campaigns: matrix, verdicts, time budget, and resume after SIGKILL.

The real runner (harness.runner.run_test) brings up hosts and nodes; these tests inject
`simulated_run_test`, a small real function that writes a complete run folder in the real
formats (see tests/harness/test_report.py) into the results store, the way the runner does, and
records every call in a journal file so a test can tell which cells really ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_report import write_run_folder

from harness import cli
from harness.campaign import Campaign, CampaignBusy, classify, newest_unfinished, run_campaign
from harness.campaign_spec import CampaignError, load_spec
from harness.config import ConfigError, TestConfig
from harness.report import report_path
from harness.store import create_run_dir

TESTS = Path(__file__).resolve().parent
JOURNAL_ENV = "CAMPAIGN_TEST_JOURNAL"
SLEEP_ENV = "CAMPAIGN_TEST_SLEEP"

CAMPAIGN = """
name = "night"
seeds = [1]
time_limit = 10
[set]
nodes = 4
[[config]]
name = "safe"
expect = "no-loss"
[[config]]
name = "acks1"
expect = "loss-allowed"
set = { "workload.acks" = "1" }
[[config]]
name = "acks1-claimed-safe"
expect = "no-loss"
set = { "workload.acks" = "1" }
[[config]]
name = "safe-claimed-lossy"
expect = "loss-allowed"
[[nemesis]]
name = "kill"
faults = ["kill"]
interval = 3
"""


def simulated_run_test(config: TestConfig, results_root: Path) -> Path:
    """Write a run folder for `config`: acks=1 loses records (see write_run_folder)."""
    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    run_dir = create_run_dir(results_root, config.name, config.seed)
    write_run_folder(run_dir, seed=config.seed, sends=300, name=config.name,
                     lose=config.workload.acks == "1")
    report_path(run_dir)
    journal = os.environ.get(JOURNAL_ENV)
    if journal:
        with open(journal, "a") as fh:
            fh.write(json.dumps({"name": config.name, "seed": config.seed,
                                 "run_dir": str(run_dir)}) + "\n")
    return run_dir


def _journal(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def campaign_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(JOURNAL_ENV, str(tmp_path / "journal.jsonl"))
    path = tmp_path / "night.toml"
    path.write_text(CAMPAIGN)
    return path


def _state(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "campaign.json").read_text())


def test_campaign_runs_every_cell_and_judges_the_night(
        tmp_path: Path, campaign_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    folder = run_campaign(campaign_file, False, None, simulated_run_test, results)
    assert folder.parent == results / "campaigns" / "night"
    state = _state(folder)
    outcomes = {c["id"]: c["outcome"] for c in state["cells"]}
    assert outcomes == {
        "safe/kill/s1/t10": "ok", "acks1/kill/s1/t10": "expected-loss",
        "acks1-claimed-safe/kill/s1/t10": "regression",
        "safe-claimed-lossy/kill/s1/t10": "not-detected"}
    assert state["verdict"] == "regression" and state["status"] == "finished"
    assert len(_journal(tmp_path / "journal.jsonl")) == 4
    lost = next(c for c in state["cells"] if c["id"] == "acks1/kill/s1/t10")
    assert lost["lost"] > 0 and lost["anomalies"]["lost-write"] > 0
    assert (folder / lost["run_dir"] / "report.html").is_file()

    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == str(folder / "index.html")
    assert any("regression: acks1-claimed-safe/kill/s1/t10" in line for line in lines)
    index = (folder / "index.html").read_text()
    assert f'href="{lost["run_dir"]}/report.html"' in index
    assert "expected loss was not detected" in index
    top = (results / "index.html").read_text()
    assert 'href="campaigns/night/' in top and 'src="campaigns/night/trend-lost.png"' in top
    assert (results / "campaigns" / "night" / "trend-lost.png").is_file()


def test_report_of_a_campaign_folder_rewrites_its_pages(tmp_path: Path,
                                                       campaign_file: Path) -> None:
    results = tmp_path / "results"
    folder = run_campaign(campaign_file, False, None, simulated_run_test, results)
    run_dir = folder / _state(folder)["cells"][0]["run_dir"]
    for page in (run_dir / "report.html", folder / "index.html", results / "index.html"):
        page.unlink()
    assert report_path(folder) == folder / "index.html"
    for page in (run_dir / "report.html", folder / "index.html", results / "index.html"):
        assert page.is_file()


def test_time_budget_skips_then_resume_runs_the_rest(tmp_path: Path, campaign_file: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "results"
    # the budget is counted from the session's start, which saves the campaign's state first:
    # a budget far above that (2 s, on a machine at load average 30) and a first run that
    # outlasts it
    monkeypatch.setenv(SLEEP_ENV, "3")
    folder = run_campaign(campaign_file, False, 2, simulated_run_test, results)
    state = _state(folder)
    assert [c["status"] for c in state["cells"]] == ["done"] + ["skipped"] * 3
    assert state["status"] == "stopped"
    assert "time budget of 2 s used up" in state["cells"][1]["error"]
    monkeypatch.setenv(SLEEP_ENV, "0")
    assert run_campaign(campaign_file, True, None, simulated_run_test, results) == folder
    state = _state(folder)
    assert [c["status"] for c in state["cells"]] == ["done"] * 4
    assert state["status"] == "finished" and len(state["sessions"]) == 2
    assert len(_journal(tmp_path / "journal.jsonl")) == 4  # the first cell ran once


def test_resume_after_sigkill_skips_finished_cells(tmp_path: Path, campaign_file: Path) -> None:
    results = tmp_path / "results"
    journal = tmp_path / "journal.jsonl"
    script = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
              "from harness.campaign import run_campaign; "
              "from test_campaign import simulated_run_test; "
              "run_campaign(Path(sys.argv[2]), False, None, simulated_run_test, Path(sys.argv[3]))")
    env = {**os.environ, SLEEP_ENV: "0.5", JOURNAL_ENV: str(journal)}
    proc = subprocess.Popen([sys.executable, "-c", script, str(TESTS), str(campaign_file),
                             str(results)], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(_journal(journal)) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, "the campaign ended before it could be killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    folder = newest_unfinished(results, "night")
    assert folder is not None
    before = _state(folder)
    done = {c["id"]: c["run_dir"] for c in before["cells"] if c["status"] == "done"}
    assert 1 <= len(done) < 4
    ran_before = len(_journal(journal))

    assert run_campaign(campaign_file, True, None, simulated_run_test, results) == folder
    after = _state(folder)
    assert after["status"] == "finished"
    assert all(c["status"] == "done" for c in after["cells"])
    for cell_id, run_dir in done.items():  # finished cells kept their runs
        assert next(c for c in after["cells"] if c["id"] == cell_id)["run_dir"] == run_dir
    rerun = _journal(journal)[ran_before:]
    assert len(rerun) == 4 - len(done)
    finished = {(c["resolved"]["name"], c["seed"]) for c in before["cells"]
                if c["status"] == "done"}
    assert not finished & {(r["name"], r["seed"]) for r in rerun}


def test_a_failing_run_is_an_error_cell_not_the_end(tmp_path: Path, campaign_file: Path) -> None:
    def flaky(config: TestConfig, root: Path) -> Path:
        if config.name.endswith("-acks1-k"):
            raise RuntimeError("host n3 did not come up")
        return simulated_run_test(config, root)

    campaign_file.write_text(
        'name = "night"\nseeds = [1]\ntime_limit = 10\n'
        '[[config]]\nname = "safe"\nexpect = "no-loss"\n'
        '[[config]]\nname = "acks1"\nexpect = "loss-allowed"\nset = { "workload.acks" = "1" }\n'
        '[[nemesis]]\nname = "k"\n')
    folder = run_campaign(campaign_file, False, None, flaky, tmp_path / "results")
    state = _state(folder)
    errors = [c for c in state["cells"] if c["status"] == "error"]
    assert len(errors) == 1 and "host n3 did not come up" in errors[0]["error"]
    assert state["verdict"] == "errors"


def test_second_resume_of_a_finished_campaign_starts_a_new_night(
        tmp_path: Path, campaign_file: Path) -> None:
    results = tmp_path / "results"
    first = run_campaign(campaign_file, False, None, simulated_run_test, results)
    second = run_campaign(campaign_file, True, None, simulated_run_test, results)
    assert second != first and _state(second)["status"] == "finished"


@pytest.mark.parametrize(("text", "message"), [
    ('seeds = [1]\ntime_limit = 5\n[[config]]\nname = "a"\nexpect = "maybe"\n'
     '[[nemesis]]\nname = "k"\n', "config 'a': expect must be one of"),
    ('seeds = [1]\ntime_limit = 5\nbogus = 1\n', "unknown key(s) ['bogus']"),
    ('seeds = []\ntime_limit = 5\n', "seeds must be a non-empty list"),
    ('seeds = [1]\ntime_limit = 5\n[[config]]\nname = "a"\nexpect = "no-loss"\n',
     "needs at least one [[nemesis]] table"),
    ('seeds = [1]\ntime_limit = 5\n[[config]]\nname = "a"\nexpect = "no-loss"\n'
     'set = { seed = 3 }\n[[nemesis]]\nname = "k"\n', "set by the campaign matrix"),
])
def test_bad_campaign_files_name_the_file_and_key(tmp_path: Path, text: str,
                                                   message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(CampaignError) as err:
        load_spec(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_bad_setting_in_a_cell_is_reported_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('seeds = [1]\ntime_limit = 5\n[[config]]\nname = "a"\nexpect = "no-loss"\n'
                    'set = { "system.min.insync.replicas" = 9 }\n[[nemesis]]\nname = "k"\n')
    with pytest.raises(ConfigError, match="min.insync.replicas"):
        run_campaign(path, False, None, simulated_run_test, tmp_path / "results")
    assert not (tmp_path / "results" / "campaigns").exists()


def test_shipped_campaign_files_are_valid() -> None:
    root = TESTS.parents[1] / "campaigns"
    quick = load_spec(root / "quick.toml")[1]
    expects = {c.expect for c in quick}
    assert expects == {"no-loss", "loss-allowed"}
    assert all(c.resolved["nemesis"]["faults"] for c in quick)
    assert load_spec(root / "nightly.toml")[1]


def test_seeds_and_config_options_reshape_the_matrix() -> None:
    validation = TESTS.parents[1] / "campaigns" / "validation.toml"
    _, every = load_spec(validation)
    _, wide = load_spec(validation, seeds="1-10")
    assert len(wide) == len(every) // 3 * 10  # the file's 3 seeds per config became 10
    _, safe = load_spec(validation, seeds="4,9", only=["safe"])
    assert [(c.config, c.seed) for c in safe] == [("safe", 4), ("safe", 9)]
    with pytest.raises(CampaignError, match=r"no config named \['nope'\]"):
        load_spec(validation, only=["nope"])
    with pytest.raises(CampaignError, match="--seeds must be"):
        load_spec(validation, seeds="1,x")


def test_classify() -> None:
    assert classify("no-loss", True, 0) == "ok"
    assert classify("no-loss", False, 0) == "regression"
    assert classify("no-loss", "unknown", 0) == "unknown"
    assert classify("loss-allowed", False, 3) == "expected-loss"
    assert classify("loss-allowed", True, 0) == "not-detected"
    # invalid without loss (an invariant violated, a stale read): the weakness was found
    assert classify("loss-allowed", False, 0) == "detected-no-loss"
    assert classify("loss-allowed", "unknown", 0) == "not-detected"


def test_a_campaign_folder_runs_in_one_process_at_a_time(tmp_path: Path,
                                                         campaign_file: Path) -> None:
    results = tmp_path / "results"

    def interrupted(config: dict[str, Any], root: Path) -> Path:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_campaign(campaign_file, False, None, interrupted, results)
    folder = newest_unfinished(results, "night")
    assert _state(folder)["status"] == "interrupted"
    assert {c["status"] for c in _state(folder)["cells"]} == {"pending"}
    holder = Campaign.open(folder)
    holder.lock()
    try:
        with pytest.raises(CampaignBusy, match="being run by another process"):
            run_campaign(campaign_file, True, None, simulated_run_test, results)
    finally:
        holder.unlock()


def test_report_rereads_outcomes_of_rechecked_runs(tmp_path: Path, campaign_file: Path) -> None:
    """`harness report CAMPAIGN` after its runs were re-checked (`harness check RUN`, e.g. by a
    newer checker): the matrix follows the runs' new results.json."""
    folder = run_campaign(campaign_file, False, None, simulated_run_test, tmp_path / "results")
    cell = next(c for c in _state(folder)["cells"] if c["id"] == "safe-claimed-lossy/kill/s1/t10")
    assert cell["outcome"] == "not-detected"
    lossy = next(c for c in _state(folder)["cells"] if c["id"] == "acks1/kill/s1/t10")
    rechecked = (folder / lossy["run_dir"] / "results.json").read_text()
    (folder / cell["run_dir"] / "results.json").write_text(rechecked)
    assert cli.main(["report", str(folder)]) == 0
    cell = next(c for c in _state(folder)["cells"] if c["id"] == "safe-claimed-lossy/kill/s1/t10")
    assert cell["outcome"] == "expected-loss" and cell["lost"] > 0
    assert "safe-claimed-lossy" not in (folder / "index.html").read_text().split("Matrix")[0]
