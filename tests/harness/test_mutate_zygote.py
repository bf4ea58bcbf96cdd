"""harness/mutate/zygote.py: `harness mutate`'s children forked from a process that imported
the libraries already. Real processes throughout: a forked child answers a job exactly as a
child started afresh does (the unmutated code's rows, and the acks=all mutant killed at its
first seed, so the mutant's import hook still comes before the protocol); a forked child
killed mid-job is gone with its group; the zygote ends when the campaign's end closes."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from dataclasses import replace

from test_mutate import HWM_MAX

from harness.commands.mutate import cells
from harness.mutate.child import PARENT, ROOT
from harness.mutate.score import ZYGOTE, kill_group, run_child
from harness.mutate.zygote import Zygote


def _job(mutant: str | None) -> dict:
    (safe,) = cells(argparse.Namespace(cell=["safe"],
                                       campaign=ROOT / "campaigns" / "validation.toml"))
    base = {"1": {"seed": 1, "valid": True, "acked": 500, "anomalies": {}, "error": None,
                  "lost": 0}}
    return {"mutant": mutant, "config": replace(safe.config, time_limit=10.0).record(), "seeds": [1],
            "baseline": base if mutant else {}, "cell_kinds": []}


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), PARENT: str(os.getpid())}


def _same(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_a_forked_child_answers_as_a_child_started_afresh(monkeypatch) -> None:
    for mutant in (None, HWM_MAX):
        monkeypatch.setenv(ZYGOTE, "1")
        forked = run_child(_job(mutant), 300)
        monkeypatch.setenv(ZYGOTE, "0")
        fresh = run_child(_job(mutant), 300)
        assert forked["loaded"] and fresh["loaded"]
        assert forked["reached"] == fresh["reached"]  # each row's count compared below too
        assert _same(forked["rows"]) == _same(fresh["rows"])
    assert forked["rows"][0]["anomalies"].get("lost-write")  # the mutant, not the original
    assert forked["reached"] > 0 and forked["rows"][0]["reached"] == forked["reached"]


def test_a_forked_child_killed_mid_job_is_gone_and_the_zygote_ends_with_its_socket() -> None:
    """The group exists as soon as the pid is known (a lane stopped at once kills it)."""
    zygote = Zygote(_env())
    try:
        proc = zygote.fork()
        proc_dir = f"/proc/{proc.pid}"
        assert os.path.exists(proc_dir) and os.getpgid(proc.pid) == proc.pid
        answer: list = []
        # 200 seeds: a job that outlasts the 2 s below on an idle machine (one seed of 10
        # simulated seconds takes about 0.6 s there)
        job = {**_job(None), "seeds": list(range(1, 201))}
        talk = threading.Thread(target=lambda: answer.append(
            proc.communicate(json.dumps(job), timeout=300)))
        talk.start()
        time.sleep(2)
        kill_group(proc)
        talk.join(60)
        assert answer and answer[0][0] == ""  # no answer: its pipes ended with it
        deadline = time.monotonic() + 10
        while os.path.exists(proc_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(proc_dir)  # killed, and reaped by the zygote
        assert zygote.proc.poll() is None
    finally:
        zygote.close()
    assert zygote.proc.returncode == 0


def test_a_child_killed_at_its_timeout_leaves_no_scratch_folder(monkeypatch, tmp_path) -> None:
    """A killed child cannot remove its seeds' folders (harness.simulate's `finally` never
    runs): they go in a folder of the parent's, which removes it. Before, every raced
    mutant's losing lane left a `sim-s*` folder in /tmp."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            seen.extend(_in(tmp_path))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:  # 200 seeds outlast 15 s (about 0.6 s a seed on an idle machine)
        answer = run_child({**_job(None), "seeds": list(range(1, 201))}, 15)
    finally:
        done.set()
        watcher.join()
    assert answer == {"timeout": True}
    assert any("sim-s" in p for p in seen)  # the child did write there
    assert _in(tmp_path) == []


def _in(folder) -> list[str]:
    return [str(p.relative_to(folder)) for p in folder.rglob("*")]
