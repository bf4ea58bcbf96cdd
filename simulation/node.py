"""Simulated node processes: the node driver (replication/driver.py) over the simulated
network, disk and host clock.

One `NodeProcess` is one incarnation of a node's process (a restart makes a new one). It is the
driver's port, as replication/runtime.py's `Runtime` is on real hosts: what the process does
with its state machine (the tick, the outputs, the HWM checkpoint, the controlled shutdown,
the start-up and log-recovery events) is the driver's, the same code that runs on real hosts.
This module gives it:

- a clock and timers: the host clock is virtual time plus a seeded per-host offset (hosts do
  not agree on their monotonic clocks), and can jump or drift (`World.clock_jump`,
  `clock_drift`); every `now` the machine sees and every timer of the process (ticks, request
  timeouts, the controlled shutdown's deadline) follow it. The process starts listening after
  a seeded start-up delay, so every node has its own tick phase;
- requests on the node's own connection pool over the simulated network;
- the event log: the world's event list;
- the controller's metadata log, appended and fsynced on the event loop: the process is
  blocked for one seeded fsync latency, and the outputs after the Persist (its reply) go out
  when the fsync returns;
- the storage threads (a broker's storage port): one job at a time, in order, each taking a
  seeded fsync latency; a job that meets a failed disk (EIO after a page-cache loss) fails,
  and the driver halts the process, as the runtime's `os._exit(1)` does;
- what an exception escaping the machine does: in a request handler it closes that
  connection; elsewhere the driver reports it, and it is recorded in `World.node_errors`.

Processing takes no virtual time, except the fsyncs above; the fsyncs take real (virtual)
time whatever the clock does. A paused process (SIGSTOP) runs nothing: what arrives for it
waits in arrival order, its timers wait, and on resume the arrivals are handled first, then
the timers that came due. A process blocked in an fsync waits the same way.
"""

from __future__ import annotations

import heapq
import itertools
import traceback
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from replication.driver import BrokerDriver, ControllerDriver, NodeDriver
from replication.outputs import Event
from simulation.disk import NodeDisk
from simulation.network import Network, Pool, Process, Stream, Timer

if TYPE_CHECKING:
    from simulation.world import World


class HostClock:
    """A host's monotonic clock as a function of virtual time: base + t, jumps and drift."""

    def __init__(self, base_s: float) -> None:
        self.base = base_s
        self.anchor_vt = 0.0
        self.anchor = base_s
        self.rate = 1.0

    def at(self, vt: float) -> float:
        return self.anchor + (vt - self.anchor_vt) * self.rate

    def vt_of(self, t: float) -> float:
        return self.anchor_vt + (t - self.anchor) / self.rate

    def jump(self, vt: float, delta_s: float) -> None:
        self.anchor, self.anchor_vt = self.at(vt) + delta_s, vt

    def drift(self, vt: float, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"clock rate must be > 0, got {rate}")
        self.anchor, self.anchor_vt, self.rate = self.at(vt), vt, rate

    def reset(self, vt: float) -> None:
        self.anchor, self.anchor_vt, self.rate = self.base + vt, vt, 1.0


class _Responder:
    """The token of a request: calling it answers on the request's connection."""

    __slots__ = ("net", "stream", "rid")

    def __init__(self, net: Network, stream: Stream, rid: int | None) -> None:
        self.net = net
        self.stream = stream
        self.rid = rid

    def __call__(self, msg: Any) -> None:
        self.net.reply(self.stream, self.rid, msg)


class NodeProcess(Process):
    """One incarnation of a node's process, the port of its driver; subclasses build theirs."""

    label: str | int  # the "node" field of its events: "controller" or the broker id

    def __init__(self, world: World, name: str) -> None:
        super().__init__(name)
        self.world = world
        self.name = name
        self.loop = world.loop
        self.net: Network = world.net
        self.clock: HostClock = world.clocks[name]
        self.disk: NodeDisk = world.disks[name]
        self.address = world.address(name)
        self.config = world.node_config
        self.fsync_latency = world.fsync_latency(name)
        self.alive = True
        self.stopped = False  # SIGSTOP
        self.busy = False  # blocked in an fsync on the event loop
        self.paused = False  # either: nothing runs
        self.listening = False
        self.stopping = False
        self.pool = Pool(self.net, self)
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._armed_for = float("inf")  # the deadline the loop will wake us for
        self._gen = 0  # bumped to disown earlier wake-ups
        self._frozen: deque[tuple[Callable[..., None], tuple]] = deque()
        self.driver: NodeDriver | None = None
        # the storage threads: (job, done) waiting, whether one runs, who waits for the drain
        self._storage: deque[tuple[Callable[[], None], Callable[[BaseException | None], None]]] = deque()
        self._storage_running = False
        self._drained: Callable[[], None] | None = None

    # ---- clock and timers ------------------------------------------------------------------------

    def clock_now(self) -> float:
        return self.clock.at(self.loop.now)

    def now_ms(self) -> int:
        """What runtime.now_ms() returns on this host: its monotonic clock in ms."""
        c = self.clock
        return int((c.anchor + (self.loop.now - c.anchor_vt) * c.rate) * 1_000_000 + 0.5) // 1000

    def call_later(self, delay: float, fn: Callable[..., None], *args: Any) -> Timer:
        timer = Timer(fn, args)
        when = self.clock.at(self.loop.now) + delay
        heapq.heappush(self._heap, (when, next(self._seq), timer))
        if when < self._armed_for and not self.paused and self.alive:
            self._arm()
        return timer

    def _arm(self) -> None:
        self._gen += 1
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        if not heap:
            self._armed_for = float("inf")
            return
        when = heap[0][0]
        vt = self.clock.vt_of(when)
        now = self.loop.now
        self.loop.at(vt if vt > now else now, self._fire, self._gen)
        self._armed_for = when

    def _fire(self, gen: int) -> None:
        if gen != self._gen or not self.alive or self.paused:
            return
        # While the due timers run, a timer they make does not arm the loop (the tick makes
        # its next one each time): the _arm below does, once.
        self._armed_for = float("-inf")
        heap = self._heap
        now = self.clock.at(self.loop.now) + 1e-9
        while heap and heap[0][0] <= now:
            timer = heapq.heappop(heap)[2]
            if timer.cancelled:
                continue
            timer.fn(*timer.args)
            if not self.alive or self.paused:
                return
        self._arm()

    def clock_changed(self) -> None:
        """The host clock jumped or drifts differently: re-aim the next timer."""
        if self.alive and not self.paused:
            self._arm()

    # ---- running, stopped, blocked -----------------------------------------------------------------

    def deliver(self, fn: Callable[..., None], *args: Any) -> None:
        if not self.alive:
            return
        if self.paused:
            self._frozen.append((fn, args))
        else:
            fn(*args)

    def soon(self, fn: Callable[..., None], *args: Any) -> None:
        """Run in a later loop iteration, like work a runtime task does after it is spawned."""
        self.loop.at(self.loop.now, self.deliver, fn, *args)

    def _set_paused(self) -> None:
        was = self.paused
        self.paused = self.stopped or self.busy
        if self.paused and not was:
            self._gen += 1
            self._armed_for = float("inf")
        elif was and not self.paused:
            self._thaw()

    def _thaw(self) -> None:
        """Runnable again: what arrived meanwhile first, in order, then the timers."""
        frozen = self._frozen
        while frozen and self.alive and not self.paused:
            fn, args = frozen.popleft()
            fn(*args)
        if self.alive and not self.paused:
            self._arm()

    def pause(self) -> None:
        """SIGSTOP."""
        if self.alive and not self.stopped:
            self.stopped = True
            self._set_paused()

    def resume(self) -> None:
        """SIGCONT."""
        if self.alive and self.stopped:
            self.stopped = False
            self._set_paused()

    def _block(self, seconds: float, then: Callable[..., None], *args: Any) -> None:
        """The event loop is blocked (an fsync) for `seconds` of virtual time; then `then`."""
        self.busy = True
        self._set_paused()
        self.loop.at(self.loop.now + seconds, self._unblock, then, args)

    def _unblock(self, then: Callable[..., None], args: tuple) -> None:
        if not self.alive:
            return
        self.busy = False
        if self.stopped:  # the call returns only once the process runs again
            self._frozen.appendleft((then, args))
            self._set_paused()
            return
        then(*args)
        self._set_paused()
        if not self.paused and self._frozen:
            self._thaw()

    def die(self) -> None:
        """The process is gone (SIGKILL, power loss, exit): its sockets close, its timers and
        whatever waited for it vanish; its disk stays."""
        if not self.alive:
            return
        self.alive = False
        self.listening = False
        self._gen += 1
        self._heap.clear()
        self._frozen.clear()
        self.pool.drop()
        self.net.process_died(self)
        self.disk.process_died()
        self.world.process_ended(self)
        self.stepped("exit")

    # ---- start-up ------------------------------------------------------------------------------------

    def boot(self) -> None:
        """Start the process: construct the node, listen, then the driver starts the machine
        and its ticks (Runtime.run)."""
        try:
            self.driver = self.construct()
        except Exception as e:  # the process exits with a traceback
            self._error("start", e)
            self.die()
            return
        self.net.listen(self)
        self.listening = True
        self.driver.begin()

    def construct(self) -> NodeDriver:
        raise NotImplementedError

    @property
    def machine(self) -> Any:
        return self.driver.machine if self.driver is not None else None

    # ---- the driver's port: network, events, fsyncs, failures ----------------------------------------

    def request(self, address: str, msg: Any, timeout_s: float,
                answered: Callable[[Any], None]) -> None:
        self.pool.get(address).call(msg, timeout_s, answered)

    def record(self, event: Event) -> None:
        self.world.record_event(self, event.kind, event.fields)
        monitor = self.world.monitor
        if monitor is not None:
            monitor.recorded(self, event.kind, event.fields)

    def fsync_blocks(self, resume: Callable[..., None], *args: Any) -> bool:
        if self.fsync_latency is None or not self.alive:
            return False
        self._block(self.fsync_latency(), resume, *args)
        return True

    def run_storage(self, job: Callable[[], None],
                    done: Callable[[BaseException | None], None]) -> None:
        self._storage.append((job, done))
        if not self._storage_running:
            self._next_storage_job()

    def drain_storage(self, then: Callable[[], None]) -> None:
        if self._storage_running:
            self._drained = then  # called when the queue is empty
        else:
            then()

    def failed(self, where: str, exc: BaseException) -> None:
        self._error(where, exc)

    def halt(self, what: str, exc: BaseException) -> None:
        """Runtime.halt: log and os._exit(1)."""
        self.world.node_error(self, "storage", OSError(5, f"{what} failed: Input/output error"), "")
        self.die()

    def exit(self) -> None:
        self.die()

    def stepped(self, what: str, detail: Any = None) -> None:
        """The invariant monitor (simulation/invariants.py), if any, looks at what changed."""
        monitor = self.world.monitor
        if monitor is not None:
            monitor.stepped(self, what, detail)

    def _error(self, where: str, e: BaseException) -> None:
        self.world.node_error(self, where, e, traceback.format_exc())

    def on_request(self, stream: Stream, rid: int | None, msg: Any) -> None:
        token = _Responder(self.net, stream, rid)
        monitor = self.world.monitor
        if monitor is not None:
            token = monitor.token(self, token, msg)
        try:
            self.driver.handle(token, msg)
        except Exception as e:  # net.serve's handler dies: that connection is closed
            self._error("request", e)
            self.net.close_server_side(stream)
        if monitor is not None:
            monitor.stepped(self, "request", msg)

    # ---- the storage threads: one job at a time, in order, each one fsync long ----------------------

    def _next_storage_job(self) -> None:
        if not self._storage or not self.alive:
            self._storage_running = False
            drained, self._drained = self._drained, None
            if drained is not None and self.alive:
                self.deliver(drained)
            return
        self._storage_running = True
        job, done = self._storage.popleft()
        latency = self.fsync_latency() if self.fsync_latency is not None else 0.0
        self.loop.at(self.loop.now + latency, self._storage_job_ran, job, done)

    def _storage_job_ran(self, job: Callable[[], None],
                         done: Callable[[BaseException | None], None]) -> None:
        """The job's I/O finished (even if the process is stopped: the kernel did the work);
        the process hears of it when it runs, and the next job starts after that."""
        if not self.alive:
            return
        try:
            job()
        except OSError as e:  # a disk that failed with the page cache
            self.deliver(self._storage_job_done, done, e)
            return
        self.deliver(self._storage_job_done, done, None)

    def _storage_job_done(self, done: Callable[[BaseException | None], None],
                          exc: BaseException | None) -> None:
        done(exc)
        self._next_storage_job()

    # ---- controlled shutdown (SIGTERM) -------------------------------------------------------------

    def request_stop(self) -> None:
        """SIGTERM: the driver's shutdown, then exit (World learns it from die())."""
        if self.stopping or not self.alive:
            return
        self.stopping = True
        self.deliver(self.driver.request_stop)


class ControllerProcess(NodeProcess):
    label = "controller"

    def construct(self) -> NodeDriver:
        return ControllerDriver(self, self.config, self.disk.metadata_file())


class BrokerProcess(NodeProcess):
    def __init__(self, world: World, name: str, broker_id: int) -> None:
        super().__init__(world, name)
        self.broker_id = broker_id
        self.label = broker_id

    def construct(self) -> NodeDriver:
        return BrokerDriver(self, self.config, self.disk.broker_store(), self.broker_id, self.address,
                            self.world.address(self.world.controller))
