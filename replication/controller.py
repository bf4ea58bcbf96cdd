"""The controller as a sans-IO state machine.

It owns the cluster metadata (brokers, topics, partition states) and changes it only through
`replication.metadata`'s rules. Every change is a `Persist` record that the runtime fsyncs
before replying; replaying those records rebuilds the state after a restart.

Inputs: `handle(token, request, now)` for the typed requests of `replication.messages`,
`tick(now)`, and on restart `replay(record, now)` for each metadata-log record, then
`restarted(now)`. Outputs: `Reply`, `Event`, `Persist` (outputs.py).
Metadata-log records are plain dicts with a "type" (register, fence, unfence, topic,
partition): they are this node's file format, not wire messages."""

from __future__ import annotations

from dataclasses import dataclass, field

from replication import metadata as md
from replication.config import NodeConfig, RecoveryStrategy
from replication.errors import (
    FENCED_LEADER_EPOCH,
    INELIGIBLE_REPLICA,
    INVALID_REQUEST,
    INVALID_UPDATE_VERSION,
    NOT_LEADER,
    STALE_BROKER_EPOCH,
    TOPIC_EXISTS,
    UNKNOWN_BROKER,
    UNKNOWN_TOPIC,
)
from replication.messages import (
    AlterPartitionReply,
    AlterPartitionRequest,
    BrokerEntry,
    ClusterMetadata,
    CreateTopicReply,
    CreateTopicRequest,
    ErrorReply,
    HeartbeatReply,
    HeartbeatRequest,
    Message,
    MetadataReply,
    MetadataRequest,
    PartitionRef,
    RegisterReply,
    RegisterRequest,
    Request,
    invalid_request,
)
from replication.outputs import Event, Output, Persist, Reply

TOPIC_CONFIG_KEYS = ("min.insync.replicas", "unclean.leader.election.enable",
                     "eligible.leader.replicas.enable", "unclean.recovery.strategy")


@dataclass
class BrokerInfo:
    broker_id: int
    address: str
    broker_epoch: int
    fenced: bool = True
    shutting_down: bool = False
    last_heartbeat: int = 0  # ms, in-memory only


@dataclass
class Recovery:
    """An unclean recovery in progress for one partition: whose log end we asked for."""

    strategy: str
    targets: tuple[int, ...]
    started: int
    replies: dict[int, tuple[int, int]] = field(default_factory=dict)


class Controller:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, dict[str, str]] = {}
        self.partitions: dict[tuple[str, int], md.PartitionState] = {}
        self.version = 0
        self.recoveries: dict[tuple[str, int], Recovery] = {}
        self._manual_reported: set[tuple[str, int]] = set()
        self._batches = 0  # calls whose events went out as one batch (_batched)
        self._topic_configs: dict[str, tuple[dict[str, str], NodeConfig]] = {}  # topic_config

    # ---- persistence -------------------------------------------------------------------

    def replay(self, record: dict, now: int) -> None:
        """Apply a record from the metadata log (on restart) without producing outputs."""
        self._apply(record, now)

    def _apply(self, record: dict, now: int) -> None:
        match record["type"]:
            case "register":
                self.brokers[record["broker"]] = BrokerInfo(
                    record["broker"], record["address"], record["broker_epoch"], fenced=True,
                    last_heartbeat=now)
            case "fence":
                b = self.brokers[record["broker"]]
                b.fenced, b.shutting_down = True, record.get("shutting_down", False)
            case "unfence":
                self.brokers[record["broker"]].fenced = False
                self.brokers[record["broker"]].shutting_down = False
            case "topic":
                self.topics[record["topic"]] = dict(record["config"])
            case "partition":
                state = md.PartitionState.from_dict(record["state"])
                self.partitions[state.key] = state
            case kind:
                raise ValueError(f"unknown metadata record type {kind!r}")
        self.version += 1

    def _commit(self, record: dict, now: int, out: list[Output]) -> None:
        self._apply(record, now)
        out.append(Persist(record))

    def restarted(self, now: int) -> None:
        """After replay: sessions restart from now, so brokers are not fenced for the
        controller's own downtime."""
        for b in self.brokers.values():
            b.last_heartbeat = now

    # ---- helpers -----------------------------------------------------------------------

    def _batched(self, out: list[Output]) -> list[Output]:
        """The events of one call, numbered as one batch: `batch` (this process's count of
        calls that said anything) and `batch_size` (how many events it has). What one call
        commits is one atomic change of the metadata, as KRaft appends one operation's
        records as one batch: a broker fenced and its partitions moved out of the ISR, a last
        ISR member fenced and an unclean leader elected. Its events reach events.jsonl one
        fsync apart, with other nodes' events in between, so a trace must apply them together
        (checkers/trace.py) and never judge the state inside a batch."""
        at = [i for i, o in enumerate(out) if o.__class__ is Event]
        if not at:
            return out
        self._batches += 1
        for i in at:
            e = out[i]
            assert isinstance(e, Event)
            out[i] = Event(e.kind, {**e.fields, "batch": self._batches, "batch_size": len(at)})
        return out

    def topic_config(self, topic: str) -> NodeConfig:
        """The config with the topic's overrides, made again only when they differ from the
        last made for it: every tick asks for each partition's recovery strategy, and making
        a config copies and validates every field."""
        overrides = self.topics.get(topic, {})
        made = self._topic_configs.get(topic)
        if made is None or made[0] != overrides:
            made = self._topic_configs[topic] = (dict(overrides), self.config.with_overrides(overrides))
        return made[1]

    def rules(self, topic: str) -> md.Rules:
        cfg = self.topic_config(topic)
        return md.Rules(cfg.min_insync_replicas, cfg.eligible_leader_replicas_enable,
                        cfg.unclean_leader_election_enable,
                        cfg.unclean_recovery_strategy == RecoveryStrategy.LAST_LEADER)

    def strategy(self, topic: str) -> str:
        return self.topic_config(topic).unclean_recovery_strategy

    def unfenced(self) -> set[int]:
        return {b.broker_id for b in self.brokers.values() if not b.fenced}

    def _set_partition(self, change: md.Change, now: int, out: list[Output]) -> None:
        state = change.state
        self._commit({"type": "partition", "state": state.to_dict()}, now, out)
        out.append(Event("partition-change", {
            "topic": state.topic, "partition": state.partition, "leader": state.leader,
            "leader_epoch": state.leader_epoch, "partition_epoch": state.partition_epoch,
            "isr": list(state.isr), "elr": list(state.elr),
            "last_known_elr": list(state.last_known_elr), "replicas": list(state.replicas),
            "reason": change.reason}))
        if change.unclean_election:
            out.append(Event("unclean-election", {
                "topic": state.topic, "partition": state.partition, "leader": state.leader,
                "leader_epoch": state.leader_epoch, "potential_data_loss": True}))
        if state.leader is not None:
            self.recoveries.pop(state.key, None)

    def snapshot(self) -> ClusterMetadata:
        return ClusterMetadata(
            version=self.version,
            brokers={b.broker_id: BrokerEntry(b.address, b.fenced, b.broker_epoch)
                     for b in self.brokers.values()},
            topics={t: dict(c) for t, c in self.topics.items()},
            partitions=tuple(sorted(self.partitions.values(), key=lambda s: s.key)),
        )

    # ---- requests ----------------------------------------------------------------------

    def handle(self, token: object, request: Request, now: int) -> list[Output]:
        out: list[Output] = []
        match request:
            case MetadataRequest():
                reply: Message = MetadataReply(self.snapshot())
            case RegisterRequest():
                reply = self._on_register(request, now, out)
            case HeartbeatRequest():
                reply = self._on_heartbeat(request, now, out)
            case CreateTopicRequest():
                reply = self._on_create_topic(request, now, out)
            case AlterPartitionRequest():
                reply = self._on_alter_partition(request, now, out)
            case _:
                reply = invalid_request(f"unknown request {request.TYPE!r}")
        out.append(Reply(token, reply))
        return self._batched(out)

    def _on_register(self, msg: RegisterRequest, now: int, out: list[Output]) -> RegisterReply:
        broker_id = msg.broker
        clean = msg.clean_epoch is not None
        if broker_id in self.brokers and not self.brokers[broker_id].fenced:
            # A new incarnation: the old one must lose leadership and ISR membership first.
            self._fence(broker_id, "re-registration", now, out)
        epoch = self.version + 1
        self._commit({"type": "register", "broker": broker_id, "address": msg.address,
                      "broker_epoch": epoch, "clean": clean}, now, out)
        out.append(Event("broker-registered", {"broker": broker_id, "broker_epoch": epoch, "clean": clean}))
        for rec in self.recoveries.values():
            # A new incarnation may have lost the log it described: ask it again.
            rec.replies.pop(broker_id, None)
        if broker_id in self.brokers:
            self.brokers[broker_id].last_heartbeat = now
        if not clean:
            for key in sorted(self.partitions):
                state = self.partitions[key]
                if broker_id in state.replicas:
                    change = md.unclean_registration(state, broker_id, self.rules(state.topic))
                    if change:
                        self._set_partition(change, now, out)
        return RegisterReply(epoch)

    def _on_heartbeat(self, msg: HeartbeatRequest, now: int, out: list[Output]) -> Message:
        broker_id = msg.broker
        info = self.brokers.get(broker_id)
        if info is None:
            return ErrorReply(UNKNOWN_BROKER)
        if msg.broker_epoch != info.broker_epoch:
            return ErrorReply(STALE_BROKER_EPOCH)
        info.last_heartbeat = now
        for item in msg.log_info:
            rec = self.recoveries.get((item.topic, item.partition))
            if rec is not None and broker_id in rec.targets:
                rec.replies[broker_id] = (item.epoch, item.end_offset)
        if msg.want_shutdown:
            if not info.shutting_down or not info.fenced:
                self._fence(broker_id, "controlled-shutdown", now, out)
        elif info.fenced:
            self._commit({"type": "unfence", "broker": broker_id}, now, out)
            out.append(Event("broker-unfenced", {"broker": broker_id}))
            self._elect_leaderless(now, out)
        self._run_recoveries(now, out)
        asks = tuple(PartitionRef(*k) for k, rec in sorted(self.recoveries.items())
                     if broker_id in rec.targets and broker_id not in rec.replies)
        return HeartbeatReply(
            fenced=info.fenced, broker_epoch=info.broker_epoch,
            shutdown_ok=msg.want_shutdown and not any(s.leader == broker_id for s in self.partitions.values()),
            metadata=self.snapshot() if msg.metadata_version != self.version else None,
            log_info_requests=asks)

    def _on_create_topic(self, msg: CreateTopicRequest, now: int, out: list[Output]) -> Message:
        topic = msg.topic
        if topic in self.topics:
            return ErrorReply(TOPIC_EXISTS)
        config = dict(msg.config)
        unknown = set(config) - set(TOPIC_CONFIG_KEYS)
        if unknown:
            return ErrorReply(INVALID_REQUEST, message=f"unknown topic config {sorted(unknown)}")
        try:
            self.config.with_overrides(config)
            brokers = sorted(self.unfenced()) or sorted(self.brokers)
            placement = md.striped_placement(brokers, msg.partitions, msg.replication_factor)
        except ValueError as e:
            return ErrorReply(INVALID_REQUEST, message=str(e))
        self._commit({"type": "topic", "topic": topic, "config": config}, now, out)
        for p, replicas in enumerate(placement):
            state = md.PartitionState(topic, p, replicas, leader=replicas[0], isr=replicas)
            self._set_partition(md.Change(state, "create"), now, out)
        return CreateTopicReply(len(placement))

    def _on_alter_partition(self, msg: AlterPartitionRequest, now: int, out: list[Output]) -> Message:
        state = self.partitions.get((msg.topic, msg.partition))
        broker = self.brokers.get(msg.broker)
        if state is None:
            return ErrorReply(UNKNOWN_TOPIC)
        if broker is None or broker.broker_epoch != msg.broker_epoch:
            return ErrorReply(STALE_BROKER_EPOCH)
        if state.leader != broker.broker_id:
            return ErrorReply(NOT_LEADER, state=state)
        if msg.leader_epoch != state.leader_epoch:
            return ErrorReply(FENCED_LEADER_EPOCH, state=state)
        if msg.partition_epoch != state.partition_epoch:
            return ErrorReply(INVALID_UPDATE_VERSION, state=state)
        new_isr = list(msg.isr)
        if broker.broker_id not in new_isr or not set(new_isr) <= set(state.replicas):
            return ErrorReply(INVALID_REQUEST, state=state)
        added = set(new_isr) - set(state.isr)
        if added - self.unfenced():
            # Never let a fenced (possibly unclean) replica back in: Unclean Exclusion.
            return ErrorReply(INELIGIBLE_REPLICA, state=state)
        change = md.alter_isr(state, new_isr, self.rules(state.topic))
        if change.state != state:
            self._set_partition(change, now, out)
        return AlterPartitionReply(change.state)

    # ---- fencing, elections, recovery ----------------------------------------------------

    def tick(self, now: int) -> list[Output]:
        out: list[Output] = []
        timeout = self.config.broker_session_timeout_ms
        brokers = self.brokers  # keyed by broker id: sorted keys, no key function per tick
        for broker_id in sorted(brokers):
            b = brokers[broker_id]
            if not b.fenced and now - b.last_heartbeat > timeout:
                self._fence(broker_id, "session-timeout", now, out)
        self._run_recoveries(now, out)
        return self._batched(out)

    def _fence(self, broker_id: int, reason: str, now: int, out: list[Output]) -> None:
        self._commit({"type": "fence", "broker": broker_id,
                      "shutting_down": reason == "controlled-shutdown"}, now, out)
        out.append(Event("broker-fenced", {"broker": broker_id, "reason": reason}))
        unfenced = self.unfenced()
        for key in sorted(self.partitions):
            state = self.partitions[key]
            change = md.fence(state, broker_id, self.rules(state.topic), unfenced)
            if change:
                self._set_partition(change, now, out)
        self._elect_leaderless(now, out)

    def _elect_leaderless(self, now: int, out: list[Output]) -> None:
        unfenced = self.unfenced()
        for key in sorted(self.partitions):
            state = self.partitions[key]
            change = md.elect_if_leaderless(state, self.rules(state.topic), unfenced)
            if change:
                self._set_partition(change, now, out)

    def _recovery_targets(self, state: md.PartitionState, strategy: str) -> tuple[int, ...] | None:
        """Who to ask for log ends, or None when this partition needs no unclean recovery."""
        if state.leader is not None:
            return None
        rules = self.rules(state.topic)
        unfenced = self.unfenced()
        if strategy == RecoveryStrategy.BALANCED and rules.elr_enabled and not state.isr and not state.elr:
            return state.last_known_elr or state.replicas
        if strategy == RecoveryStrategy.PROACTIVE and md.pick_clean_leader(state, rules, unfenced) is None:
            return tuple(r for r in state.replicas if r in unfenced)
        return None

    def _run_recoveries(self, now: int, out: list[Output]) -> None:
        for key in sorted(self.partitions):
            state = self.partitions[key]
            if state.leader is not None:  # what the rest does for a led partition, every tick
                self.recoveries.pop(key, None)
                continue
            strategy = self.strategy(state.topic)
            if strategy == RecoveryStrategy.MANUAL and state.leader is None and not state.isr and not state.elr:
                if key not in self._manual_reported:
                    self._manual_reported.add(key)
                    out.append(Event("unclean-recovery", {
                        "topic": key[0], "partition": key[1], "strategy": "manual", "leader": None,
                        "leader_epoch": state.leader_epoch, "candidates": [], "complete": False,
                        "potential_data_loss": False, "waiting_for_operator": True}))
                continue
            targets = self._recovery_targets(state, strategy)
            if not targets:
                self.recoveries.pop(key, None)
                continue
            rec = self.recoveries.get(key)
            if rec is None or rec.targets != targets:
                self.recoveries[key] = rec = Recovery(strategy, targets, started=now)
            self._maybe_finish_recovery(state, rec, now, out)

    def _maybe_finish_recovery(self, state: md.PartitionState, rec: Recovery, now: int,
                               out: list[Output]) -> None:
        unfenced = self.unfenced()
        complete = set(rec.replies) >= set(rec.targets)
        if rec.strategy == RecoveryStrategy.BALANCED and not complete:
            return  # balanced waits for every LastKnownELR member: safety before liveness
        if rec.strategy == RecoveryStrategy.PROACTIVE and not complete and \
                now - rec.started < self.config.unclean_recovery_timeout_ms:
            return
        order = {b: i for i, b in enumerate(state.replicas)}

        def rank(b: int) -> tuple[int, int, int]:
            return (rec.replies[b][0], rec.replies[b][1], -order[b])

        # Balanced puts safety first: the best of all answers wins, so if its broker was fenced
        # since it answered, wait for it rather than elect a worse log. The others take the
        # best log still on an unfenced broker.
        pool = list(rec.replies) if rec.strategy == RecoveryStrategy.BALANCED else [
            b for b in rec.targets if b in rec.replies and b in unfenced]
        if not pool:
            return
        best = max(pool, key=rank)
        if best not in unfenced:
            return
        new_state = md.elect_recovered(state, best)
        self._set_partition(md.Change(new_state, f"unclean-recovery-{rec.strategy}"), now, out)
        out.append(Event("unclean-recovery", {
            "topic": state.topic, "partition": state.partition, "strategy": rec.strategy,
            "leader": best, "leader_epoch": new_state.leader_epoch,
            "candidates": [{"broker": b, "epoch": e, "end_offset": o} for b, (e, o) in sorted(rec.replies.items())],
            "complete": complete, "potential_data_loss": True}))
        self.recoveries.pop(state.key, None)


