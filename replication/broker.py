"""A broker as a sans-IO state machine: its controller session and its partition replicas.

The runtime feeds it requests (`handle`), answers to its own requests (`on_response`,
`on_send_failed`), clock ticks (`tick`) and, when its logs defer their fsyncs, the completion
of each durability job (`on_synced`), and carries out the outputs (`Reply`, `Send`, `Event`,
`Sync`; outputs.py). Messages are the typed ones of `replication.messages`. Logs come from an
injected factory so the same code runs over segment files or in memory.

Inputs and outputs a runtime must handle:

    start(now)                                  -> register with the controller
    handle(token, request, now)                 -> Reply(token, ...) now or later
    on_response(dest, request, response, now)   answers to our Sends
    on_send_failed(dest, request, now)          a Send that got no answer
    tick(now)                                   timers: heartbeats, fetches, ISR lag, flush.ms
    on_synced(topic, partition, job, now)       a `Sync` output's job has run (deferred logs)
    begin_shutdown()                            controlled shutdown; then watch `shutdown_ok`
"""

from __future__ import annotations

from collections.abc import Callable

from replication import errors as E
from replication.config import NodeConfig
from replication.log import Log, SyncJob
from replication.messages import (
    EMPTY_METADATA,
    ClusterMetadata,
    ConsumerFetchRequest,
    ErrorReply,
    FetchRequest,
    HeartbeatReply,
    HeartbeatRequest,
    LogInfo,
    Message,
    MetadataReply,
    MetadataRequest,
    ProduceRequest,
    RegisterReply,
    RegisterRequest,
    Request,
    invalid_request,
)
from replication.messages import AlterPartitionRequest as AlterPartition
from replication.outputs import Event, Output, Reply, Send, events_first
from replication.partition import Replica


class Broker:
    def __init__(self, broker_id: int, address: str, config: NodeConfig,
                 open_log: Callable[[str, int], Log], clean_epoch: int | None,
                 hwm_checkpoint: dict[str, int] | None = None) -> None:
        self.broker_id = broker_id
        self.address = address
        self.config = config
        self.open_log = open_log
        # unclean.shutdown.detection=false: claim a clean shutdown whatever happened.
        self.clean_epoch = clean_epoch if config.unclean_shutdown_detection else (clean_epoch or 0)
        self.hwm_checkpoint = hwm_checkpoint or {}
        self.broker_epoch: int | None = None
        self.registering = False
        self.heartbeat_in_flight = False
        self.next_heartbeat = 0
        self.fenced = True
        self.metadata: ClusterMetadata = EMPTY_METADATA
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.pending_log_info: list[LogInfo] = []
        self.want_shutdown = False
        self.shutdown_ok = False
        self.controller_address: str | None = None  # told to clients that want the controller

    # ---- controller session ------------------------------------------------------------------

    def start(self, now: int) -> list[Output]:
        self.registering = True
        return [Send("controller", RegisterRequest(self.broker_id, self.address, self.clean_epoch))]

    def begin_shutdown(self) -> None:
        self.want_shutdown = True
        self.next_heartbeat = 0

    def _heartbeat(self, now: int) -> list[Output]:
        if self.broker_epoch is None or self.heartbeat_in_flight or now < self.next_heartbeat:
            return []
        self.heartbeat_in_flight = True
        self.next_heartbeat = now + self.config.broker_heartbeat_interval_ms
        msg = HeartbeatRequest(self.broker_id, self.broker_epoch, self.want_shutdown,
                               self.metadata.version, tuple(self.pending_log_info))
        self.pending_log_info = []
        return [Send("controller", msg)]

    def on_response(self, dest: str | int, request: Request, response: Message,
                    now: int) -> list[Output]:
        out: list[Output] = []
        match request, response:
            case RegisterRequest(), RegisterReply(broker_epoch=epoch):
                self.registering = False
                self.broker_epoch = epoch
                self.next_heartbeat = 0
                out += self._heartbeat(now)
            case RegisterRequest(), _:
                self.registering = False
            case HeartbeatRequest(), _:
                out += self._on_heartbeat(response, now)
            case AlterPartition(topic=t, partition=p), _:
                if (replica := self.replicas.get((t, p))) is not None:
                    out += replica.on_alter_response(response, now)
            case FetchRequest(topic=t, partition=p), _:
                if (replica := self.replicas.get((t, p))) is not None:
                    out += replica.on_fetch_response(request, response, now) + replica.next_fetch(now)
        return self._observed(out + self._sync_outputs())

    def on_send_failed(self, dest: str | int, request: Request, now: int) -> list[Output]:
        match request:
            case RegisterRequest():
                self.registering = False
            case HeartbeatRequest(log_info=log_info):
                self.heartbeat_in_flight = False
                self.pending_log_info = list(log_info) + self.pending_log_info
            case AlterPartition(topic=t, partition=p):
                if (replica := self.replicas.get((t, p))) is not None:
                    replica.on_alter_failed(now)
            case FetchRequest(topic=t, partition=p):
                if (replica := self.replicas.get((t, p))) is not None:
                    replica.on_fetch_failed(now)
        return self._observed([])

    def _on_heartbeat(self, response: Message, now: int) -> list[Output]:
        self.heartbeat_in_flight = False
        match response:
            case ErrorReply(error=E.STALE_BROKER_EPOCH | E.UNKNOWN_BROKER):
                # The controller lost or replaced our registration: register again. This
                # process kept its data, so it is a clean registration.
                self.broker_epoch = None
                self.clean_epoch = self.clean_epoch if self.clean_epoch is not None else 0
                return self.start(now)
            case HeartbeatReply():
                pass
            case _:
                return []
        self.fenced = response.fenced
        out: list[Output] = []
        if response.metadata is not None:
            out += self.apply_metadata(response.metadata, now)
        for ask in response.log_info_requests:
            replica = self.replicas.get((ask.topic, ask.partition))
            # A log whose sync is under way answers once settled: the controller asks again
            # with every heartbeat until it has an answer.
            if replica is not None and replica.log.settled_end == replica.log.end_offset:
                self.pending_log_info.append(replica.log_info())
        if self.pending_log_info:
            self.next_heartbeat = 0
        if self.want_shutdown and response.shutdown_ok:
            self.shutdown_ok = True
        return out

    # ---- metadata --------------------------------------------------------------------------------

    def topic_config(self, topic: str) -> NodeConfig:
        return self.config.with_overrides(dict(self.metadata.topics.get(topic, {})))

    def apply_metadata(self, metadata: ClusterMetadata, now: int) -> list[Output]:
        self.metadata = metadata
        out: list[Output] = []
        for state in metadata.partitions:
            if self.broker_id not in state.replicas:
                continue
            replica = self.replicas.get(state.key)
            if replica is None:
                log = self.open_log(state.topic, state.partition)
                hwm = self.hwm_checkpoint.get(f"{state.topic}-{state.partition}", 0)
                replica = self.replicas[state.key] = Replica(self.broker_id, state.topic,
                                                             state.partition, log, hwm)
                out.append(Event("log-open", {
                    "topic": state.topic, "partition": state.partition,
                    "log_end_offset": log.end_offset, "hwm": replica.hwm,
                    "epochs": [list(e) for e in log.epoch_entries()]}))
            replica.broker_epoch = self.broker_epoch
            out += replica.on_metadata(state, self.topic_config(state.topic), now)
            out += replica.next_fetch(now)
        return out

    def broker_address(self, broker_id: int) -> str | None:
        info = self.metadata.brokers.get(broker_id)
        return info.address if info else None

    # ---- requests ----------------------------------------------------------------------------------

    def handle(self, token: object, request: Request, now: int) -> list[Output]:
        match request:
            case MetadataRequest():
                return [Reply(token, MetadataReply(self.metadata, self.broker_id, self.controller_address))]
            case ProduceRequest(topic=t, partition=p) | FetchRequest(topic=t, partition=p) | \
                    ConsumerFetchRequest(topic=t, partition=p):
                replica = self.replicas.get((t, p))
            case _:
                return [Reply(token, invalid_request(f"unknown request {request.TYPE!r}"))]
        if replica is None:
            return [Reply(token, ErrorReply(E.UNKNOWN_TOPIC))]
        if isinstance(request, ProduceRequest):
            latest = replica.log.latest_epoch()
            end = replica.log.end_offset
            out = replica.produce(token, request.value_bytes(), request.acks, now)
            if replica.log.latest_epoch() != latest:  # the leader's first record of its epoch
                out.append(Event("epoch-start", {"topic": replica.topic, "partition": replica.partition,
                                                 "epoch": replica.log.latest_epoch(), "start_offset": end}))
        else:
            out = replica.fetch(token, request, now)
        return events_first(replica.view_events(), out + replica.sync_outputs())

    def tick(self, now: int) -> list[Output]:
        out: list[Output] = []
        if self.broker_id is not None and self.broker_epoch is None and not self.registering:
            out += self.start(now)
        out += self._heartbeat(now)
        for replica in self.replicas.values():
            out += replica.tick(now)
            out += replica.next_fetch(now)
        return self._observed(out + self._sync_outputs())

    # ---- storage -------------------------------------------------------------------------------------

    def on_synced(self, topic: str, partition: int, job: SyncJob, now: int) -> list[Output]:
        """The runtime has carried out the `Sync` output for (topic, partition)'s `job`."""
        replica = self.replicas.get((topic, partition))
        if replica is None:
            return []
        return events_first(replica.view_events(), replica.on_synced(job, now) + replica.sync_outputs())

    def _sync_outputs(self) -> list[Output]:
        return [o for replica in self.replicas.values() for o in replica.sync_outputs()]

    def _observed(self, out: list[Output]) -> list[Output]:
        """`out` with every replica's view events (Replica.view_events) ahead of its sends."""
        views = [e for replica in self.replicas.values() for e in replica.view_events()]
        return events_first(views, out)

    def hwm_snapshot(self) -> dict[str, int]:
        """{"topic-partition": hwm} of every replica, for the runtime's HWM checkpoint."""
        return {f"{r.topic}-{r.partition}": r.hwm for r in self.replicas.values()}


def started_event(clean_epoch: int | None) -> Event:
    return Event("broker-start", {"clean_shutdown": clean_epoch is not None, "broker_epoch": clean_epoch})
