"""Simulated node processes: the sans-IO Controller and Broker driven as replication/runtime.py
drives them, over the simulated network and disk, on the host's own clock.

One `NodeProcess` is one incarnation of a node's process (a restart makes a new one). Like
`NodeRuntime` it

- ticks the state machine every TICK_S (20 ms) of its own clock, starting when it begins to
  listen (a seeded start-up delay after `start`, so every node has its own tick phase);
- carries out outputs in order: `Reply` answers through the request's connection, `Event` goes
  to the world's event list, `Send` becomes a request on the node's own connection pool with
  the runtime's timeout (request.timeout.ms, one second more for a replica fetch) whose answer
  or failure (ConnectionLost, ConnectFailed) goes back to the machine;
- `Persist` (controller): the record is appended to the metadata log and fsynced on the event
  loop, as ControllerRuntime does: the process is blocked for one seeded fsync latency, and
  the outputs after the Persist (its reply) go out when the fsync returns;
- `Sync` (broker, the storage port): the log's durability job runs on the broker's storage
  queue -- one job at a time, in order, each taking a seeded fsync latency -- then the broker
  hears `on_synced`, as BrokerRuntime's storage thread does. The HWM checkpoint (every second)
  is written on the same queue. A job that meets a failed disk (EIO after a page-cache loss)
  halts the process, as the runtime's `os._exit(1)` does;
- treats an exception escaping the machine as the runtime's asyncio tasks would: in a request
  handler it closes that connection, in the tick loop it stops the ticks, in an answer it
  drops it; each is recorded in `World.node_errors`.

Processing takes no virtual time, except the fsyncs above.

The host clock is virtual time plus a seeded per-host offset (hosts do not agree on their
monotonic clocks), and can jump or drift (`World.clock_jump`, `clock_drift`). Every `now`
the machine sees and every timer of the process (ticks, request timeouts, the controlled
shutdown's deadline) follow it; the fsyncs take real (virtual) time. A paused process
(SIGSTOP) runs nothing: what arrives for it waits in arrival order, its timers wait, and on
resume the arrivals are handled first, then the timers that came due. A process blocked in an
fsync waits the same way.
"""

from __future__ import annotations

import heapq
import itertools
import traceback
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from replication.broker import Broker, started_event
from replication.controller import Controller
from replication.messages import FetchRequest
from replication.net import ConnectionLost
from replication.outputs import Event, Persist, Reply, Send, Sync
from simulation.disk import NodeDisk
from simulation.network import Network, Pool, Process, Stream, Timer

if TYPE_CHECKING:
    from simulation.world import World

TICK_S = 0.02  # replication/runtime.py's tick
CHECKPOINT_MS = 1000  # BrokerRuntime writes the HWM checkpoint at most this often
SHUTDOWN_S = 10.0  # BrokerRuntime.shutdown waits this long for the controlled shutdown


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


def _is_replica_fetch(msg: Any) -> bool:
    # An exact class test: isinstance against the Mapping-based messages goes through
    # ABCMeta.__instancecheck__, slow on this hot path.
    cls = msg.__class__
    if cls is FetchRequest:
        return True
    return cls is dict and msg.get("type") == "fetch"


class NodeProcess(Process):
    """One incarnation of a node's process; subclasses hold the state machine."""

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
        self.request_timeout_s = self.config.request_timeout_ms / 1000
        self.fsync_latency = world.fsync_latency(name)
        self.alive = True
        self.stopped = False  # SIGSTOP
        self.busy = False  # blocked in an fsync on the event loop
        self.paused = False  # either: nothing runs
        self.listening = False
        self.stopping = False
        self.ticker_dead = False
        self.pool = Pool(self.net, self)
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._armed_for = float("inf")  # the deadline the loop will wake us for
        self._gen = 0  # bumped to disown earlier wake-ups
        self._frozen: deque[tuple[Callable[..., None], tuple]] = deque()
        self.machine: Any = None

    # ---- clock and timers ------------------------------------------------------------------------

    def clock_now(self) -> float:
        return self.clock.at(self.loop._now)

    def now_ms(self) -> int:
        """What runtime.now_ms() returns on this host: its monotonic clock in ms."""
        c = self.clock
        return int((c.anchor + (self.loop._now - c.anchor_vt) * c.rate) * 1_000_000 + 0.5) // 1000

    def call_later(self, delay: float, fn: Callable[..., None], *args: Any) -> Timer:
        timer = Timer(fn, args)
        when = self.clock.at(self.loop._now) + delay
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
        now = self.loop._now
        self.loop.at(vt if vt > now else now, self._fire, self._gen)
        self._armed_for = when

    def _fire(self, gen: int) -> None:
        if gen != self._gen or not self.alive or self.paused:
            return
        self._armed_for = float("inf")
        heap = self._heap
        now = self.clock.at(self.loop._now) + 1e-9
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
        self.loop.at(self.loop._now, self.deliver, fn, *args)

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
        self.loop.at(self.loop._now + seconds, self._unblock, then, args)

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
        self.world._process_ended(self)
        self._stepped("exit")

    # ---- start-up ------------------------------------------------------------------------------------

    def boot(self) -> None:
        """Start the process: construct the node, listen, start, tick (runtime.run)."""
        try:
            self.construct()
        except Exception as e:  # the process exits with a traceback
            self._error("start", e)
            self.die()
            return
        self.net.listen(self)
        self.listening = True
        self.started()
        self._stepped("start")
        self._tick()

    def construct(self) -> None:
        raise NotImplementedError

    def started(self) -> None:
        """Hook run once the listener is up."""

    # ---- carrying out outputs ------------------------------------------------------------------------

    def carry_out(self, outputs: list, start: int = 0) -> None:
        for i in range(start, len(outputs)):
            o = outputs[i]
            cls = o.__class__
            if cls is Reply:
                o.token(o.msg)
            elif cls is Send:
                self._send(o.dest, o.msg)
            elif cls is Event:
                self.world._record_event(self, o.kind, o.fields)
            elif cls is Persist:
                self.persist(o.record)
                if self.fsync_latency is not None and self.alive:
                    # fsynced on the event loop: nothing else happens until it returns
                    self._block(self.fsync_latency(), self.carry_out, outputs, i + 1)
                    return
            elif cls is Sync:
                self.sync(o)
            else:
                raise TypeError(f"unknown output {o!r}")

    def persist(self, record: dict) -> None:
        raise NotImplementedError(f"this node does not persist metadata records: {record}")

    def sync(self, output: Any) -> None:
        raise NotImplementedError(f"this node has no deferred storage: {output}")

    def address_of(self, dest: str | int) -> str | None:
        raise NotImplementedError

    def _send(self, dest: str | int, msg: Any) -> None:
        address = self.address_of(dest)
        if address is None:
            self.soon(self._answered, dest, msg, ConnectionLost(f"no known address for {dest}"))
            return
        timeout = self.request_timeout_s + 1.0 if _is_replica_fetch(msg) else self.request_timeout_s
        self.pool.get(address).call(msg, timeout, _Answer(self, dest, msg))

    def _answered(self, dest: str | int, msg: Any, result: Any) -> None:
        try:
            if isinstance(result, ConnectionLost):
                outputs = self.machine.on_send_failed(dest, msg, self.now_ms())
            else:
                outputs = self.machine.on_response(dest, msg, result, self.now_ms())
            self.carry_out(outputs)
        except Exception as e:
            self._error("response", e)
        self._stepped("answer", result)

    def on_request(self, stream: Stream, rid: int | None, msg: Any) -> None:
        token = _Responder(self.net, stream, rid)
        monitor = self.world.monitor
        if monitor is not None:
            token = monitor.token(self, token, msg)
        try:
            self.carry_out(self.machine.handle(token, msg, self.now_ms()))
        except Exception as e:  # net.serve's handler dies: that connection is closed
            self._error("request", e)
            self.net.close_server_side(stream)
        if monitor is not None:
            monitor.stepped(self, "request", msg)

    def _tick(self) -> None:
        if self.ticker_dead:
            return
        try:
            self.carry_out(self.machine.tick(self.now_ms()))
            self.periodic()
        except Exception as e:  # the tick_loop task dies; the process lives on
            self.ticker_dead = True
            self._error("tick", e)
            self._stepped("tick")
            return
        self._stepped("tick")
        self.call_later(TICK_S, self._tick)

    def periodic(self) -> None:
        """Extra per-tick work of a node kind."""

    def _stepped(self, what: str, detail: Any = None) -> None:
        """The invariant monitor (simulation/invariants.py), if any, looks at what changed."""
        monitor = self.world.monitor
        if monitor is not None:
            monitor.stepped(self, what, detail)

    def _error(self, where: str, e: BaseException) -> None:
        self.world._node_error(self, where, e, traceback.format_exc())

    # ---- controlled shutdown (SIGTERM) -------------------------------------------------------------

    def request_stop(self) -> None:
        """SIGTERM: the runtime's shutdown hook, then exit (World learns it from die())."""
        if self.stopping or not self.alive:
            return
        self.stopping = True
        self.deliver(self._begin_shutdown)

    def _begin_shutdown(self) -> None:
        try:
            self.begin_shutdown()
        except Exception as e:
            self._error("shutdown", e)
            self.die()

    def begin_shutdown(self) -> None:
        self.die()


class _Answer:
    """The callback of a node's request: the answer goes back to the machine."""

    __slots__ = ("proc", "dest", "msg")

    def __init__(self, proc: NodeProcess, dest: str | int, msg: Any) -> None:
        self.proc = proc
        self.dest = dest
        self.msg = msg

    def __call__(self, result: Any) -> None:
        self.proc._answered(self.dest, self.msg, result)


class ControllerProcess(NodeProcess):
    label = "controller"

    def construct(self) -> None:
        """ControllerRuntime: replay the fsynced metadata log, then restart the sessions."""
        self.machine = Controller(self.config)
        now = self.now_ms()
        if self.disk.metadata:
            for record in self.disk.metadata:
                self.machine.replay(record, now)
            self.machine.restarted(now)

    def persist(self, record: dict) -> None:
        self.disk.append_metadata(record)

    def address_of(self, dest: str | int) -> str | None:
        return None  # the controller only answers


class BrokerProcess(NodeProcess):
    def __init__(self, world: World, name: str, broker_id: int) -> None:
        super().__init__(world, name)
        self.broker_id = broker_id
        self.label = broker_id
        self.controller_address = world.address(world.controller)
        self._last_checkpoint = 0
        self._checkpoint_busy = False
        # the storage thread: one job at a time, in order
        self._storage: deque[tuple[str, Any]] = deque()
        self._storage_running = False
        self.storage_open = True
        self._handing_over = True  # until the controlled shutdown's hand-over is done

    def construct(self) -> None:
        """BrokerRuntime: marker and checkpoint first, then the broker, then broker-start."""
        clean_epoch = self.disk.read_and_delete_clean_marker()
        checkpoint = dict(self.disk.hwm_checkpoint)
        self.machine = Broker(self.broker_id, self.address, self.config, self._open_log,
                              clean_epoch, checkpoint)
        self.machine.controller_address = self.controller_address
        event = started_event(clean_epoch)
        self.world._record_event(self, event.kind, event.fields)

    def _open_log(self, topic: str, partition: int):
        log, torn = self.disk.open_log(topic, partition)
        if torn:
            self.world._record_event(self, "log-recovery", {
                "topic": topic, "partition": partition, "truncated_bytes": torn,
                "log_end_offset": log.end_offset, "reason": "torn-tail"})
        return log

    def address_of(self, dest: str | int) -> str | None:
        if dest == "controller":
            return self.controller_address
        return self.machine.broker_address(int(dest))

    def started(self) -> None:
        self.carry_out(self.machine.start(self.now_ms()))

    # ---- the storage port ----------------------------------------------------------------------------

    def sync(self, output: Any) -> None:
        if self.storage_open:
            self._queue_storage("sync", output)

    def _queue_storage(self, kind: str, payload: Any) -> None:
        self._storage.append((kind, payload))
        if not self._storage_running:
            self._next_storage_job()

    def _next_storage_job(self) -> None:
        if not self._storage or not self.alive:
            self._storage_running = False
            if self.stopping and not self._handing_over and self.alive:
                self.deliver(self._maybe_finish_shutdown)
            return
        self._storage_running = True
        kind, payload = self._storage.popleft()
        latency = self.fsync_latency() if self.fsync_latency is not None else 0.0
        self.loop.at(self.loop._now + latency, self._storage_job_done, kind, payload)

    def _storage_job_done(self, kind: str, payload: Any) -> None:
        """The job's I/O finished (even if the process is stopped: the kernel did the work);
        the process hears of it when it runs."""
        if not self.alive:
            return
        if kind == "sync":
            log = payload.job.log
            if getattr(log, "eio", False):  # the descriptor failed with the page cache
                self.deliver(self._storage_failed, f"sync of {payload.topic}-{payload.partition}")
                return
            payload.job.run()
            self.deliver(self._synced, payload)
        else:
            self.disk.write_hwm_checkpoint(payload)  # a new file: unaffected by a lost cache
            self.deliver(self._checkpoint_written)

    def _synced(self, output: Any) -> None:
        try:
            self.carry_out(self.machine.on_synced(output.topic, output.partition, output.job,
                                                  self.now_ms()))
        except Exception as e:
            self._error("synced", e)
        self._stepped("synced", f"{output.topic}-{output.partition}")
        self._next_storage_job()

    def _checkpoint_written(self) -> None:
        self._checkpoint_busy = False
        self._next_storage_job()

    def _storage_failed(self, what: str) -> None:
        """BrokerRuntime._storage_failed: log and os._exit(1)."""
        self.world._node_error(self, "storage", OSError(5, f"{what} failed: Input/output error"), "")
        self.die()

    def periodic(self) -> None:
        now = self.now_ms()
        if now - self._last_checkpoint >= CHECKPOINT_MS and self.machine.replicas \
                and self.storage_open and not self._checkpoint_busy:
            self._last_checkpoint = now
            self._checkpoint_busy = True
            self._queue_storage("checkpoint", self.machine.hwm_snapshot())

    # ---- controlled shutdown -------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """BrokerRuntime.shutdown: hand leadership away (ticking meanwhile, for at most 10 s),
        let the storage queue drain, flush every log, write the marker, exit. The tick loop
        keeps running alongside."""
        self.machine.begin_shutdown()
        self._deadline = self.clock_now() + SHUTDOWN_S
        self._shutdown_step()

    def _shutdown_step(self) -> None:
        try:
            if not self.machine.shutdown_ok and self.clock_now() < self._deadline:
                self.carry_out(self.machine.tick(self.now_ms()))
                self._stepped("shutdown-tick")
                self.call_later(TICK_S, self._shutdown_step)
                return
        except Exception as e:
            self._error("shutdown", e)
            self.die()
            return
        self._handing_over = False
        self.storage_open = False
        self._maybe_finish_shutdown()

    def _maybe_finish_shutdown(self) -> None:
        if self._handing_over or self._storage_running or not self.alive:
            return  # the storage queue is still draining: called again when it is empty
        try:
            self.disk.close_logs_clean()  # BrokerStore.close(clean=True): flush, then close
            if self.machine.broker_epoch is not None:
                self.disk.write_clean_marker(self.machine.broker_epoch)
            self.world._record_event(self, "broker-stop", {"clean": True,
                                                           "controlled": self.machine.shutdown_ok})
        except Exception as e:  # the shutdown raised: the process exits without its marker
            self._error("shutdown", e)
        self.die()
