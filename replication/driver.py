"""The node driver: how a node process drives its sans-IO state machine, written once for both
worlds.

The real runtime (runtime.py: asyncio, TCP, files and storage threads) and the simulator
(simulation/node.py: the simulated network, disk and host clock) are adapters of the small
`NodePort` below, as FoundationDB's simulation and TigerBeetle's VOPR swap only the network,
the disk and the clock. Every policy of a node process lives here, so the simulator runs it:

- The tick, every TICK_S of the host's clock. An exception escaping it stops the ticks (as the
  runtime's asyncio task would die) and is reported; the process lives on.
- An I/O error (OSError) escaping the machine, from a request, the tick or an answer, is its
  disk failing under it (EIO after a page-cache loss): the process halts, as Kafka's
  LogManager halts a broker whose only log directory failed. Living on with a broken disk,
  it would stop heartbeating yet still answer metadata requests from its stale view, and
  clients that ask it first would never learn of the new leader.
- Outputs carried out in order:
  - `Reply` through its token; `Event` to the node's event log.
  - `Send` as a request with request.timeout.ms (a replica fetch one second more: it
    long-polls), whose answer or failure goes back to the machine.
  - `Persist` (controller): appended to the metadata log and fsynced on the event loop;
    nothing after it runs until the fsync returns.
  - `Sync` (broker): the log's durability job runs on the storage port, then `on_synced`.
- The broker's HWM checkpoint: at most one a second, one at a time, on the storage port. A
  storage job that fails halts the process, as Kafka halts on a failed log flush: the page
  cache may have dropped the data, so nothing may be acknowledged as durable any more.
- The start: a broker reads (and deletes) its clean-shutdown marker and its HWM checkpoint
  before it is built, records `broker-start`, and `log-recovery` for each log whose torn tail
  was cut off when it was opened.
- The controlled shutdown (SIGTERM): hand leadership away, ticking, for at most SHUTDOWN_S;
  close the storage port and let it drain; flush and close every log; write the marker;
  `broker-stop`; exit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from replication.broker import Broker, started_event
from replication.config import NodeConfig
from replication.controller import Controller
from replication.messages import FetchRequest
from replication.net import ConnectionLost
from replication.outputs import Event, Output, Persist, Reply, Send, Sync

TICK_S = 0.02
CHECKPOINT_MS = 1000  # the HWM checkpoint's period
SHUTDOWN_MS = 10_000  # how long a controlled shutdown may take to hand leadership away
FETCH_EXTRA_S = 1.0  # a replica fetch waits up to replica.fetch.wait.max.ms on the leader


class NodePort(Protocol):
    """What a node process needs from its world: the clock and timers, the network, the
    event log, the storage threads, and how the process fails and ends."""

    def now_ms(self) -> int:
        """The host's monotonic clock, in ms."""

    def call_later(self, delay_s: float, fn: Callable[..., None], *args: Any) -> Any:
        """Run fn after delay_s of the host's clock."""

    def soon(self, fn: Callable[..., None], *args: Any) -> None:
        """Run fn in a later turn of the event loop."""

    def request(self, address: str, msg: Any, timeout_s: float,
                answered: Callable[[Any], None]) -> None:
        """Send msg; answered(the reply, or a ConnectionLost) once, later."""

    def record(self, event: Event) -> None:
        """Append to the node's event log (events.jsonl)."""

    def fsync_blocks(self, resume: Callable[..., None], *args: Any) -> bool:
        """An fsync on the event loop has just been asked for. True: the loop is blocked and
        resume(*args) is called when it returns; False: it already returned."""

    def run_storage(self, job: Callable[[], None],
                    done: Callable[[BaseException | None], None]) -> None:
        """Run job on the storage threads; done(its exception or None) on the loop after."""

    def drain_storage(self, then: Callable[[], None]) -> None:
        """No more jobs will come: then() on the loop once every job given has finished."""

    def failed(self, where: str, exc: BaseException) -> None:
        """An exception escaped the state machine in `where` (tick, response, ...)."""

    def halt(self, what: str, exc: BaseException) -> None:
        """Exit at once with an error: `what` failed on the disk."""

    def exit(self) -> None:
        """The process ends (after a shutdown)."""

    def stepped(self, what: str, detail: Any = None) -> None:
        """The machine has taken a step (the simulator checks its invariants here)."""


class BrokerDisk(Protocol):
    """A broker's data directory: replication/broker_store.py, or the simulated disk."""

    def open_log(self, topic: str, partition: int) -> Any:
        """The partition's log, recovered; its `recovery_info` says what was cut off."""

    def read_and_delete_clean_marker(self) -> int | None: ...

    def write_clean_marker(self, broker_epoch: int) -> None: ...

    def read_hwm_checkpoint(self) -> dict[str, int]: ...

    def write_hwm_checkpoint(self, hwms: Mapping[str, int]) -> None: ...

    def close(self, clean: bool) -> None: ...


class MetadataDisk(Protocol):
    """The controller's metadata log: every record appended is fsynced before it returns."""

    def read_metadata(self) -> list[dict]: ...

    def append_metadata(self, record: dict) -> None: ...


class NodeDriver:
    """Drives one state machine through a port; ControllerDriver and BrokerDriver add theirs."""

    machine: Controller | Broker

    def __init__(self, port: NodePort, config: NodeConfig) -> None:
        self.port = port
        self.config = config
        self.request_timeout_s = config.request_timeout_ms / 1000
        self.ticking = False
        self.stopping = False

    # ---- carrying out outputs ------------------------------------------------------------------

    def carry_out(self, outputs: list[Output], start: int = 0) -> None:
        for i in range(start, len(outputs)):
            o = outputs[i]
            cls = o.__class__  # exact class tests: this is the hottest loop of a node
            if cls is Reply:
                o.token(o.msg)
            elif cls is Send:
                self._send(o.dest, o.msg)
            elif cls is Event:
                self.port.record(o)
            elif cls is Persist:
                self.persist(o.record)
                if self.port.fsync_blocks(self.carry_out, outputs, i + 1):
                    return
            elif cls is Sync:
                self.sync(o)
            else:
                raise TypeError(f"unknown output {o!r}")

    def persist(self, record: dict) -> None:
        raise NotImplementedError(f"this node does not persist metadata records: {record}")

    def sync(self, output: Sync) -> None:
        raise NotImplementedError(f"this node has no deferred storage: {output}")

    def address_of(self, dest: str | int) -> str | None:
        return None  # the controller only answers

    def _send(self, dest: str | int, msg: Any) -> None:
        address = self.address_of(dest)
        if address is None:
            self.port.soon(self.answered, dest, msg, ConnectionLost(f"no known address for {dest}"))
            return
        timeout = self.request_timeout_s
        if msg.__class__ is FetchRequest:
            timeout += FETCH_EXTRA_S
        self.port.request(address, msg, timeout, _Answer(self, dest, msg))

    def answered(self, dest: str | int, msg: Any, result: Any) -> None:
        """The answer to a request of ours, or its ConnectionLost, goes back to the machine."""
        try:
            if isinstance(result, ConnectionLost):
                outputs = self.machine.on_send_failed(dest, msg, self.port.now_ms())
            else:
                outputs = self.machine.on_response(dest, msg, result, self.port.now_ms())
            self.carry_out(outputs)
        except OSError as e:
            self.port.halt("response", e)
        except Exception as e:
            self.port.failed("response", e)
        self.port.stepped("answer", result)

    def handle(self, token: Callable[[Any], None], msg: Any) -> None:
        """A request arrived; token(reply) answers it. An I/O error halts the process; any
        other exception escapes to the server, which closes that connection."""
        try:
            self.carry_out(self.machine.handle(token, msg, self.port.now_ms()))
        except OSError as e:
            self.port.halt("request", e)

    # ---- life -----------------------------------------------------------------------------------

    def begin(self) -> None:
        """The listener is up: start the machine and the ticks."""
        self.started()
        self.port.stepped("start")
        self.ticking = True
        self._tick()

    def started(self) -> None:
        """What a node kind does once it listens."""

    def _tick(self) -> None:
        if not self.ticking:
            return
        try:
            self.carry_out(self.machine.tick(self.port.now_ms()))
            self.periodic()
        except OSError as e:
            self.ticking = False
            self.port.halt("tick", e)
            return
        except Exception as e:
            self.ticking = False
            self.port.failed("tick", e)
            self.port.stepped("tick")
            return
        self.port.stepped("tick")
        self.port.call_later(TICK_S, self._tick)

    def periodic(self) -> None:
        """Extra per-tick work of a node kind."""

    def request_stop(self) -> None:
        """SIGTERM: the node kind's shutdown, then exit."""
        if self.stopping:
            return
        self.stopping = True
        try:
            self.shutdown()
        except Exception as e:
            self.port.failed("shutdown", e)
            self.port.exit()

    def shutdown(self) -> None:
        self.port.exit()


class _Answer:
    """The callback of one request: its answer goes back to the driver."""

    __slots__ = ("driver", "dest", "msg")

    def __init__(self, driver: NodeDriver, dest: str | int, msg: Any) -> None:
        self.driver = driver
        self.dest = dest
        self.msg = msg

    def __call__(self, result: Any) -> None:
        self.driver.answered(self.dest, self.msg, result)


class ControllerDriver(NodeDriver):
    """The controller: its metadata log replayed at the start, each record fsynced."""

    def __init__(self, port: NodePort, config: NodeConfig, disk: MetadataDisk) -> None:
        super().__init__(port, config)
        self.disk = disk
        self.machine = Controller(config)
        records = disk.read_metadata()
        if records:
            now = port.now_ms()
            for record in records:
                self.machine.replay(record, now)
            self.machine.restarted(now)

    def persist(self, record: dict) -> None:
        self.disk.append_metadata(record)


class BrokerDriver(NodeDriver):
    """A broker: the storage port, the HWM checkpoint and the controlled shutdown.

    `advertise`: the address registered for peers and clients; `routes`: peer address -> the
    address this broker connects to it through (a proxy)."""

    def __init__(self, port: NodePort, config: NodeConfig, disk: BrokerDisk, broker_id: int,
                 advertise: str, controller: str, routes: Mapping[str, str] | None = None) -> None:
        super().__init__(port, config)
        self.disk = disk
        self.controller_address = controller
        self.routes = dict(routes or {})
        self.storage_open = True
        self._checkpoint_busy = False
        self._last_checkpoint = 0
        self._shutdown_deadline = 0
        clean_epoch = disk.read_and_delete_clean_marker()
        self.machine = Broker(broker_id, advertise, config, self._open_log, clean_epoch,
                              disk.read_hwm_checkpoint())
        self.machine.controller_address = controller
        port.record(started_event(clean_epoch))

    def _open_log(self, topic: str, partition: int) -> Any:
        log = self.disk.open_log(topic, partition)
        info = log.recovery_info
        if info.truncated_bytes:
            self.port.record(Event("log-recovery", {
                "topic": topic, "partition": partition, "truncated_bytes": info.truncated_bytes,
                "log_end_offset": log.end_offset, "reason": info.reason}))
        return log

    def address_of(self, dest: str | int) -> str | None:
        if dest == "controller":
            address: str | None = self.controller_address
        else:
            address = self.machine.broker_address(int(dest))
        if address is None or not self.routes:
            return address
        return self.routes.get(address, address)

    def started(self) -> None:
        self.carry_out(self.machine.start(self.port.now_ms()))

    # ---- the storage port ------------------------------------------------------------------------

    def sync(self, output: Sync) -> None:
        if self.storage_open:  # else shutting down: the final flush makes everything durable
            self.port.run_storage(output.job.run, _Synced(self, output))

    def synced(self, output: Sync, exc: BaseException | None) -> None:
        if exc is not None:
            self.port.halt(f"sync of {output.topic}-{output.partition}", exc)
            return
        try:
            self.carry_out(self.machine.on_synced(output.topic, output.partition, output.job,
                                                  self.port.now_ms()))
        except OSError as e:
            self.port.halt("synced", e)
        except Exception as e:
            self.port.failed("synced", e)
        self.port.stepped("synced", f"{output.topic}-{output.partition}")

    def periodic(self) -> None:
        now = self.port.now_ms()
        if now - self._last_checkpoint >= CHECKPOINT_MS and self.machine.replicas \
                and self.storage_open and not self._checkpoint_busy:
            self._last_checkpoint = now
            self._checkpoint_busy = True
            hwms = self.machine.hwm_snapshot()
            self.port.run_storage(lambda: self.disk.write_hwm_checkpoint(hwms),
                                  self._checkpoint_written)

    def _checkpoint_written(self, exc: BaseException | None) -> None:
        self._checkpoint_busy = False
        if exc is not None:
            self.port.halt("HWM checkpoint", exc)

    # ---- controlled shutdown ---------------------------------------------------------------------

    def shutdown(self) -> None:
        """Hand leadership away, ticking, for at most SHUTDOWN_MS (the tick keeps running
        alongside); then the storage port drains and _finish_shutdown."""
        self.machine.begin_shutdown()
        self._shutdown_deadline = self.port.now_ms() + SHUTDOWN_MS
        self._shutdown_step()

    def _shutdown_step(self) -> None:
        try:
            now = self.port.now_ms()
            if not self.machine.shutdown_ok and now < self._shutdown_deadline:
                self.carry_out(self.machine.tick(now))
                self.port.stepped("shutdown-tick")
                self.port.call_later(TICK_S, self._shutdown_step)
                return
        except Exception as e:
            self.port.failed("shutdown", e)
            self.port.exit()
            return
        self.storage_open = False
        self.port.drain_storage(self._finish_shutdown)

    def _finish_shutdown(self) -> None:
        """Flush and close every log, then the marker; a failure exits without it."""
        try:
            self.disk.close(clean=True)
            if self.machine.broker_epoch is not None:
                self.disk.write_clean_marker(self.machine.broker_epoch)
            self.port.record(Event("broker-stop", {"clean": True,
                                                   "controlled": self.machine.shutdown_ok}))
        except Exception as e:
            self.port.failed("shutdown", e)
        self.port.exit()


class _Synced:
    """The callback of one Sync's job."""

    __slots__ = ("driver", "output")

    def __init__(self, driver: BrokerDriver, output: Sync) -> None:
        self.driver = driver
        self.output = output

    def __call__(self, exc: BaseException | None) -> None:
        self.driver.synced(self.output, exc)
