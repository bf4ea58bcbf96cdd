"""The asyncio runtime: the node driver's port (driver.py) over TCP, real files and threads.

One event loop per node process runs everything that must stay responsive: the listener, the
outgoing requests, the 20 ms tick (heartbeats, fetches, ISR lag, timeouts) and the state
machine. Nothing slow may run on it. What the process does with its machine (the tick, the
outputs, the checkpoint, the controlled shutdown) is the driver's; this module only gives it a
clock, sockets, an event log, files and storage threads. The simulator (simulation/node.py)
gives the same driver simulated ones.

Storage port (brokers). The broker's logs are opened with `defer_sync=True` (log.py,
"Storage port"): appends and truncations still happen on the loop (page-cache writes), but
every fsync -- of segment files after a flush-policy flush or a roll, of the directory, of
recovery on open, of the leader-epoch checkpoint -- comes out of the state machine as a
`Sync` output. The runtime runs its job on the broker's storage threads (a small pool, like
Kafka's I/O threads: partitions sync in parallel; a log hands out one job at a time, so each
log's jobs run one after the other, in order, and its checkpoint's tmp file is never written
twice at once) and when it is done calls `on_synced` on the loop. The
state machine holds back everything that depends on that durability until then: acks=1
replies, the leader's own LEO in the HWM (so acks=all), records served to followers, a
follower's next fetch offset. So with `flush.messages=1` an acknowledgement still means
"fsynced", as before, but a 200 ms fsync no longer stops heartbeats and fetches for 200 ms;
meanwhile appends keep arriving and the next job syncs them all at once (group commit). The
HWM checkpoint (every second, at most one write at a time) is written by the same pool, so it
never holds up a log's sync. A job that fails (EIO from
fsync) halts the broker, as Kafka halts on a failed log flush: the page cache may have
dropped the data, so nothing may be acknowledged as durable any more.

Still on the loop: a clean shutdown's final flush (after the storage thread has drained) and
the controller's metadata log, which is fsynced before the reply that depends on it (the
controller's `Persist`)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from replication.broker_store import BrokerStore, LogConfig
from replication.config import NodeConfig
from replication.driver import BrokerDriver, ControllerDriver, NodeDriver
from replication.metadata_file import METADATA_LOG, MetadataFile
from replication.net import ConnectionLost, Pool, Respond, serve
from replication.outputs import Event

log = logging.getLogger("replication")
STORAGE_THREADS = 4  # a broker's fsyncs in parallel: logs, and the HWM checkpoint


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class EventLog:
    """events.jsonl beside the data directory (docs/formats.md)."""

    def __init__(self, data_dir: Path, node: str | int) -> None:
        self.node = node
        self._file = open(Path(data_dir).resolve().parent / "events.jsonl", "a", buffering=1)

    def write(self, event: Event) -> None:
        self._file.write(json.dumps({"ts": time.time(), "node": self.node, "kind": event.kind, **event.fields}) + "\n")

    def close(self) -> None:
        self._file.close()


class Runtime:
    """The port of one node process: the loop's clock and timers, a listener and a connection
    pool, events.jsonl, and a broker's storage threads (a small pool, like Kafka's I/O
    threads: partitions sync in parallel; a log hands out one job at a time)."""

    driver: NodeDriver

    def __init__(self, listen: str, events: EventLog, storage_threads: int = 0,
                 name: str = "storage") -> None:
        self.listen = listen
        self.events = events
        self.pool = Pool()
        self.storage = ThreadPoolExecutor(max_workers=storage_threads, thread_name_prefix=name) \
            if storage_threads else None
        self.exited = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    # ---- the port ---------------------------------------------------------------------------------

    def now_ms(self) -> int:
        return now_ms()

    def call_later(self, delay_s: float, fn: Callable[..., None], *args: Any) -> Any:
        return self._loop().call_later(delay_s, fn, *args)

    def soon(self, fn: Callable[..., None], *args: Any) -> None:
        self._loop().call_soon(fn, *args)

    def request(self, address: str, msg: Any, timeout_s: float,
                answered: Callable[[Any], None]) -> None:
        """Send `msg`; `answered(the reply, or the ConnectionLost)` later. Through the
        connection's callback (Connection.call), not a task a request: a follower's fetches
        are most of a broker's requests."""
        def done(outcome: Any) -> None:
            if isinstance(outcome, ConnectionLost):
                log.debug("request %s to %s failed: %s", msg.TYPE, address, outcome)
            elif isinstance(outcome, BaseException):  # not the network's: a bug, left unanswered
                log.error("request %s to %s: %r", msg.TYPE, address, outcome, exc_info=outcome)
                return
            answered(outcome)
        self.pool.get(address).call(msg, timeout_s, done)

    def record(self, event: Event) -> None:
        self.events.write(event)

    def fsync_blocks(self, resume: Callable[..., None], *args: Any) -> bool:
        return False  # the fsync ran inline, on the loop: it has returned

    def run_storage(self, job: Callable[[], None],
                    done: Callable[[BaseException | None], None]) -> None:
        future = self._loop().run_in_executor(self.storage, job)
        future.add_done_callback(lambda f: _storage_done(f, done))

    def drain_storage(self, then: Callable[[], None]) -> None:
        if self.storage is None:
            then()
            return
        future = self._loop().run_in_executor(None, self.storage.shutdown, True)
        future.add_done_callback(lambda _f: then())

    def failed(self, where: str, exc: BaseException) -> None:
        log.error("the state machine failed in %s: %r", where, exc, exc_info=exc)

    def halt(self, what: str, exc: BaseException) -> None:
        log.critical("%s failed: %r; halting (unsynced data may be lost)", what, exc)
        logging.shutdown()
        os._exit(1)

    def exit(self) -> None:
        self.exited.set()

    def stepped(self, what: str, detail: Any = None) -> None:
        """Steps are checked only in the simulator."""

    # ---- the process ------------------------------------------------------------------------------

    def _loop(self) -> asyncio.AbstractEventLoop:
        assert self.loop is not None, "the runtime is not running"
        return self.loop

    def on_request(self, msg: Any, respond: Respond) -> None:
        self.driver.handle(respond, msg)

    async def run(self) -> None:
        """Listen, start the machine and its ticks, and run until the driver exits (SIGTERM or
        SIGINT start its shutdown)."""
        self.loop = asyncio.get_running_loop()
        server = await serve(self.listen, self.on_request)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.driver.request_stop)
        self.driver.begin()
        await self.exited.wait()
        self.driver.ticking = False
        server.close()
        await self.pool.close()


def _storage_done(future: Future | asyncio.Future, done: Callable[[BaseException | None], None]) -> None:
    if not future.cancelled():
        done(future.exception())


def controller_runtime(listen: str, data_dir: Path, config: NodeConfig) -> Runtime:
    """The controller's process: its metadata log in data_dir."""
    data_dir.mkdir(parents=True, exist_ok=True)
    runtime = Runtime(listen, EventLog(data_dir, "controller"))
    runtime.driver = ControllerDriver(runtime, config, MetadataFile(data_dir / METADATA_LOG))
    return runtime


def broker_runtime(broker_id: int, listen: str, controller: str, data_dir: Path,
                   config: NodeConfig, *, advertise: str | None = None,
                   routes: Mapping[str, str] | None = None) -> Runtime:
    """A broker's process: its logs in data_dir. `advertise`: the address registered for peers
    and clients (default `listen`); `routes`: peer address -> the address this broker connects
    to it through (a proxy)."""
    runtime = Runtime(listen, EventLog(data_dir, broker_id), STORAGE_THREADS,
                      f"storage-{broker_id}")
    store = BrokerStore(data_dir, LogConfig(config.flush_messages, config.flush_ms,
                                            config.segment_bytes), defer_sync=True)
    runtime.driver = BrokerDriver(runtime, config, store, broker_id, advertise or listen,
                                  controller, routes)
    return runtime
