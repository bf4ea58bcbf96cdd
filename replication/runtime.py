"""The asyncio runtime that drives the sans-IO controller and broker over TCP and real files.

One event loop per node process runs everything that must stay responsive: the listener, the
outgoing requests, the 20 ms tick (heartbeats, fetches, ISR lag, timeouts) and the state
machine. Nothing slow may run on it.

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
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from replication.broker import Broker, started_event
from replication.broker_store import BrokerStore, LogConfig
from replication.config import NodeConfig
from replication.controller import Controller
from replication.messages import FetchRequest, Request
from replication.net import ConnectionLost, Pool, Respond, serve
from replication.outputs import Event, Output, Persist, Reply, Send, Sync

log = logging.getLogger("replication")
TICK_S = 0.02
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


class NodeRuntime:
    """Shared plumbing: a listener, outgoing requests, the tick loop and the outputs."""

    machine: Controller | Broker

    def __init__(self, listen: str, events: EventLog, request_timeout_s: float) -> None:
        self.listen = listen
        self.events = events
        self.pool = Pool()
        self.request_timeout_s = request_timeout_s
        self.stopping = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()

    def address_of(self, dest: str | int) -> str | None:
        raise NotImplementedError

    def persist(self, record: dict) -> None:
        raise NotImplementedError(f"this node does not persist metadata records: {record}")

    def carry_out(self, outputs: list[Output]) -> None:
        for o in outputs:
            if isinstance(o, Reply):
                o.token(o.msg)
            elif isinstance(o, Event):
                self.events.write(o)
            elif isinstance(o, Persist):
                self.persist(o.record)
            elif isinstance(o, Send):
                self._spawn(self._send(o.dest, o.msg))
            elif isinstance(o, Sync):
                self.sync(o)

    def sync(self, output: Sync) -> None:
        raise NotImplementedError(f"this node has no deferred storage: {output}")

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, dest: str | int, msg: Request) -> None:
        address = self.address_of(dest)
        try:
            if address is None:
                raise ConnectionLost(f"no known address for {dest}")
            timeout = self.request_timeout_s
            if isinstance(msg, FetchRequest):
                timeout += 1.0
            response = await self.pool.get(address).request(msg, timeout)
        except ConnectionLost as e:
            log.debug("request %s to %s failed: %s", msg.TYPE, dest, e)
            self.carry_out(self.machine.on_send_failed(dest, msg, now_ms()))
            return
        self.carry_out(self.machine.on_response(dest, msg, response, now_ms()))

    def on_request(self, msg: Request, respond: Respond) -> None:
        self.carry_out(self.machine.handle(respond, msg, now_ms()))

    async def tick_loop(self) -> None:
        while not self.stopping.is_set():
            self.carry_out(self.machine.tick(now_ms()))
            self.periodic()
            await asyncio.sleep(TICK_S)

    def periodic(self) -> None:
        """Extra per-tick work of a node kind."""

    async def run(self) -> None:
        server = await serve(self.listen, self.on_request)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self.request_stop)
        await self.started()
        ticker = loop.create_task(self.tick_loop())
        await self.stopping.wait()
        await self.shutdown()
        ticker.cancel()
        server.close()
        await self.pool.close()

    def request_stop(self) -> None:
        self.stopping.set()

    async def started(self) -> None:
        """Hook run once the listener is up."""

    async def shutdown(self) -> None:
        """Hook run on SIGTERM/SIGINT before the process exits."""


class ControllerRuntime(NodeRuntime):
    def __init__(self, listen: str, data_dir: Path, config: NodeConfig) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(listen, EventLog(data_dir, "controller"), config.request_timeout_ms / 1000)
        self.machine = Controller(config)
        self.path = data_dir / "metadata.log"
        self._replay()
        self._file = open(self.path, "a")

    def _replay(self) -> None:
        if not self.path.exists():
            return
        now = now_ms()
        lines = self.path.read_bytes().split(b"\n")
        good = 0
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                if i == len(lines) - 1:
                    break  # a torn last line from a crash mid-append: it was never acknowledged
                raise SystemExit(f"{self.path}:{i + 1}: corrupt metadata record") from None
            self.machine.replay(record, now)
            good += len(line) + 1
        with open(self.path, "r+b") as f:
            f.truncate(good)
        self.machine.restarted(now)

    def persist(self, record: dict) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def address_of(self, dest: str | int) -> str | None:
        return None  # the controller only answers


class BrokerRuntime(NodeRuntime):
    def __init__(self, broker_id: int, listen: str, controller: str, data_dir: Path,
                 config: NodeConfig, *, advertise: str | None = None,
                 routes: Mapping[str, str] | None = None) -> None:
        """`advertise`: the address registered for peers and clients (default `listen`);
        `routes`: peer address -> the address this broker connects to it through (a proxy)."""
        super().__init__(listen, EventLog(data_dir, broker_id), config.request_timeout_ms / 1000)
        self.controller_address = controller
        self.routes = dict(routes or {})
        self.store = BrokerStore(data_dir, LogConfig(config.flush_messages, config.flush_ms,
                                                     config.segment_bytes), defer_sync=True)
        # The storage port: every fsync of this broker runs here, off the loop.
        self.storage = ThreadPoolExecutor(max_workers=STORAGE_THREADS,
                                          thread_name_prefix=f"storage-{broker_id}")
        self._storage_open = True
        self._checkpoint_busy = False
        clean_epoch = self.store.read_and_delete_clean_marker()
        checkpoint = {f"{t}-{p}": h for (t, p), h in self.store.read_hwm_checkpoint().items()}
        self.machine = Broker(broker_id, advertise or listen, config, self._open_log, clean_epoch,
                              checkpoint)
        self.machine.controller_address = controller
        self.events.write(started_event(clean_epoch))
        self._last_checkpoint = 0

    def _open_log(self, topic: str, partition: int):
        segment_log = self.store.open_log(topic, partition)
        info = segment_log.recovery_info
        if info.truncated_bytes:
            self.events.write(Event("log-recovery", {
                "topic": topic, "partition": partition, "truncated_bytes": info.truncated_bytes,
                "log_end_offset": segment_log.end_offset, "reason": info.reason}))
        return segment_log

    def address_of(self, dest: str | int) -> str | None:
        if dest == "controller":
            address: str | None = self.controller_address
        else:
            address = self.machine.broker_address(int(dest))
        return self.routes.get(address, address) if address is not None else None

    async def started(self) -> None:
        self.carry_out(self.machine.start(now_ms()))

    def sync(self, output: Sync) -> None:
        if not self._storage_open:
            return  # shutting down: the final flush makes everything durable
        future = asyncio.get_running_loop().run_in_executor(self.storage, output.job.run)
        future.add_done_callback(lambda f: self._synced(output, f))

    def _synced(self, output: Sync, future: asyncio.Future) -> None:
        if future.cancelled():
            return
        if future.exception() is not None:
            self._storage_failed(f"sync of {output.topic}-{output.partition}", future.exception())
        self.carry_out(self.machine.on_synced(output.topic, output.partition, output.job, now_ms()))

    def _storage_failed(self, what: str, exc: BaseException) -> None:
        log.critical("%s failed: %r; halting (unsynced data may be lost)", what, exc)
        logging.shutdown()
        os._exit(1)

    def periodic(self) -> None:
        now = now_ms()
        if now - self._last_checkpoint >= 1000 and self.machine.replicas and self._storage_open \
                and not self._checkpoint_busy:
            self._last_checkpoint = now
            hwms = {(r.topic, r.partition): r.hwm for r in self.machine.replicas.values()}
            self._checkpoint_busy = True
            future = asyncio.get_running_loop().run_in_executor(
                self.storage, self.store.write_hwm_checkpoint, hwms)
            future.add_done_callback(self._checkpoint_written)

    def _checkpoint_written(self, future: asyncio.Future) -> None:
        self._checkpoint_busy = False
        if not future.cancelled() and future.exception() is not None:
            self._storage_failed("HWM checkpoint", future.exception())

    async def shutdown(self) -> None:
        """Controlled shutdown: hand leadership away, then flush, then the marker."""
        self.machine.begin_shutdown()
        deadline = time.monotonic() + 10
        while not self.machine.shutdown_ok and time.monotonic() < deadline:
            self.carry_out(self.machine.tick(now_ms()))
            await asyncio.sleep(TICK_S)
        # Let the storage thread finish what it has; the final flush below covers the rest.
        self._storage_open = False
        await asyncio.get_running_loop().run_in_executor(None, self.storage.shutdown, True)
        self.store.close(clean=True)
        if self.machine.broker_epoch is not None:
            self.store.write_clean_marker(self.machine.broker_epoch)
        self.events.write(Event("broker-stop", {"clean": True, "controlled": self.machine.shutdown_ok}))
