"""A deterministic in-process simulator for the sans-IO controller and brokers.

Messages travel through one FIFO queue, time is a counter, logs are `MemoryLog`s that can lose
their unflushed suffix (power loss). Same inputs, same run: the seed tests and the property
tests use it, and a failing run can be replayed step by step."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

from replication.broker import Broker
from replication.config import NodeConfig
from replication.controller import Controller
from replication.log import MemoryLog
from replication.outputs import Event, Output, Persist, Reply, Send


@dataclass
class ClientCall:
    """A client request in flight; `response` is set when the broker answers."""

    dest: int
    msg: dict
    response: dict | None = None


@dataclass
class Sim:
    n_brokers: int = 3
    config: NodeConfig = field(default_factory=NodeConfig)
    step_ms: int = 10

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
                                           flush_ms=self.config.flush_ms)
            return self.logs[key]
        return open_log

    def _boot(self, b: int) -> None:
        clean_epoch = self.markers.get(b)
        self.markers[b] = None  # start-up deletes the marker
        broker = Broker(b, f"sim:{b}", self.config, self._open_log(b), clean_epoch)
        self.brokers[b] = broker
        self.down.discard(b)
        self._carry_out(("broker", b), broker.start(self.now))

    def crash(self, b: int, lose_unflushed: bool = False) -> int:
        """SIGKILL (page cache survives) or, with lose_unflushed, power loss. Returns records lost."""
        self.down.add(b)
        self.brokers.pop(b, None)
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

    def step(self) -> None:
        self.now += self.step_ms
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

    def call(self, dest: int, msg: dict) -> ClientCall:
        call = ClientCall(dest, msg)
        if self._reachable("client", dest):
            self._carry_out(("broker", dest), self.brokers[dest].handle(call, msg, self.now))
        else:
            call.response = {"error": "NETWORK_ERROR"}
        self._drain()
        return call

    def state(self, topic: str = "t", partition: int = 0):
        return self.controller.partitions[(topic, partition)]

    def create_topic(self, topic: str = "t", partitions: int = 1, rf: int = 3, **config) -> None:
        self.run_until(lambda: len(self.controller.unfenced()) == self.n_brokers - len(self.down))
        reply = self.controller.handle(None, {"type": "create-topic", "topic": topic, "partitions": partitions,
                                              "replication_factor": rf, "config": config}, self.now)
        self._carry_out(("controller",), [o for o in reply if not isinstance(o, Reply)])
        self.run(3 * self.config.broker_heartbeat_interval_ms)

    def produce(self, values: list[str], acks: str = "all", topic: str = "t", partition: int = 0,
                wait_ms: int = 3000) -> dict:
        leader = self.state(topic, partition).leader
        if leader is None or leader not in self.brokers:
            return {"error": "NO_LEADER"}
        call = self.call(leader, {"type": "produce", "topic": topic, "partition": partition,
                                  "acks": acks, "values": values})
        self.run_until(lambda: call.response is not None, wait_ms)
        return call.response or {"error": "TIMEOUT"}

    def consume(self, topic: str = "t", partition: int = 0) -> list[tuple[int, str]]:
        leader = self.state(topic, partition).leader
        if leader is None or leader not in self.brokers:
            raise RuntimeError("no leader to consume from")
        out: list[tuple[int, str]] = []
        while True:
            call = self.call(leader, {"type": "fetch", "topic": topic, "partition": partition,
                                      "offset": len(out), "max_records": 1000})
            records = call.response["records"]
            if not records:
                return out
            out += [(o, v) for o, v in records]
