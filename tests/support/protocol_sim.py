"""A deterministic in-process simulator for the sans-IO controller and brokers.

Messages (the typed ones of `replication.messages`, passed as objects) travel through one FIFO
queue, time is a counter, logs are `MemoryLog`s that can lose their unflushed suffix (power
loss). Same inputs, same run: the scenario tests and the property tests use it, and a failing
run can be replayed step by step.

Storage: by default the logs sync inline, as before the storage port existed. With
`sync_delay_ms` set, the logs defer their syncs (log.py, "Storage port") and the simulator
plays the broker runtime's storage thread: a `Sync` output's job runs `sync_delay_ms` later
(at the first step at or after that time), then the broker gets `on_synced`. A crash drops
the jobs not yet run (their records were never made durable); a power loss then loses them."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

from replication import errors as E
from replication.broker import Broker
from replication.config import NodeConfig
from replication.controller import Controller
from replication.messages import (
    ConsumerFetchReply,
    ConsumerFetchRequest,
    CreateTopicRequest,
    ErrorReply,
    Message,
    ProduceRequest,
    Request,
)
from replication.outputs import Event, Output, Persist, Reply, Send, Sync
from support.memory_log import MemoryLog


@dataclass
class ClientCall:
    """A client request in flight; `response` is set when the broker answers."""

    dest: int
    msg: Request
    response: Message | None = None


@dataclass
class Sim:
    n_brokers: int = 3
    config: NodeConfig = field(default_factory=NodeConfig)
    step_ms: int = 10
    sync_delay_ms: int | None = None  # None: logs sync inline; else how long a sync job takes

    def __post_init__(self) -> None:
        self.now = 0
        self.controller = Controller(self.config)
        self.metadata_log: list[dict] = []
        self.logs: dict[tuple[int, str, int], MemoryLog] = {}
        self.markers: dict[int, int | None] = {b: None for b in self.broker_ids}
        self.brokers: dict[int, Broker] = {}
        self.down: set[int] = set()
        self.controller_down = False
        self.cut: set[frozenset] = set()  # blocked links, as {a, b} with "controller" allowed
        self.events: list[dict] = []
        self.queue: deque = deque()
        self.syncing: list[tuple[int, int, Sync]] = []  # (due time, broker, output), in order
        self._ids = itertools.count()
        for b in self.broker_ids:
            self._boot(b)

    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, self.n_brokers + 1))

    # ---- node lifecycle ------------------------------------------------------------------------

    def _open_log(self, broker_id: int):
        def open_log(topic: str, partition: int) -> MemoryLog:
            key = (broker_id, topic, partition)
            if key not in self.logs:
                self.logs[key] = MemoryLog(flush_messages=self.config.flush_messages,
                                           flush_ms=self.config.flush_ms,
                                           defer_sync=self.sync_delay_ms is not None)
            return self.logs[key]
        return open_log

    def _boot(self, b: int) -> None:
        clean_epoch = self.markers.get(b)
        self.markers[b] = None  # start-up deletes the marker
        for (owner, _t, _p), log in self.logs.items():
            if owner == b:
                log.abandon_syncs()  # the jobs of the previous incarnation died with it
        broker = Broker(b, f"sim:{b}", self.config, self._open_log(b), clean_epoch)
        self.brokers[b] = broker
        self.down.discard(b)
        self._carry_out(("broker", b), broker.start(self.now))

    def crash(self, b: int, lose_unflushed: bool = False) -> int:
        """SIGKILL (page cache survives) or, with lose_unflushed, power loss. Returns records lost."""
        self.down.add(b)
        self.brokers.pop(b, None)
        self.syncing = [item for item in self.syncing if item[1] != b]
        lost = 0
        if lose_unflushed:
            for (owner, _t, _p), log in self.logs.items():
                if owner == b:
                    lost += log.lose_unflushed()
        return lost

    def restart(self, b: int) -> None:
        self._boot(b)

    def clean_shutdown(self, b: int, max_ms: int = 5000) -> None:
        broker = self.brokers[b]
        broker.begin_shutdown()
        self.run_until(lambda: broker.shutdown_ok, max_ms)
        for (owner, _t, _p), log in self.logs.items():
            if owner == b:
                log.flush()
        self.markers[b] = broker.broker_epoch
        self.down.add(b)
        self.brokers.pop(b, None)
        self.syncing = [item for item in self.syncing if item[1] != b]

    def restart_controller(self) -> None:
        """A new controller process replays the fsynced metadata log."""
        self.controller = Controller(self.config)
        for record in self.metadata_log:
            self.controller.replay(record, self.now)
        self.controller.restarted(self.now)

    def partition(self, a, b) -> None:
        self.cut.add(frozenset((a, b)))

    def heal(self) -> None:
        self.cut.clear()

    def isolate(self, b: int) -> None:
        for other in [*self.broker_ids, "controller"]:
            if other != b:
                self.partition(b, other)

    # ---- messaging ------------------------------------------------------------------------------

    def _reachable(self, src, dst) -> bool:
        if dst == "controller":
            ok = not self.controller_down
        else:
            ok = dst in self.brokers and dst not in self.down
        return ok and frozenset((src, dst)) not in self.cut

    def _carry_out(self, origin: tuple, outputs: list[Output]) -> None:
        name = "controller" if origin[0] == "controller" else origin[1]
        for o in outputs:
            if isinstance(o, Persist):
                self.metadata_log.append(o.record)
            elif isinstance(o, Event):
                self.events.append({"time": self.now, "node": name, "kind": o.kind, **o.fields})
            elif isinstance(o, Send):
                self.queue.append(("request", name, o.dest, o.msg))
            elif isinstance(o, Reply):
                self.queue.append(("reply", name, o.token, o.msg))
            elif isinstance(o, Sync):
                assert self.sync_delay_ms is not None, "a Sync from a log that syncs inline"
                self.syncing.append((self.now + self.sync_delay_ms, name, o))

    def _deliver(self, item) -> None:
        kind, src, target, msg = item
        if kind == "request":
            dest = target
            if not self._reachable(src, dest):
                self._fail(src, dest, msg)
                return
            token = (src, dest, msg)
            if dest == "controller":
                self._carry_out(("controller",), self.controller.handle(token, msg, self.now))
            else:
                self._carry_out(("broker", dest), self.brokers[dest].handle(token, msg, self.now))
            return
        token, response = target, msg
        if isinstance(token, ClientCall):
            token.response = response
            return
        requester, dest, request = token
        if requester in self.brokers and self._reachable(src, requester):
            self._carry_out(("broker", requester),
                            self.brokers[requester].on_response(dest, request, response, self.now))
        elif requester in self.brokers:
            self._fail(requester, dest, request)

    def _fail(self, src, dest, msg) -> None:
        if src in self.brokers:
            self._carry_out(("broker", src), self.brokers[src].on_send_failed(dest, msg, self.now))

    def _complete_syncs(self) -> None:
        """The storage thread: due jobs run, in order, and their brokers hear of it."""
        while self.syncing and self.syncing[0][0] <= self.now:
            _due, b, o = self.syncing.pop(0)
            o.job.run()
            if b in self.brokers:
                self._carry_out(("broker", b), self.brokers[b].on_synced(o.topic, o.partition, o.job, self.now))

    def step(self) -> None:
        self.now += self.step_ms
        self._complete_syncs()
        if not self.controller_down:
            self._carry_out(("controller",), self.controller.tick(self.now))
        for b in sorted(self.brokers):
            self._carry_out(("broker", b), self.brokers[b].tick(self.now))
        self._drain()

    def _drain(self) -> None:
        for _ in range(100_000):
            if not self.queue:
                break
            self._deliver(self.queue.popleft())

    def run(self, ms: int) -> None:
        for _ in range(max(1, ms // self.step_ms)):
            self.step()

    def run_until(self, predicate, max_ms: int = 10_000) -> bool:
        for _ in range(max(1, max_ms // self.step_ms)):
            if predicate():
                return True
            self.step()
        return predicate()

    # ---- clients ------------------------------------------------------------------------------------

    def call(self, dest: int, msg: Request) -> ClientCall:
        call = ClientCall(dest, msg)
        if self._reachable("client", dest):
            self._carry_out(("broker", dest), self.brokers[dest].handle(call, msg, self.now))
        else:
            call.response = ErrorReply(E.NETWORK_ERROR)
        self._drain()
        return call

    def state(self, topic: str = "t", partition: int = 0):
        return self.controller.partitions[(topic, partition)]

    def create_topic(self, topic: str = "t", partitions: int = 1, rf: int = 3, **config) -> None:
        self.run_until(lambda: len(self.controller.unfenced()) == self.n_brokers - len(self.down))
        request = CreateTopicRequest(topic, partitions, rf, {k: str(v) for k, v in config.items()})
        reply = self.controller.handle(None, request, self.now)
        self._carry_out(("controller",), [o for o in reply if not isinstance(o, Reply)])
        self.run(3 * self.config.broker_heartbeat_interval_ms)

    def produce(self, values: list[str], acks: str = "all", topic: str = "t", partition: int = 0,
                wait_ms: int = 3000) -> Message:
        """The leader's answer; NOT_LEADER_OR_FOLLOWER without a live leader, and
        REQUEST_TIMED_OUT (an unknown outcome) without an answer within wait_ms."""
        leader = self.state(topic, partition).leader
        if leader is None or leader not in self.brokers:
            return ErrorReply(E.NOT_LEADER, message="no live leader")
        call = self.call(leader, ProduceRequest(topic, partition, tuple(values), acks))
        self.run_until(lambda: call.response is not None, wait_ms)
        if call.response is None:
            return ErrorReply(E.REQUEST_TIMED_OUT, message=f"no answer within {wait_ms} ms")
        return call.response

    def consume(self, topic: str = "t", partition: int = 0) -> list[tuple[int, str]]:
        leader = self.state(topic, partition).leader
        if leader is None or leader not in self.brokers:
            raise RuntimeError("no leader to consume from")
        out: list[tuple[int, str]] = []
        while True:
            call = self.call(leader, ConsumerFetchRequest(topic, partition, len(out), max_records=1000))
            if not isinstance(call.response, ConsumerFetchReply):
                raise RuntimeError(f"consume from {leader}: {call.response}")
            if not call.response.records:
                return out
            out += list(call.response.records)
