"""A check's Spark session started while its history is ingested (checkers.spark.SessionAhead,
checkers.check._session_ahead): on a thread of its own, its errors raised where the session
is asked for, and taken by a cold `python -m checkers`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from histories import History

from checkers.spark import SessionAhead, session_ahead
from checkers.spark_native import warm_up


def test_the_session_starts_on_a_thread_while_the_caller_goes_on():
    caller_went_on = threading.Event()

    def start():
        if not caller_went_on.wait(timeout=10):  # a start on the caller's thread never sees it
            raise TimeoutError("started on the caller's thread")
        return "session"

    ahead = SessionAhead(start)
    caller_went_on.set()
    assert ahead.result() == "session"


def test_what_the_start_raised_is_raised_where_the_session_is_asked_for():
    def start():
        raise RuntimeError("no Java")

    ahead = SessionAhead(start)
    with pytest.raises(RuntimeError, match="no Java"):
        ahead.result()


def _kept(release: str) -> tuple[int, int]:
    """Keeps of a session started ahead: (while the caller was busy, after it took or let
    go of the session)."""
    session = SimpleNamespace(sparkContext=SimpleNamespace(_jsc=object()))  # alive
    keeps: list[object] = []
    ahead = SessionAhead(lambda: session, keep=keeps.append, every=0.02)
    deadline = time.monotonic() + 10
    while len(keeps) < 3 and time.monotonic() < deadline:  # the caller's long ingest
        time.sleep(0.01)
    if release == "taken":
        assert ahead.result() is session
    else:
        ahead.release()
    busy = len(keeps)
    time.sleep(0.2)
    return busy, len(keeps) - busy


@pytest.mark.parametrize("release", ["taken", "let go"])
def test_a_session_ahead_is_kept_warm_until_the_caller_takes_it_or_lets_go(release):
    busy, after = _kept(release)
    assert busy >= 3
    assert after <= 1  # one keep may have begun as the caller took it; else 10 in 0.2 s


def test_a_stopped_session_is_not_kept():
    session = SimpleNamespace(sparkContext=SimpleNamespace(_jsc=None))  # stopped
    keeps: list[object] = []
    ahead = SessionAhead(lambda: session, keep=keeps.append, every=0.01)
    time.sleep(0.2)
    assert ahead.result() is session and keeps == []


def test_a_process_with_its_session_starts_none_ahead(spark):
    assert session_ahead(None, None, warm_up) is None


def test_warming_up_a_live_session_says_nothing(spark, capsys):
    warm_up(spark)
    assert capsys.readouterr().err == ""


def test_a_cold_check_starts_its_session_with_the_ingest(tmp_path):
    h = History()
    h.send(1, 0, 10, 0)
    h.send(1, 0, 11, 1)
    h.final(9, 0, [(0, 10)])  # 11 acknowledged, never read
    run = h.write(tmp_path)
    env = {**os.environ, "HARNESS_SPARK_MASTER": "local[2]"}
    cli = subprocess.run([sys.executable, "-m", "checkers", str(run)], capture_output=True,
                         text=True, timeout=300, env=env)
    assert cli.returncode == 1, cli.stderr
    assert "(started with the ingest)" in cli.stderr
    assert json.loads(cli.stdout.splitlines()[0])["valid"] is False
    assert json.loads((run / "results.json").read_text())["lost"]["count"] == 1
