"""harness.store: run folder names, results/latest, test.json."""

from __future__ import annotations

import calendar
import json
import os
import re
import sys
import threading
from pathlib import Path

import pytest

from harness import store
from harness.config import load_config, typed, validate

STAMP = calendar.timegm((2026, 11, 22, 6, 30, 15, 0, 0, 0))


def test_run_folder_name_follows_the_layout(tmp_path):
    run = store.create_run_dir(tmp_path, "default", 7, STAMP)
    assert run == tmp_path / "default" / "20261122T063015-s7"
    assert run.is_dir() and not any(run.iterdir())


def test_same_second_runs_get_distinct_folders_in_the_same_format(tmp_path):
    runs = [store.create_run_dir(tmp_path, "t", 1, STAMP) for _ in range(3)]
    assert len(set(runs)) == 3
    assert all(re.fullmatch(r"\d{8}T\d{6}-s1", r.name) for r in runs)
    assert [r.name for r in runs] == sorted(r.name for r in runs)


def test_concurrent_creators_never_share_a_folder(tmp_path):
    got: list[Path] = []
    lock = threading.Lock()

    def make() -> None:
        run = store.create_run_dir(tmp_path, "t", 0, STAMP)
        with lock:
            got.append(run)

    threads = [threading.Thread(target=make) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 16


@pytest.mark.parametrize("name", ["", "a/b", "..", "latest", "campaigns"])
def test_bad_names_refused(tmp_path, name):
    with pytest.raises(ValueError):
        store.create_run_dir(tmp_path, name, 0)


def test_latest_points_at_the_newest_run_and_is_relative(tmp_path):
    first = store.create_run_dir(tmp_path, "a", 0, STAMP)
    store.update_latest(tmp_path, first)
    second = store.create_run_dir(tmp_path, "b", 0, STAMP)
    store.update_latest(tmp_path, second)
    link = tmp_path / "latest"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert link.resolve() == second.resolve()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_latest_refuses_to_replace_a_real_directory(tmp_path):
    (tmp_path / "latest").mkdir()
    run = store.create_run_dir(tmp_path, "a", 0)
    with pytest.raises(FileExistsError, match="not a symlink"):
        store.update_latest(tmp_path, run)


def test_new_run_writes_test_json(tmp_path):
    config = typed(load_config(sets=["seed=42", "name=nightly"]))
    run = store.new_run(tmp_path, config, ["harness", "run", "--seed", "42"], started_at=STAMP)
    assert run.name == "20261122T063015-s42" and run.parent.name == "nightly"
    record = json.loads((run / "test.json").read_text())
    assert record["name"] == "nightly" and record["seed"] == 42
    assert record["argv"] == ["harness", "run", "--seed", "42"]
    assert record["started_at"] == STAMP and record["config"] == config.record()
    # written from the typed form: every setting, in the shape validate() reads back unchanged
    assert validate(record["config"]) == record["config"] and typed(record["config"]) == config
    assert record["config"]["workload"]["idempotence"] is True  # a default, written out
    versions = record["versions"]
    assert versions["python"] == sys.version.split()[0]
    assert versions["packages"]["paramiko"]
    assert (tmp_path / "latest").resolve() == run.resolve()
    assert store.read_test_json(run) == record


def test_git_state_reports_the_checkout_commit():
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    state = store.git_state(root)
    assert state is not None and re.fullmatch(r"[0-9a-f]{40}", state["commit"])


def test_git_state_outside_a_checkout_is_none(tmp_path):
    assert store.git_state(tmp_path) is None


def test_read_test_json_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        store.read_test_json(tmp_path)
    (tmp_path / "test.json").write_text("{\n  bad")
    with pytest.raises(ValueError, match="line 2"):
        store.read_test_json(tmp_path)


def test_default_results_dir_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(store.RESULTS_ENV, str(tmp_path))
    assert store.default_results_dir() == tmp_path
    monkeypatch.delenv(store.RESULTS_ENV)
    assert store.default_results_dir() == Path("results")
