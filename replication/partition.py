"""One partition replica on a broker: leader and follower behaviour as a sans-IO state machine.

Leader: appends produce requests, tracks follower LEOs from their fetch offsets, advances the
high watermark exactly as seed 002's timeline (min LEO over the ISR, and -- KIP-966 -- only
while the ISR has at least MinISR members), completes acks=all requests below it, shrinks and
expands the ISR through AlterPartition. Follower: pull-fetches from the leader and truncates a
divergent suffix by leader epoch (or, pre-KIP-101, to its high watermark)."""

from __future__ import annotations

from dataclasses import dataclass

from replication import errors as E
from replication.config import NodeConfig
from replication.log import Log, Record
from replication.metadata import PartitionState
from replication.outputs import Event, Output, Reply, Send


@dataclass
class PendingProduce:
    token: object
    first: int
    last: int
    deadline: int


@dataclass
class ParkedFetch:
    token: object
    msg: dict
    deadline: int


def encode_records(records: list[Record]) -> list[list]:
    return [[r.offset, r.epoch, r.timestamp_ms, r.value.decode("latin-1")] for r in records]


def decode_records(rows: list[list]) -> list[Record]:
    return [Record(o, e, t, v.encode("latin-1")) for o, e, t, v in rows]


class Replica:
    def __init__(self, broker_id: int, topic: str, partition: int, log: Log, hwm: int = 0) -> None:
        self.broker_id = broker_id
        self.broker_epoch: int | None = None  # set by the broker once registered
        self.topic = topic
        self.partition = partition
        self.log = log
        self.hwm = min(hwm, log.end_offset)
        self.config = NodeConfig()
        self.state: PartitionState | None = None
        self.role = "none"  # leader | follower | none
        self.leader_epoch = -1
        # leader
        self.isr: tuple[int, ...] = ()  # the ISR the leader acts on
        self.follower_leo: dict[int, int] = {}
        self.last_caught_up: dict[int, int] = {}
        self.epoch_start = 0
        self.alter_in_flight = False
        self.pending: list[PendingProduce] = []
        self.parked: list[ParkedFetch] = []
        # follower
        self.fetch_in_flight = False
        self.fetch_backoff_until = 0

    # ---- helpers ---------------------------------------------------------------------------

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def _ev(self, kind: str, **fields) -> Event:
        return Event(kind, {"topic": self.topic, "partition": self.partition, **fields})

    def _quorum(self) -> tuple[int, ...]:
        """The ISR that counts towards MinISR. A follower the leader has only *proposed* to add
        ("maximal ISR") must not count: the controller may refuse it (a fenced broker is no
        leader candidate), and records committed with its help would then sit on too few
        candidates. Only `isr.update=local-first` acts on the uncommitted view (seed 004)."""
        if self.config.isr_update == "local-first" or self.state is None:
            return self.isr
        return tuple(r for r in self.isr if r in self.state.isr)

    def _min_isr_met(self) -> bool:
        return len(self._quorum()) >= self.config.min_insync_replicas

    # ---- metadata ----------------------------------------------------------------------------

    def on_metadata(self, state: PartitionState, config: NodeConfig, now: int) -> list[Output]:
        self.config = config
        out: list[Output] = []
        if self.state is not None and state.partition_epoch < self.state.partition_epoch:
            return out
        previous, self.state = self.state, state
        if state.leader == self.broker_id:
            if self.role != "leader" or state.leader_epoch != self.leader_epoch:
                out += self._become_leader(state, now)
            else:
                out += self._committed_isr(state, now)
        elif state.leader is not None:
            if self.role != "follower" or state.leader_epoch != self.leader_epoch or (
                    previous is not None and previous.leader != state.leader):
                out += self._become_follower(state, now)
        else:
            if self.role == "leader":
                out += self._resign(E.NOT_LEADER)
            self.role, self.leader_epoch = "none", state.leader_epoch
        return out

    def _become_leader(self, state: PartitionState, now: int) -> list[Output]:
        out = self._resign(E.NOT_LEADER) if self.role == "leader" else []
        self.role, self.leader_epoch = "leader", state.leader_epoch
        # The epoch enters the epoch cache with its first record, not now: an entry without
        # records outlives a later truncation to the LEO (which removes nothing), so as a
        # follower this replica would report that empty epoch as its last fetched one and
        # be told to diverge forever, or meet older-epoch records it cannot append.
        self.epoch_start = self.log.end_offset
        self.isr = state.isr
        self.alter_in_flight = False
        self.follower_leo = {r: 0 for r in state.replicas if r != self.broker_id}
        self.last_caught_up = {r: now for r in state.replicas if r != self.broker_id}
        out.append(self._ev("become-leader", leader_epoch=state.leader_epoch, leader=self.broker_id))
        out += self._advance_hwm(now)
        return out

    def _become_follower(self, state: PartitionState, now: int) -> list[Output]:
        out = self._resign(E.NOT_LEADER) if self.role == "leader" else []
        self.role, self.leader_epoch = "follower", state.leader_epoch
        self.fetch_in_flight = False
        self.fetch_backoff_until = 0
        out.append(self._ev("become-follower", leader_epoch=state.leader_epoch, leader=state.leader))
        if self.config.replica_truncation == "high-watermark":
            # Pre-KIP-101: trust the (possibly stale) local high watermark.
            out += self._truncate(self.hwm, "high-watermark")
        return out

    def _resign(self, error: str) -> list[Output]:
        """Leadership lost: appended-but-unacknowledged records may or may not survive."""
        out: list[Output] = [Reply(p.token, {"error": error, "appended": True}) for p in self.pending]
        out += [Reply(f.token, {"error": error}) for f in self.parked]
        self.pending, self.parked = [], []
        self.role = "none"
        return out

    def _committed_isr(self, state: PartitionState, now: int) -> list[Output]:
        """New committed metadata for our leadership (AlterPartition response or heartbeat)."""
        if self.config.isr_update == "local-first" and self.alter_in_flight:
            return []
        self.isr = state.isr
        for r in state.isr:
            self.last_caught_up.setdefault(r, now)
        return self._advance_hwm(now) + self._fail_if_below_min_isr()

    # ---- leader: produce ---------------------------------------------------------------------

    def produce(self, token: object, values: list[bytes], acks: str, now: int) -> list[Output]:
        if self.role != "leader":
            return [Reply(token, {"error": E.NOT_LEADER, "leader": self.state.leader if self.state else None})]
        if acks == "all" and not self._min_isr_met():
            return [Reply(token, {"error": E.NOT_ENOUGH_REPLICAS})]
        first, last = self.log.append(self.leader_epoch, values, now)
        self.log.maybe_flush(now)
        out: list[Output] = []
        if acks == "1":
            out.append(Reply(token, self._ack(first)))
        elif acks == "all":
            self.pending.append(PendingProduce(token, first, last, now + self.config.request_timeout_ms))
        out += self._advance_hwm(now)
        out += self._wake_parked(now)
        return out

    def _ack(self, first: int) -> dict:
        return {"offset": first, "leader_epoch": self.leader_epoch, "node": self.broker_id}

    # ---- leader: fetch -----------------------------------------------------------------------

    def fetch(self, token: object, msg: dict, now: int) -> list[Output]:
        if self.role != "leader":
            return [Reply(token, {"error": E.NOT_LEADER, "leader": self.state.leader if self.state else None})]
        replica = msg.get("replica")
        if replica is None:
            return [Reply(token, self._consumer_fetch(msg))]
        epoch = msg.get("leader_epoch", self.leader_epoch)
        if epoch < self.leader_epoch:
            return [Reply(token, {"error": E.FENCED_LEADER_EPOCH})]
        if epoch > self.leader_epoch:
            return [Reply(token, {"error": E.UNKNOWN_LEADER_EPOCH})]
        offset = int(msg["offset"])
        if self.config.replica_truncation == "leader-epoch" and msg.get("last_fetched_epoch", -1) >= 0:
            e, end = self.log.end_offset_for_epoch(msg["last_fetched_epoch"])
            if e != msg["last_fetched_epoch"] or end < offset:
                return [Reply(token, {"diverging": {"epoch": e, "end_offset": end}, "hwm": self.hwm})]
        if offset > self.log.end_offset:
            return [Reply(token, {"error": E.OFFSET_OUT_OF_RANGE, "log_end_offset": self.log.end_offset})]
        out = self._follower_progress(int(replica), offset, now)
        records = self.log.read(offset, self.config.replica_fetch_max_records)
        if not records and msg.get("wait", True):
            self.parked.append(ParkedFetch(token, msg, now + self.config.replica_fetch_wait_max_ms))
            return out
        out.append(Reply(token, self._fetch_reply(records)))
        return out

    def _fetch_reply(self, records: list[Record]) -> dict:
        return {"records": encode_records(records), "hwm": self.hwm, "leader_epoch": self.leader_epoch}

    def _consumer_fetch(self, msg: dict) -> dict:
        epoch = msg.get("leader_epoch")
        if epoch is not None and epoch < self.leader_epoch:
            return {"error": E.FENCED_LEADER_EPOCH}
        if epoch is not None and epoch > self.leader_epoch:
            # KIP-320: the client knows of a newer leader than we do; we may be a zombie.
            return {"error": E.UNKNOWN_LEADER_EPOCH}
        if self.hwm < self.epoch_start:
            # A new leader's HWM lags until its ISR has fetched up to where its epoch began;
            # serving reads before then could hide records the old leader had committed.
            return {"error": E.OFFSET_NOT_AVAILABLE, "hwm": self.hwm}
        offset = int(msg["offset"])
        if offset < 0 or offset > self.hwm:
            return {"error": E.OFFSET_OUT_OF_RANGE, "hwm": self.hwm}
        limit = min(int(msg.get("max_records", 1000)), self.hwm - offset)
        records = self.log.read(offset, limit)
        return {"records": [[r.offset, r.value.decode("latin-1")] for r in records], "hwm": self.hwm,
                "log_end_offset": self.log.end_offset, "leader_epoch": self.leader_epoch,
                "node": self.broker_id}

    def _follower_progress(self, replica: int, offset: int, now: int) -> list[Output]:
        """Seed 002: a fetch from `offset` confirms the follower holds everything below it."""
        self.follower_leo[replica] = offset
        if offset >= self.log.end_offset:
            self.last_caught_up[replica] = now
        out = self._maybe_expand(replica, now)
        out += self._advance_hwm(now)
        return out

    def _wake_parked(self, now: int) -> list[Output]:
        out: list[Output] = []
        still: list[ParkedFetch] = []
        for f in self.parked:
            records = self.log.read(int(f.msg["offset"]), self.config.replica_fetch_max_records) \
                if int(f.msg["offset"]) <= self.log.end_offset else []
            if records or now >= f.deadline:
                out.append(Reply(f.token, self._fetch_reply(records)))
            else:
                still.append(f)
        self.parked = still
        return out

    # ---- leader: high watermark and ISR --------------------------------------------------------

    def _leo_of(self, replica: int) -> int:
        return self.log.end_offset if replica == self.broker_id else self.follower_leo.get(replica, 0)

    def _advance_hwm(self, now: int) -> list[Output]:
        if self.role != "leader":
            return []
        if self.config.eligible_leader_replicas_enable and not self._min_isr_met():
            return []  # KIP-966: the HWM is frozen below MinISR
        members = self.isr if self.broker_id in self.isr else (*self.isr, self.broker_id)
        candidate = min(self._leo_of(r) for r in members)
        if candidate <= self.hwm:
            return []
        self.hwm = candidate
        return self._complete_acks()

    def _complete_acks(self) -> list[Output]:
        done = [p for p in self.pending if p.last < self.hwm]
        if not done:
            return []
        self.pending = [p for p in self.pending if p.last >= self.hwm]
        return [Reply(p.token, self._ack(p.first)) for p in done]

    def _fail_if_below_min_isr(self) -> list[Output]:
        if self._min_isr_met() or not self.pending:
            return []
        out = [Reply(p.token, {"error": E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, "appended": True})
               for p in self.pending]
        self.pending = []
        return out

    def _maybe_expand(self, replica: int, now: int) -> list[Output]:
        if replica in self.isr or self.alter_in_flight or self.state is None:
            return []
        leo = self.follower_leo[replica]
        if leo >= self.hwm and leo >= self.epoch_start and leo >= self.log.end_offset:
            return self._propose_isr((*self.isr, replica), now)
        return []

    def _propose_isr(self, isr: tuple[int, ...], now: int) -> list[Output]:
        assert self.state is not None
        self.alter_in_flight = True
        out: list[Output] = [Send("controller", {
            "type": "alter-partition", "broker": self.broker_id, "broker_epoch": self.broker_epoch,
            "topic": self.topic, "partition": self.partition,
            "leader_epoch": self.leader_epoch, "partition_epoch": self.state.partition_epoch,
            "isr": sorted(isr)})]
        if self.config.isr_update == "local-first":
            # Seed 004's race: act on the proposed ISR before the controller commits it.
            self.isr = tuple(sorted(isr))
            out += self._advance_hwm(now) + self._fail_if_below_min_isr()
        elif len(isr) > len(self.isr):
            # Kafka's "maximal ISR": count a joining follower at once (safe), a leaving one
            # only after the commit.
            self.isr = tuple(sorted(isr))
        return out

    def on_alter_response(self, response: dict, now: int) -> list[Output]:
        self.alter_in_flight = False
        state = response.get("state")
        if self.role != "leader" or state is None:
            return []
        new = PartitionState.from_dict(state)
        if self.state is None or new.partition_epoch >= self.state.partition_epoch:
            return self.on_metadata(new, self.config, now)
        return []

    def on_alter_failed(self) -> None:
        self.alter_in_flight = False
        if self.state is not None and self.role == "leader":
            self.isr = self.state.isr

    def _maybe_shrink(self, now: int) -> list[Output]:
        if self.alter_in_flight:
            return []
        lag = self.config.replica_lag_time_max_ms
        out_of_sync = {r for r in self.isr if r != self.broker_id
                       and now - self.last_caught_up.get(r, now) > lag}
        if not out_of_sync:
            return []
        return self._propose_isr(tuple(r for r in self.isr if r not in out_of_sync), now)

    # ---- follower ------------------------------------------------------------------------------

    def next_fetch(self, now: int) -> list[Output]:
        if self.role != "follower" or self.fetch_in_flight or now < self.fetch_backoff_until:
            return []
        assert self.state is not None and self.state.leader is not None
        self.fetch_in_flight = True
        return [Send(self.state.leader, {
            "type": "fetch", "topic": self.topic, "partition": self.partition,
            "replica": self.broker_id, "offset": self.log.end_offset,
            "last_fetched_epoch": self.log.latest_epoch(), "leader_epoch": self.leader_epoch})]

    def on_fetch_response(self, request: dict, response: dict, now: int) -> list[Output]:
        self.fetch_in_flight = False
        if self.role != "follower" or request.get("leader_epoch") != self.leader_epoch:
            return []
        out: list[Output] = []
        if "error" in response:
            if response["error"] == E.OFFSET_OUT_OF_RANGE and "log_end_offset" in response:
                out += self._truncate(response["log_end_offset"], "out-of-range")
            else:
                self.fetch_backoff_until = now + 50
            return out
        if "diverging" in response:
            epoch, end = response["diverging"]["epoch"], response["diverging"]["end_offset"]
            local_epoch, local_end = self.log.end_offset_for_epoch(epoch)
            target = min(end, local_end) if local_epoch >= 0 else 0
            if epoch < 0:
                target = 0
            out += self._truncate(target, "leader-epoch")
            return out
        records = decode_records(response.get("records", []))
        if records and records[0].offset == self.log.end_offset:
            self.log.append_records(records)
            self.log.maybe_flush(now)
        self.hwm = max(self.hwm, min(int(response.get("hwm", 0)), self.log.end_offset))
        return out

    def on_fetch_failed(self, now: int) -> None:
        self.fetch_in_flight = False
        self.fetch_backoff_until = now + 100

    def _truncate(self, offset: int, reason: str) -> list[Output]:
        before = self.log.end_offset
        removed = self.log.truncate_to(max(offset, 0))
        self.hwm = min(self.hwm, self.log.end_offset)
        if not removed:
            return []
        return [self._ev("truncate", from_offset=before, to_offset=self.log.end_offset,
                         removed=removed, reason=reason)]

    # ---- timers --------------------------------------------------------------------------------

    def tick(self, now: int) -> list[Output]:
        out: list[Output] = []
        if self.role == "leader":
            out += self._maybe_shrink(now)
            expired = [p for p in self.pending if now >= p.deadline]
            if expired:
                self.pending = [p for p in self.pending if now < p.deadline]
                out += [Reply(p.token, {"error": E.REQUEST_TIMED_OUT, "appended": True}) for p in expired]
            out += self._wake_parked(now)
        self.log.maybe_flush(now)
        return out

    def log_info(self) -> dict:
        return {"topic": self.topic, "partition": self.partition,
                "epoch": self.log.latest_epoch(), "end_offset": self.log.end_offset}
