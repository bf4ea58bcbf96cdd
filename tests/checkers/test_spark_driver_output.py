"""The Spark driver JVM's own output (checkers.spark._start_driver, _leave): nothing of it on
stdout, which carries the CLI's JSON, and a crash's report kept in the private directory,
never dropped into the current one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from py4j.protocol import Py4JNetworkError

from checkers import spark as spark_module

# A real driver JVM, made to crash through sun.misc.Unsafe (a write to address 0).
CRASH = """
field = session.sparkContext._jvm.java.lang.Class.forName("sun.misc.Unsafe") \\
    .getDeclaredField("theUnsafe")
field.setAccessible(True)
field.get(None).putAddress(0, 0)
"""
OURS = "from checkers.spark import start_session\nsession = start_session('local[1]', " \
       "driver_memory='1g')\n"
PYSPARKS = "from pyspark.sql import SparkSession\n" \
           "session = SparkSession.builder.master('local[1]').getOrCreate()\n"


def _crash(tmp_path: Path, start: str) -> subprocess.CompletedProcess[str]:
    temp = tmp_path / "temp"
    temp.mkdir(mode=0o700)
    script = start + "print('{\"started\": true}', flush=True)\n" + textwrap.dedent(CRASH)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "TMPDIR": str(temp)})


def test_a_crashing_driver_jvm_keeps_stdout_clean_and_its_report(tmp_path):
    done = _crash(tmp_path, OURS)
    assert done.returncode != 0
    assert done.stdout == '{"started": true}\n'  # the crash's banner went to stderr
    assert "A fatal error has been detected by the Java Runtime Environment" in done.stderr
    kept = [ln for ln in done.stderr.splitlines() if "its report is kept: " in ln]
    assert len(kept) == 1, done.stderr[-3000:]
    report = Path(kept[0].split("its report is kept: ")[1])
    assert report.name.startswith("jvm-crash-") and "SIGSEGV" in report.read_text()
    assert report.parent.parent == tmp_path / "temp"
    assert list(report.parent.iterdir()) == [report]  # the rest of the scratch is gone
    assert report.parent.stat().st_mode & 0o077 == 0
    assert not list(tmp_path.glob("hs_err*"))


def test_a_jvm_started_as_pyspark_starts_it_writes_its_crash_on_stdout(tmp_path):
    """The twin: what _start_driver changes."""
    done = _crash(tmp_path, PYSPARKS)
    assert "A fatal error has been detected" in done.stdout
    assert list(tmp_path.glob("hs_err_pid*.log"))


def test_leaving_removes_the_scratch_or_keeps_only_crash_reports(tmp_path, capsys):
    clean, crashed = tmp_path / "clean", tmp_path / "crashed"
    for d in (clean, crashed):
        (d / "blockmgr-1").mkdir(parents=True)
        (d / "log4j2.properties").write_text("x")
    (crashed / "jvm-crash-42.log").write_text("SIGSEGV")
    spark_module._leave(clean)
    assert not clean.exists() and capsys.readouterr().err == ""
    spark_module._leave(crashed)
    assert [p.name for p in crashed.iterdir()] == ["jvm-crash-42.log"]
    assert str(crashed / "jvm-crash-42.log") in capsys.readouterr().err


def test_the_checkers_session_has_its_settings_and_runs_jobs(spark):
    """The conftest's session is started through _start_driver too."""
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert "-XX:ErrorFile=" in spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert spark.range(3).count() == 3


# A check whose driver JVM dies under it (a crash, as above, during a long job), then the
# same process's next session.
LOST = """
import threading
from checkers.spark import SparkLostError, driver_watched, get_session
session = get_session("local[1]", driver_memory="1g")
# a Python job: the driver connects to PySpark's accumulator server to send its updates
session.sparkContext.parallelize(range(4), 2).map(lambda x: x).collect()
unsafe_field = session.sparkContext._jvm.java.lang.Class.forName("sun.misc.Unsafe") \\
    .getDeclaredField("theUnsafe")
unsafe_field.setAccessible(True)
unsafe = unsafe_field.get(None)
threading.Timer(2, lambda: unsafe.putAddress(0, 0)).start()
try:
    with driver_watched():
        session.range(10**12).selectExpr("sum(id)").collect()
except SparkLostError as e:
    print("lost:", e, flush=True)
print("next:", get_session("local[1]", driver_memory="1g").range(3).count(), flush=True)
"""


def test_a_driver_that_dies_mid_check_is_one_line_and_the_next_session_is_new(tmp_path):
    temp = tmp_path / "temp"
    temp.mkdir(mode=0o700)
    done = subprocess.run([sys.executable, "-c", LOST], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "TMPDIR": str(temp)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines == ["lost: the Spark driver JVM died during the check (it crashed (SIGABRT)): "
                     "no verdict", "next: 3"], done.stdout
    assert done.stderr.count("Spark session (local[1]) started in") == 2  # a second JVM
    assert "its report is kept: " in done.stderr
    # the accumulator server's connection broke with the driver: no traceback for that
    assert "Exception occurred during processing" not in done.stderr, done.stderr[-3000:]


def test_a_network_error_while_the_driver_lives_passes_through(spark):
    """The twin: the driver answers on (it is not reported dead, the session is kept)."""
    with pytest.raises(Py4JNetworkError), spark_module.driver_watched():
        raise Py4JNetworkError("a dropped connection")
    assert spark.range(3).count() == 3


# A driver killed while its session starts: as soon as the gateway JVM is up (it is then
# still making its SparkContext, a second or more), then a second start in the same process.
STARTING = """
import signal, threading, time
from checkers import spark
def kill_once_up():
    while spark._driver is None:
        time.sleep(0.005)
    spark._driver.send_signal(signal.SIGKILL)
threading.Thread(target=kill_once_up, daemon=True).start()
try:
    spark.start_session("local[1]", driver_memory="1g")
except spark.SparkStartError as e:
    print(e, flush=True)
print("next:", spark.start_session("local[1]", driver_memory="1g").range(3).count(), flush=True)
"""


def test_a_driver_killed_while_its_session_starts_is_said_and_the_next_start_is_new(tmp_path):
    done = subprocess.run([sys.executable, "-c", STARTING], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "Spark did not start on local[1]: its driver JVM died (killed by SIGKILL: the "
        "kernel's out-of-memory killer, or a kill -9)", "next: 3"], done.stderr[-3000:]
