"""SparkSession factory: local[*] by default, any master URL to scale out."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from checkers import spark_archive
from checkers.exitcodes import UserError
from control.files import (
    check_private_dir,
    make_private_tempdir,
    remove_private_dir,
    write_text_atomic,
)

MASTER_ENV = "HARNESS_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
# How long a spark:// master gets to accept a connection before the check says it cannot be
# reached (Spark itself would retry for a minute, logging each failure, then fail the job).
MASTER_CONNECT_TIMEOUT_S = 10.0
# The local masters Spark takes: local, local[N], local[*], local[N,F], local-cluster[N,C,M]
LOCAL_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]")


class SparkStartError(UserError):
    """Spark could not start (no Java, a master nobody answers at): the environment's fault,
    said in one line (exit 3), never an internal error with a traceback."""


class SparkLostError(UserError):
    """The driver JVM died under a check (killed, out of memory, crashed): said in one line
    (exit 3), not as Py4J's `Connection refused`."""

# Spark's default console logging buries the checker's output: errors only. PySpark counts
# as a shell, whose loggers (repl.Main, PythonGatewayServer) would reset the root to WARN.
# A failed task's Java stack trace is not printed either (Executor, TaskSetManager): the
# job's failure comes back to the caller, which says why in one line (task_failure).
_LOG4J = """\
rootLogger.level = error
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = fatal
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


_private: Path | None = None
# A crashing driver JVM writes its report here, in the private directory (-XX:ErrorFile; the
# JVM's default is the current directory, whoever's it is), and _leave keeps it.
CRASH_REPORT = "jvm-crash-%p.log"
# Classes of generated code the driver keeps for later queries (Spark's default is 100):
# enough for the SQL plans of a few checks of different shapes in one session.
CODEGEN_CACHE = 1000


def private_dir() -> Path:
    """This process's own 0700 scratch directory (mkdtemp), removed at exit unless it holds a
    crashed JVM's report (_leave): it holds the log4j2 configuration and is the driver JVM's
    java.io.tmpdir. Nothing goes to a fixed name in /tmp, where another user could plant a
    file or a symlink for root to read or write through."""
    global _private
    if _private is not None:
        try:
            check_private_dir(_private)
            return _private
        except FileNotFoundError:  # removed under us (a tmp cleaner): make a new one
            pass
    _private = make_private_tempdir("harness-checker-")
    atexit.register(_leave, _private)  # after pyspark's own exit hooks stop the JVM
    return _private


def _leave(private: Path) -> None:
    """At exit: remove the private directory, or, when a driver JVM crashed, everything in it
    but the crash reports, and say where they are (the directory stays 0700: a report holds
    the JVM's command line and memory map)."""
    reports = sorted(private.glob(CRASH_REPORT.replace("%p", "*")))
    if not reports:
        remove_private_dir(private)
        return
    for entry in private.iterdir():
        if entry in reports:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    say(f"the Spark driver JVM crashed; its report is kept: {', '.join(map(str, reports))}")


def _log4j_file() -> Path:
    path = private_dir() / "log4j2.properties"
    if not path.is_file() or path.read_text() != _LOG4J:
        write_text_atomic(path, _LOG4J, mode=0o600)
    return path


def say(msg: str) -> None:
    """One line of the checker's progress on stderr."""
    print(f"[checker] {msg}", file=sys.stderr, flush=True)


def task_failure(e: Exception) -> str:
    """The Python error a failed Spark task raised (its last line), from the JVM's report
    (a Py4JJavaError that wraps the worker's traceback in the JVM's stack trace)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    python_errors = [ln for ln in lines if "Error:" in ln and not ln.startswith("at ")]
    return python_errors[-1] if python_errors else (lines[0] if lines else type(e).__name__)


def resolve_master(explicit: str | None = None, configured: str | None = None) -> str:
    """--spark-master beats HARNESS_SPARK_MASTER beats the test config beats local[*]."""
    return explicit or os.environ.get(MASTER_ENV) or configured or DEFAULT_MASTER


# The process's warm session: a campaign, a simulate search or `harness serve` checks many
# histories, and each new session costs a JVM start (10 to 20 s on two cores). It is kept here
# rather than found through SparkSession.getActiveSession, which is per thread.
_warm: SparkSession | None = None
_lock = threading.Lock()


def get_session(
    master: str | None = None,
    configured: str | None = None,
    driver_memory: str = "4g",
    shuffle_partitions: int = 8,
) -> SparkSession:
    """Return a quiet, Arrow-enabled session: the warm one of this process when it is alive
    and on the master asked for (an explicit argument or HARNESS_SPARK_MASTER), else a new
    one, whose start-up time is printed."""
    global _warm
    wanted = master or os.environ.get(MASTER_ENV)
    with _lock:
        if _alive(_warm):
            if not wanted or _warm.sparkContext.master == wanted:
                return _warm
            _warm.stop()
        _warm = None
        active = SparkSession.getActiveSession()  # one a caller made itself (tests)
        if active is not None and (not wanted or active.sparkContext.master == wanted):
            _warm = active
            return active
        if active is not None:
            active.stop()
        started = time.perf_counter()
        _warm = start_session(resolve_master(master, configured), None, driver_memory,
                              shuffle_partitions)
        say(f"Spark session ({_warm.sparkContext.master}) started in "
            f"{time.perf_counter() - started:.1f} s; kept for this process's checks")
        return _warm


def _alive(session: SparkSession | None) -> bool:
    return session is not None and session.sparkContext._jsc is not None  # not stopped


# Spark stops a Python worker idle for a minute (PythonWorkerFactory); an ingest can take
# longer (about 100 s at 100M operations), so a session started ahead keeps its workers up.
KEEP_EVERY_S = 30.0


class SessionAhead:
    """A session started on a thread of its own while the caller does something else (the
    history's ingest, checkers.check); `result()` waits for it and raises what its start
    raised. Until it is taken (`result()`) or let go (`release()`), `keep` of it runs every
    `every` seconds. The thread is a daemon's: Ctrl-C during the ingest does not wait for a JVM
    to come up, and that JVM exits with this process (PySpark's gateway reads its stdin to the
    end)."""

    def __init__(self, start: Callable[[], SparkSession],
                 keep: Callable[[SparkSession], None] | None = None,
                 every: float = KEEP_EVERY_S) -> None:
        self._done: Future[SparkSession] = Future()
        self._taken = threading.Event()
        threading.Thread(target=self._run, args=(start, keep, every),
                         name="spark-session-ahead", daemon=True).start()

    def _run(self, start: Callable[[], SparkSession],
             keep: Callable[[SparkSession], None] | None, every: float) -> None:
        try:
            session = start()
        except BaseException as e:  # whatever it was, the caller's result() raises it
            self._done.set_exception(e)
            return
        self._done.set_result(session)
        while keep is not None and not self._taken.wait(every) and _alive(session):
            keep(session)

    def result(self) -> SparkSession:
        self._taken.set()
        return self._done.result()

    def release(self) -> None:
        """The caller will not take the session (its ingest failed): stop keeping it."""
        self._taken.set()


def session_ahead(master: str | None, configured: str | None,
                  warm_up: Callable[[SparkSession], None]) -> SessionAhead | None:
    """get_session, then `warm_up` of it, on a thread (SessionAhead), and `warm_up` again every
    KEEP_EVERY_S until it is taken; None when this process has a session already, which
    get_session returns at once (a session a caller made itself is found from its own thread
    only: getActiveSession is per thread)."""
    with _lock:
        if _alive(_warm):
            return None
    if SparkSession.getActiveSession() is not None:
        return None

    def start() -> SparkSession:
        session = get_session(master, configured)
        warm_up(session)
        return session

    return SessionAhead(start, keep=warm_up)


def start_session(master: str, archive: str | None = None, driver_memory: str = "4g",
                  shuffle_partitions: int = 8) -> SparkSession:
    """A new session (not the warm one get_session keeps), or SparkStartError naming why there
    is none. Java and the master are tried first: Spark's own failures come as pages of JVM
    output and a retry for a minute. `archive`: the driver JVM's class-archive options
    (checkers.spark_archive), by default those mapping this JVM's archive where it has one."""
    java = java_runs()
    master_reachable(master)
    if archive is None:
        archive = spark_archive.options(java)
    try:
        return _new_session(master, driver_memory, shuffle_partitions, archive)
    except (Py4JError, RuntimeError, OSError) as e:  # PySparkRuntimeError is a RuntimeError
        status = _driver_status(wait=1)
        if status is None:
            raise SparkStartError(f"Spark did not start on {master}: {_java_reason(e)}") from None
        _forget_driver()
        raise SparkStartError(f"Spark did not start on {master}: its driver JVM died "
                              f"({_death(status)})") from None


def _java_reason(e: BaseException) -> str:
    """A JVM error's first line (`SparkException: Could not parse Master URL: 'x'`), not its
    Java stack trace; any other error's message."""
    if isinstance(e, Py4JJavaError):
        return str(e.java_exception.toString()).splitlines()[0]
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def java_runs() -> str:
    """The java Spark starts, as its launcher finds it ($JAVA_HOME/bin/java, else java on the
    PATH), once it answered `java -version`; SparkStartError saying why not."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None:
        raise SparkStartError("Spark needs Java, and there is none: no JAVA_HOME and no java "
                              "on the PATH (make bootstrap installs openjdk-17-jre-headless)")
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60,
                              check=False)
    except OSError as e:
        where = f"JAVA_HOME is {home}: " if home else ""
        raise SparkStartError(f"Spark needs Java: {where}{java}: {e.strerror}") from None
    except subprocess.TimeoutExpired:
        raise SparkStartError(f"Spark needs Java: `{java} -version` did not answer in "
                              "60 s") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise SparkStartError(f"Spark needs Java: `{java} -version` failed: {why:.200}")
    return java


def master_reachable(master: str, timeout: float = MASTER_CONNECT_TIMEOUT_S) -> None:
    """That `master` is of a form Spark takes and, for a standalone master (spark://host:port,
    or several for a standby), that one of them accepts a TCP connection; SparkStartError
    saying why not. Other masters (local, yarn, k8s://...) are left to Spark."""
    if not (master == "yarn" or LOCAL_MASTER.fullmatch(master)
            or master.startswith(("spark://", "k8s://"))):
        # spark-submit would say so with a Java stack trace, from its own process
        raise SparkStartError(f"bad Spark master URL {master!r}: Spark takes local[N], "
                              "spark://HOST:PORT, yarn or k8s://...")
    if not master.startswith("spark://"):
        return
    failures = []
    for address in master.removeprefix("spark://").split(","):
        try:
            parts = urlsplit(f"//{address}")
            host, port = parts.hostname, parts.port or 7077
        except ValueError as e:
            raise SparkStartError(f"bad Spark master URL {master!r}: {e}") from None
        if not host:
            raise SparkStartError(f"bad Spark master URL {master!r}: no host in {address!r}")
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as e:
            failures.append(f"{host}:{port}: {e.strerror or 'timed out'}")
    raise SparkStartError(f"the Spark master {master} cannot be reached ({'; '.join(failures)})")


def local_only(master: str) -> dict[str, str]:
    """The settings that keep a local master's driver to this machine's loopback. Its RPC
    server and block manager would otherwise listen on the machine's external address for the
    whole check, open to anyone who reaches it. Authentication is on too (Spark makes a random
    secret for a local master and keeps it in the JVM): a local user can still connect to
    loopback, but not talk to the driver. Executors elsewhere (any other master) must reach
    the driver, so those keep Spark's defaults (tests/support/spark_cluster.py's are on loopback too)."""
    if not master.startswith("local"):
        return {}
    return {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1",
            "spark.authenticate": "true"}


def _new_session(master: str, driver_memory: str, shuffle_partitions: int,
                 archive: str) -> SparkSession:
    # Python workers run this interpreter, not whatever `python3` is first on PATH: it has
    # pyspark's dependencies and imports `checkers` (installed in it) from any directory.
    # PySpark reads PYSPARK_PYTHON when the context starts; an explicit setting wins.
    python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        # A local master's driver is on loopback (local_only). Its launcher would still look
        # up this machine's own name first and fail where that does not resolve (a container
        # or chroot without it in /etc/hosts): tell it the address. An explicit one wins.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The parallel collector: the checker is a batch job, throughput beats pause times.
    java_opts = f"-Dlog4j2.configurationFile=file:{_log4j_file()} {spark_archive.JVM_OPTIONS}"
    # The driver's scratch files (Spark's local dirs, native libraries) go to the private
    # directory too; executors elsewhere keep their own machine's default.
    driver_opts = (f"{java_opts} -Djava.io.tmpdir={private_dir()} "
                   f"-XX:ErrorFile={private_dir() / CRASH_REPORT} {archive}")
    conf = SparkConf().setMaster(master).setAll(local_only(master).items())
    if os.environ.get("PYTHONPATH"):
        # Python workers import what the driver imports (e.g. `harness mutate`'s checkout):
        # a local master's inherit this environment, a cluster's are started by its workers'
        # JVMs with theirs, so tell them.
        conf.set("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    conf.setAppName("harness-checker").setAll([
        ("spark.ui.enabled", "false"),
        ("spark.ui.showConsoleProgress", "false"),
        ("spark.driver.memory", driver_memory),
        ("spark.pyspark.python", python),
        ("spark.driver.extraJavaOptions", driver_opts),
        ("spark.executor.extraJavaOptions", java_opts),
        ("spark.sql.shuffle.partitions", str(shuffle_partitions)),
        ("spark.sql.adaptive.enabled", "true"),
        # cached tables are scanned a few times each and dropped: compressing them costs more
        ("spark.sql.inMemoryColumnarStorage.compressed", "false"),
        ("spark.sql.execution.arrow.pyspark.enabled", "true"),
        ("spark.sql.session.timeZone", "UTC"),
        # The SQL plans generate some 340 classes a check; with Spark's 100 cached, a session's
        # next check compiled them all again (docs/checkers.md, "A new session").
        ("spark.sql.codegen.cache.maxEntries", str(CODEGEN_CACHE)),
    ])
    _start_driver(conf)
    session = SparkSession.builder.config(conf=conf).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


# The driver JVM _start_driver started (spark-submit execs java, so this is the JVM itself).
_driver: subprocess.Popen | None = None
# What Py4J raises when it loses the driver (its socket closed, its port gone): the driver
# may have died (driver_watched tells), it is no task's failure.
LOST_DRIVER = (Py4JNetworkError, ConnectionError)


@contextmanager
def driver_watched() -> Iterator[None]:
    """Work on this process's session: when its driver JVM dies under it, SparkLostError
    saying how, instead of Py4J's connection errors, and the dead session forgotten so that
    the process's next check starts a new one (a campaign's next run, `harness serve`)."""
    try:
        yield
    except LOST_DRIVER:
        status = _driver_status()
        if status is None:
            raise
        _forget_driver()
        raise SparkLostError(f"the Spark driver JVM died during the check "
                             f"({_death(status)}): no verdict") from None


def _driver_status(wait: float = 5) -> int | None:
    """The driver JVM's exit status if it died, else None (alive after `wait` seconds, or
    not ours)."""
    return None if _driver is None else _exit_status(_driver, wait)


def _exit_status(driver: subprocess.Popen, wait: float) -> int | None:
    """Py4J and the accumulator server see their sockets close as the JVM exits: the status
    follows within moments."""
    try:
        return driver.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return None


def _death(status: int) -> str:
    if status == -signal.SIGKILL:
        return "killed by SIGKILL: the kernel's out-of-memory killer, or a kill -9"
    if status >= 0:
        return f"it exited with status {status}"
    name = signal.Signals(-status).name
    crashed = name in ("SIGABRT", "SIGSEGV", "SIGBUS")  # a JVM's fatal error ends in abort()
    return f"it crashed ({name})" if crashed else f"killed by {name}"


def _forget_driver() -> None:
    """Drop every reference PySpark and this module keep to a dead driver, so that the next
    session launches a JVM: PySpark would otherwise hand out the dead session again
    (getOrCreate) or start a context on the dead gateway."""
    global _warm, _driver
    _warm = _driver = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None


def _start_driver(conf: SparkConf) -> None:
    """Start the driver JVM as PySpark would (launch_gateway of this conf), but with its stdout
    on our stderr: stdout carries the CLI's JSON, and a JVM writes some things there whatever
    its options (a crash's banner, `-XX:+DisplayVMOutputToStderr` notwithstanding, JDK 17).
    A process whose JVM is up already (PySpark keeps it for its later contexts, as a session
    a test made itself) uses that one."""
    global _driver
    if SparkContext._gateway is None:  # PySpark's own test for a JVM it can reuse
        gateway = launch_gateway(conf, popen_kwargs={"stdout": 2})
        _driver = gateway.proc
        context = SparkContext(conf=conf, gateway=gateway)
        _quiet_when_dead(context._accumulatorServer, gateway.proc)


def _quiet_when_dead(server: socketserver.BaseServer, driver: subprocess.Popen) -> None:
    """PySpark's accumulator server (the driver sends it the tasks' accumulator updates)
    prints a traceback when its connection breaks; when that is because the driver died,
    driver_watched says so in one line, so the traceback is left out."""
    loud = server.handle_error

    def handle_error(request: object, client_address: object) -> None:
        if _exit_status(driver, wait=5) is None:
            loud(request, client_address)

    server.handle_error = handle_error  # type: ignore[method-assign]
