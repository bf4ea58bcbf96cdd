"""The node driver's policies (replication/driver.py), through a port that records what the
driver asks of it and lets the test decide when each thing completes. The broker's store is
the real one, on files: the clean-shutdown marker must be written only after the storage
port has drained, a failed storage job halts the process, and a tick that raises stops the
ticks but not the process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replication.broker_store import BrokerStore, LogConfig
from replication.config import NodeConfig
from replication.driver import SHUTDOWN_MS, TICK_S, BrokerDriver, ControllerDriver
from replication.outputs import Event, Sync


class Port:
    """Records every request of the driver; completes nothing by itself."""

    def __init__(self) -> None:
        self.now = 1_000
        self.timers: list[tuple[float, Any, tuple]] = []
        self.events: list[Event] = []
        self.jobs: list[tuple[Any, Any]] = []
        self.drained: Any = None
        self.failures: list[tuple[str, BaseException]] = []
        self.halted: list[str] = []
        self.exited = False

    def now_ms(self) -> int:
        return self.now

    def call_later(self, delay_s: float, fn: Any, *args: Any) -> None:
        self.timers.append((delay_s, fn, args))

    def soon(self, fn: Any, *args: Any) -> None:
        self.timers.append((0.0, fn, args))

    def request(self, address: str, msg: Any, timeout_s: float, answered: Any) -> None:
        """Requests stay unanswered here."""

    def record(self, event: Event) -> None:
        self.events.append(event)

    def fsync_blocks(self, resume: Any, *args: Any) -> bool:
        return False

    def run_storage(self, job: Any, done: Any) -> None:
        self.jobs.append((job, done))

    def drain_storage(self, then: Any) -> None:
        self.drained = then

    def failed(self, where: str, exc: BaseException) -> None:
        self.failures.append((where, exc))

    def halt(self, what: str, exc: BaseException) -> None:
        self.halted.append(what)

    def exit(self) -> None:
        self.exited = True

    def stepped(self, what: str, detail: Any = None) -> None:
        """Nothing checks steps here."""

    def fire_timers(self) -> None:
        timers, self.timers = self.timers, []
        for _delay, fn, args in timers:
            fn(*args)


def broker(tmp_path: Path) -> tuple[BrokerDriver, Port, BrokerStore]:
    port = Port()
    store = BrokerStore(tmp_path / "data", LogConfig(), defer_sync=True)
    driver = BrokerDriver(port, NodeConfig(), store, 1, "b1:9092", "c:9092")
    return driver, port, store


def test_the_clean_marker_is_written_only_after_the_storage_port_drains(tmp_path):
    driver, port, store = broker(tmp_path)
    driver.machine.broker_epoch = 7  # as if registered
    driver.request_stop()
    assert port.drained is None  # handing leadership away (the controller never answers)
    port.now += SHUTDOWN_MS
    port.fire_timers()  # the hand-over's deadline has passed: the storage port drains
    assert port.drained is not None and not port.exited
    assert BrokerStore(tmp_path / "data").read_and_delete_clean_marker() is None
    port.drained()
    assert port.exited
    assert [e.kind for e in port.events][-1] == "broker-stop"
    assert BrokerStore(tmp_path / "data").read_and_delete_clean_marker() == 7


def test_a_failed_storage_job_halts_the_process_and_settles_nothing(tmp_path):
    driver, port, _store = broker(tmp_path)
    log = driver._open_log("t", 0)
    output = Sync("t", 0, log.take_sync_job())  # the recovery sync asked for on open
    driver.sync(output)
    (_job, done), = port.jobs
    done(OSError(5, "Input/output error"))
    assert port.halted == ["sync of t-0"]
    assert port.failures == []


def test_a_tick_that_raises_stops_the_ticks_not_the_process(tmp_path):
    port = Port()
    driver = ControllerDriver(port, NodeConfig(), _NoMetadata())

    def boom(now: int) -> list:
        raise RuntimeError("bug in tick")

    driver.machine.tick = boom  # type: ignore[method-assign]
    driver.begin()
    assert [w for w, _ in port.failures] == ["tick"] and not port.exited
    assert port.timers == []  # no next tick
    assert not driver.ticking


def test_ticks_follow_one_another_every_tick_period(tmp_path):
    port = Port()
    driver = ControllerDriver(port, NodeConfig(), _NoMetadata())
    driver.begin()
    assert [(d, fn) for d, fn, _ in port.timers] == [(TICK_S, driver._tick)]


class _NoMetadata:
    def read_metadata(self) -> list[dict]:
        return []

    def append_metadata(self, record: dict) -> None:
        raise AssertionError("nothing to persist here")
