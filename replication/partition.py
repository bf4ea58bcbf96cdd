"""One partition replica on a broker: leader and follower behaviour as a sans-IO state machine.

Leader: appends produce requests, tracks follower LEOs from their fetch offsets, advances the
high watermark as Kafka does (the minimum LEO over the ISR, a follower's LEO being the offset
of its last fetch -- "2. The replication algorithm" in Jack Vanlightly's "The Kafka
Replication Protocol with KIP-966" -- and, KIP-966, only while the ISR has at least MinISR
members), completes acks=all requests below it, shrinks and expands the ISR through
AlterPartition. Follower: pull-fetches from the leader and truncates a divergent suffix by
leader epoch (KIP-101, with KIP-320's epoch checks) or, pre-KIP-101, to its high watermark.

Storage: the log may defer its fsyncs to the runtime (`Log(defer_sync=True)`, see log.py).
Then only the log's *settled* prefix (`log.settled_end`: every sync the flush policy asked for
it has completed) is revealed to anyone: the leader counts its own LEO as the settled end for
the HWM, serves followers only settled records and acknowledges acks=1 produces once their
records are settled; a follower fetches again only when its log is settled (its fetch offset
tells the leader what it holds) and takes the leader's HWM only up to its settled end. The
runtime reports each finished job through `on_synced`. With a log that syncs inline the
settled end is always the LEO and none of this holds anything back."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from replication import errors as E
from replication.config import IsrUpdate, NodeConfig, ReplicaTruncation
from replication.log import Log, SyncJob
from replication.messages import (
    AlterPartitionReply,
    ConsumerFetchReply,
    ConsumerFetchRequest,
    DivergingReply,
    ErrorReply,
    FetchReply,
    FetchRequest,
    LogInfo,
    Message,
    ProduceReply,
)
from replication.messages import AlterPartitionRequest as AlterPartition
from replication.metadata import PartitionState
from replication.outputs import Event, Output, Reply, Send, Sync

# At most one log-progress event per replica this often (ms), when its log end or HWM moved:
# the appends summarised, for the trace checker (checkers/trace.py).
PROGRESS_MS = 200
# A failed AlterPartition send is sent again after this long, as Kafka's AlterPartition
# manager retries after retry.backoff.ms (100 ms by default).
ALTER_RETRY_MS = 100


class Role(StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"
    NONE = "none"


@dataclass
class PendingProduce:
    """A produce waiting for its acknowledgement: acks=all for the HWM to pass `last`,
    acks=1 (`local`) for the leader's log to settle past it."""

    token: object
    first: int
    last: int
    deadline: int
    local: bool = False


@dataclass
class ParkedFetch:
    token: object
    msg: FetchRequest
    deadline: int


@dataclass
class ParkedRead:
    """A consumer's long poll held until enough records are committed, or its deadline."""

    token: object
    msg: ConsumerFetchRequest
    deadline: int


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
        self.role = Role.NONE
        self.leader_epoch = -1
        # leader
        self.isr: tuple[int, ...] = ()  # the ISR the leader acts on
        self.follower_leo: dict[int, int] = {}
        self.last_caught_up: dict[int, int] = {}
        self.epoch_start = 0
        self.adding: tuple[int, ...] = ()  # followers proposed for the ISR, not yet answered
        # The pending AlterPartition (sent, or to send again after a failed send), if any.
        self.alter_request: AlterPartition | None = None
        self.alter_retry_at: int | None = None  # its send failed: when to send it again
        # Whether this incarnation's log is known to agree with a leader's: it leads, or a fetch
        # was answered without divergence. Until then the HWM read from the checkpoint may cover
        # records an unclean shutdown brought back (an unsynced truncation undone), which the
        # first fetch truncates away by leader epoch. Observers (the invariants) read it.
        self.reconciled = False
        self.pending: list[PendingProduce] = []
        self.parked: list[ParkedFetch] = []
        self.parked_reads: list[ParkedRead] = []
        # follower
        self.fetch_in_flight = False
        self.fetch_backoff_until = 0
        # What view_events last told: the partition state acted on (the object, then its
        # content), the leader's ISR view, and whether the log was reconciled.
        self._told_state_obj: PartitionState | None = None
        self._told_state: tuple | None = None
        self._told_isr: tuple | None = None
        self._told_reconciled = False
        # the last log-progress event: when, and the (log end, HWM) it reported
        self._progress_at: int | None = None
        self._progress_mark = (log.end_offset, self.hwm)

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
        candidates. Only `isr.update=local-first` acts on the uncommitted view: the race that
        AlterPartition (KIP-497) closed, where a leader acknowledges on an ISR the controller
        never committed."""
        isr, state = self.isr, self.state
        if state is None or self.config.isr_update == IsrUpdate.LOCAL_FIRST:
            return isr
        committed = state.isr
        if isr == committed:  # the usual case: nothing proposed, nothing to filter
            return isr
        return tuple(r for r in isr if r in committed)

    def _min_isr_met(self) -> bool:
        return len(self._quorum()) >= self.config.min_insync_replicas

    @property
    def alter_in_flight(self) -> bool:
        """An AlterPartition is pending: sent and unanswered, or to be sent again."""
        return self.alter_request is not None

    def view_events(self) -> list[Output]:
        """Events for the state a real run's trace cannot otherwise rebuild (checkers/trace.py),
        each said when it changes, so a step costs a few comparisons:

        - `partition-state`: the partition state this replica acts on (MetadataLogMatching);
        - `isr-view`: as leader, the ISR its HWM is computed over, the committed ISR it knows,
          and whether an AlterPartition is pending (ReplicationQuorumSuperset);
        - `reconciled`: as follower, its log was found to agree with the leader's (a fetch
          answered without divergence); LogMatching holds a restarted replica's checkpointed
          HWM to the others only from then on, as the simulator does (a leader's
          `become-leader` says the same)."""
        out: list[Output] = []
        s = self.state
        if s is not None and s is not self._told_state_obj:
            self._told_state_obj = s
            told = (s.partition_epoch, s.leader, s.leader_epoch, s.isr, s.elr, s.last_known_elr,
                    s.replicas)
            if told != self._told_state:
                self._told_state = told
                out.append(self._ev("partition-state", partition_epoch=s.partition_epoch,
                                    leader=s.leader, leader_epoch=s.leader_epoch, isr=list(s.isr),
                                    elr=list(s.elr), last_known_elr=list(s.last_known_elr),
                                    replicas=list(s.replicas)))
        if self.role == Role.LEADER:
            committed = s.isr if s is not None else None
            view = (self.leader_epoch, self.isr, committed, self.alter_in_flight)
            if view != self._told_isr:
                self._told_isr = view
                out.append(self._ev("isr-view", leader_epoch=self.leader_epoch, isr=list(self.isr),
                                    committed_isr=None if committed is None else list(committed),
                                    alter_pending=self.alter_in_flight))
        else:
            self._told_isr = None  # a later leadership is told afresh
        if self.reconciled != self._told_reconciled:
            self._told_reconciled = self.reconciled
            if self.role == Role.FOLLOWER:
                out.append(self._ev("reconciled", leader_epoch=self.leader_epoch))
        return out

    # ---- metadata ----------------------------------------------------------------------------

    def on_metadata(self, state: PartitionState, config: NodeConfig, now: int) -> list[Output]:
        self.config = config
        out: list[Output] = []
        if self.state is not None and state.partition_epoch < self.state.partition_epoch:
            return out
        previous, self.state = self.state, state
        if state.leader == self.broker_id:
            if self.role != Role.LEADER or state.leader_epoch != self.leader_epoch:
                out += self._become_leader(state, now)
            else:
                out += self._committed_isr(state, now)
        elif state.leader is not None:
            if self.role != Role.FOLLOWER or state.leader_epoch != self.leader_epoch or (
                    previous is not None and previous.leader != state.leader):
                out += self._become_follower(state, now)
        else:
            if self.role == Role.LEADER:
                out += self._resign(E.NOT_LEADER)
            self.role, self.leader_epoch = Role.NONE, state.leader_epoch
        return out

    def _become_leader(self, state: PartitionState, now: int) -> list[Output]:
        out = self._resign(E.NOT_LEADER) if self.role == Role.LEADER else []
        self.role, self.leader_epoch = Role.LEADER, state.leader_epoch
        self.reconciled = True
        # The epoch enters the epoch cache with its first record, not now: an entry without
        # records outlives a later truncation to the LEO (which removes nothing), so as a
        # follower this replica would report that empty epoch as its last fetched one and
        # be told to diverge forever, or meet older-epoch records it cannot append.
        self.epoch_start = self.log.end_offset
        self.isr = state.isr
        self.adding = ()
        self.alter_request, self.alter_retry_at = None, None
        self.follower_leo = {r: 0 for r in state.replicas if r != self.broker_id}
        self.last_caught_up = {r: now for r in state.replicas if r != self.broker_id}
        out.append(self._ev("become-leader", leader_epoch=state.leader_epoch, leader=self.broker_id,
                            log_end_offset=self.log.end_offset, hwm=self.hwm))
        out += self._advance_hwm(now)
        return out

    def _become_follower(self, state: PartitionState, now: int) -> list[Output]:
        out = self._resign(E.NOT_LEADER) if self.role == Role.LEADER else []
        self.role, self.leader_epoch = Role.FOLLOWER, state.leader_epoch
        self.fetch_in_flight = False
        self.fetch_backoff_until = 0
        out.append(self._ev("become-follower", leader_epoch=state.leader_epoch, leader=state.leader,
                            log_end_offset=self.log.end_offset, hwm=self.hwm))
        if self.config.replica_truncation == ReplicaTruncation.HIGH_WATERMARK:
            # Pre-KIP-101: trust the (possibly stale) local high watermark.
            out += self._truncate(self.hwm, "high-watermark")
        return out

    def _resign(self, error: str) -> list[Output]:
        """Leadership lost: appended-but-unacknowledged records may or may not survive."""
        out: list[Output] = [Reply(p.token, ErrorReply(error, appended=True)) for p in self.pending]
        out += [Reply(f.token, ErrorReply(error)) for f in self.parked]
        out += [Reply(r.token, ErrorReply(error)) for r in self.parked_reads]
        self.pending, self.parked, self.parked_reads = [], [], []
        self.role = Role.NONE
        return out

    def _committed_isr(self, state: PartitionState, now: int) -> list[Output]:
        """New committed metadata for our leadership (AlterPartition response or heartbeat)."""
        if self.config.isr_update == IsrUpdate.LOCAL_FIRST and self.alter_in_flight:
            return []
        if self.alter_retry_at is not None and state.partition_epoch > self.alter_request.partition_epoch:
            self._end_failed_alter()  # the controller has decided since: this metadata says what
        if self.alter_in_flight and self.adding:
            # Kafka's maximal ISR: a follower proposed for addition stays counted for the HWM
            # until the controller answers. Metadata that predates the proposal (a heartbeat
            # reply) must not drop it: the controller may already have committed it, and would
            # then elect a replica the HWM was computed without (ReplicationQuorumSuperset).
            self.isr = tuple(sorted({*state.isr, *self.adding}))
        else:
            self.isr = state.isr
        for r in state.isr:
            self.last_caught_up.setdefault(r, now)
        return self._advance_hwm(now) + self._fail_if_below_min_isr()

    # ---- leader: produce ---------------------------------------------------------------------

    def produce(self, token: object, values: list[bytes], acks: str, now: int) -> list[Output]:
        if self.role != Role.LEADER:
            return [Reply(token, self._not_leader())]
        if acks == "all" and not self._min_isr_met():
            return [Reply(token, ErrorReply(E.NOT_ENOUGH_REPLICAS))]
        first, last = self.log.append(self.leader_epoch, values, now)
        self.log.maybe_flush(now)
        out: list[Output] = []
        deadline = now + self.config.request_timeout_ms
        if acks == "1":
            if last < self.log.settled_end:
                out.append(Reply(token, self._ack(first)))
            else:  # the flush policy asked for a sync of these records: ack once it is done
                self.pending.append(PendingProduce(token, first, last, deadline, local=True))
        elif acks == "all":
            self.pending.append(PendingProduce(token, first, last, deadline))
        out += self._advance_hwm(now)
        out += self._wake_parked(now)
        return out

    def _ack(self, first: int) -> ProduceReply:
        return ProduceReply(first, self.leader_epoch, self.broker_id)

    def _not_leader(self) -> ErrorReply:
        return ErrorReply(E.NOT_LEADER, leader=self.state.leader if self.state else None)

    # ---- leader: fetch -----------------------------------------------------------------------

    def fetch(self, token: object, msg: FetchRequest | ConsumerFetchRequest, now: int) -> list[Output]:
        """A follower's (FetchRequest) or a consumer's fetch."""
        if self.role != Role.LEADER:
            return [Reply(token, self._not_leader())]
        if isinstance(msg, ConsumerFetchRequest):
            if msg.max_wait_ms and self._read_waits(msg):
                self.parked_reads.append(ParkedRead(token, msg, now + msg.max_wait_ms))
                return []
            return [Reply(token, self._consumer_fetch(msg))]
        assert isinstance(msg, FetchRequest), msg
        epoch = self.leader_epoch if msg.leader_epoch is None else msg.leader_epoch
        if epoch < self.leader_epoch:
            return [Reply(token, ErrorReply(E.FENCED_LEADER_EPOCH))]
        if epoch > self.leader_epoch:
            return [Reply(token, ErrorReply(E.UNKNOWN_LEADER_EPOCH))]
        offset = msg.offset
        if self.config.replica_truncation == ReplicaTruncation.LEADER_EPOCH and msg.last_fetched_epoch >= 0:
            e, end = self.log.end_offset_for_epoch(msg.last_fetched_epoch)
            if e != msg.last_fetched_epoch or end < offset:
                return [Reply(token, DivergingReply(e, end, self.hwm))]
        if offset > self.log.end_offset:
            return [Reply(token, ErrorReply(E.OFFSET_OUT_OF_RANGE, log_end_offset=self.log.end_offset))]
        out = self._follower_progress(msg.replica, offset, now)
        records = self._settled_records(offset)
        if not records and msg.wait:
            self.parked.append(ParkedFetch(token, msg, now + self.config.replica_fetch_wait_max_ms))
            return out
        out.append(Reply(token, self._fetch_reply(records)))
        return out

    def _settled_records(self, offset: int) -> list:
        """What a follower fetching from `offset` may get: settled records only."""
        limit = min(self.config.replica_fetch_max_records, self.log.settled_end - offset)
        return self.log.read(offset, limit) if limit > 0 else []

    def _fetch_reply(self, records: list) -> FetchReply:
        return FetchReply(tuple(records), self.hwm, self.leader_epoch)

    def _consumer_fetch(self, msg: ConsumerFetchRequest) -> ErrorReply | ConsumerFetchReply:
        refused = self._read_refused(msg)
        if refused is not None:
            return refused
        offset = msg.offset
        limit = min(_max_records(msg), self.hwm - offset)
        return ConsumerFetchReply(tuple(self.log.read_values(offset, limit)), self.hwm,
                                  self.log.end_offset, self.leader_epoch, self.broker_id)

    def _read_refused(self, msg: ConsumerFetchRequest) -> ErrorReply | None:
        """Why a consumer's read gets an error instead of records; None: it may read."""
        epoch = msg.leader_epoch
        if epoch is not None and epoch < self.leader_epoch:
            return ErrorReply(E.FENCED_LEADER_EPOCH)
        if epoch is not None and epoch > self.leader_epoch:
            # KIP-320: the client knows of a newer leader than we do; we may be a zombie.
            return ErrorReply(E.UNKNOWN_LEADER_EPOCH)
        if self.hwm < self.epoch_start or self.log.settled_end < self.hwm:
            # A new leader's HWM lags until its ISR has fetched up to where its epoch began;
            # serving reads before then could hide records the old leader had committed.
            # (And a log just opened serves nothing until recovery's sync has completed.)
            return ErrorReply(E.OFFSET_NOT_AVAILABLE, hwm=self.hwm)
        if msg.offset < 0 or msg.offset > self.hwm:
            return ErrorReply(E.OFFSET_OUT_OF_RANGE, hwm=self.hwm)
        return None

    def _read_waits(self, msg: ConsumerFetchRequest) -> bool:
        """A long poll that may read but finds fewer than its `min_records` committed yet."""
        short = self.hwm - msg.offset < min(msg.min_records, _max_records(msg))
        return short and self._read_refused(msg) is None

    def _wake_reads(self, now: int) -> list[Output]:
        """Answer the held long polls that have enough records, or an error, or no more time."""
        out: list[Output] = []
        still: list[ParkedRead] = []
        for r in self.parked_reads:
            if now >= r.deadline or not self._read_waits(r.msg):
                out.append(Reply(r.token, self._consumer_fetch(r.msg)))
            else:
                still.append(r)
        self.parked_reads = still
        return out

    def _follower_progress(self, replica: int, offset: int, now: int) -> list[Output]:
        """A fetch from `offset` confirms the follower holds everything below it (its LEO)."""
        self.follower_leo[replica] = offset
        if offset >= self.log.settled_end:
            self.last_caught_up[replica] = now
        out = self._maybe_expand(replica, now)
        out += self._advance_hwm(now)
        return out

    def _wake_parked(self, now: int) -> list[Output]:
        out: list[Output] = []
        still: list[ParkedFetch] = []
        for f in self.parked:
            records = self._settled_records(f.msg.offset) if f.msg.offset <= self.log.end_offset else []
            if records or now >= f.deadline:
                out.append(Reply(f.token, self._fetch_reply(records)))
            else:
                still.append(f)
        self.parked = still
        return out

    # ---- leader: high watermark and ISR --------------------------------------------------------

    def _leo_of(self, replica: int) -> int:
        return self.log.settled_end if replica == self.broker_id else self.follower_leo.get(replica, 0)

    def _advance_hwm(self, now: int) -> list[Output]:
        if self.role != Role.LEADER:
            return []
        if self.config.eligible_leader_replicas_enable and not self._min_isr_met():
            return []  # KIP-966: the HWM is frozen below MinISR
        me, isr = self.broker_id, self.isr
        members = isr if me in isr else (*isr, me)
        # min over _leo_of(r), the settled end computed once
        settled, leo = self.log.settled_end, self.follower_leo
        candidate = min([settled if r == me else leo.get(r, 0) for r in members])
        if candidate <= self.hwm:
            return []
        self.hwm = candidate
        if self.parked_reads:
            return self._complete_acks() + self._wake_reads(now)
        return self._complete_acks()

    def _complete_acks(self) -> list[Output]:
        def done(p: PendingProduce) -> bool:
            return p.last < (self.log.settled_end if p.local else self.hwm)
        ready = [p for p in self.pending if done(p)]
        if not ready:
            return []
        self.pending = [p for p in self.pending if not done(p)]
        # Kafka's checkEnoughReplicasReachOffset: an acks=all request the HWM has passed is
        # acknowledged only while the ISR meets MinISR. Without ELR the HWM moves when the ISR
        # shrinks (to the leader alone it jumps to the leader's log end), which says nothing
        # of how many replicas hold the records.
        enough = self._min_isr_met()
        return [Reply(p.token, self._ack(p.first) if p.local or enough
                      else ErrorReply(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, appended=True))
                for p in ready]

    def _fail_if_below_min_isr(self) -> list[Output]:
        failing = [p for p in self.pending if not p.local]
        if self._min_isr_met() or not failing:
            return []
        self.pending = [p for p in self.pending if p.local]
        return [Reply(p.token, ErrorReply(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, appended=True))
                for p in failing]

    def _maybe_expand(self, replica: int, now: int) -> list[Output]:
        if replica in self.isr or self.alter_in_flight or self.state is None:
            return []
        leo = self.follower_leo[replica]
        if leo >= self.hwm and leo >= self.epoch_start and leo >= self.log.settled_end:
            return self._propose_isr((*self.isr, replica), now)
        return []

    def _propose_isr(self, isr: tuple[int, ...], now: int) -> list[Output]:
        assert self.state is not None
        self.alter_request = AlterPartition(
            self.broker_id, self.broker_epoch, self.topic, self.partition, self.leader_epoch,
            self.state.partition_epoch, tuple(sorted(isr)))
        self.alter_retry_at = None
        out: list[Output] = [Send("controller", self.alter_request)]
        if self.config.isr_update == IsrUpdate.LOCAL_FIRST:
            # The pre-AlterPartition race: act on the proposed ISR before the controller
            # commits it.
            self.isr = tuple(sorted(isr))
            out += self._advance_hwm(now) + self._fail_if_below_min_isr()
        elif len(isr) > len(self.isr):
            # Kafka's "maximal ISR": count a joining follower at once (safe), a leaving one
            # only after the commit.
            self.adding = tuple(r for r in isr if r not in self.isr)
            self.isr = tuple(sorted(isr))
        return out

    def on_alter_response(self, response: AlterPartitionReply | ErrorReply, now: int) -> list[Output]:
        """The controller's answer to our AlterPartition: it carries the partition state it
        holds, committed or not changed, unless the request was rejected before it looked at
        the partition."""
        self.adding = ()
        self.alter_request, self.alter_retry_at = None, None
        match response:
            case AlterPartitionReply(state=new) | ErrorReply(state=PartitionState() as new):
                pass
            case _:
                return []
        if self.role != Role.LEADER:
            return []
        if self.state is None or new.partition_epoch >= self.state.partition_epoch:
            return self.on_metadata(new, self.config, now)
        return []

    def on_alter_failed(self, now: int) -> None:
        """The AlterPartition's send failed (connection lost, timed out). The controller may
        have committed it, so it stays pending, a joining follower still counted for the HWM
        (Kafka's maximal ISR), and is sent again after ALTER_RETRY_MS, as Kafka's
        AlterPartition manager does, until an answer, or metadata newer than the proposal
        (_committed_isr), ends it. Dropping it at once let a leader compute its HWM without a
        follower the controller had added (ReplicationQuorumSuperset, docs/invariants.md)."""
        if self.role == Role.LEADER and self.config.isr_update != IsrUpdate.LOCAL_FIRST:
            self.alter_retry_at = now + ALTER_RETRY_MS
            return
        self._end_failed_alter()

    def _end_failed_alter(self) -> None:
        self.adding = ()
        self.alter_request, self.alter_retry_at = None, None
        if self.state is not None and self.role == Role.LEADER:
            self.isr = self.state.isr

    def _retry_alter(self, now: int) -> list[Output]:
        if self.alter_retry_at is None or now < self.alter_retry_at:
            return []
        self.alter_retry_at = None
        return [Send("controller", self.alter_request)]

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
        if self.role != Role.FOLLOWER or self.fetch_in_flight or now < self.fetch_backoff_until:
            return []
        if self.log.settled_end < self.log.end_offset:
            return []  # the fetch offset would claim records whose sync has not completed
        assert self.state is not None and self.state.leader is not None
        self.fetch_in_flight = True
        return [Send(self.state.leader, FetchRequest(
            self.topic, self.partition, replica=self.broker_id, offset=self.log.end_offset,
            last_fetched_epoch=self.log.latest_epoch(), leader_epoch=self.leader_epoch))]

    def on_fetch_response(self, request: FetchRequest, response: Message, now: int) -> list[Output]:
        """The leader's answer to our fetch."""
        self.fetch_in_flight = False
        if self.role != Role.FOLLOWER or request.leader_epoch != self.leader_epoch:
            return []
        out: list[Output] = []
        match response:
            case ErrorReply(error=E.OFFSET_OUT_OF_RANGE, log_end_offset=int(leader_end)):
                out += self._truncate(leader_end, "out-of-range")
            case ErrorReply():
                self.fetch_backoff_until = now + 50
            case DivergingReply(epoch=epoch, end_offset=end):
                local_epoch, local_end = self.log.end_offset_for_epoch(epoch)
                target = min(end, local_end) if local_epoch >= 0 else 0
                if epoch < 0:
                    target = 0
                out += self._truncate(target, "leader-epoch")
            case FetchReply(records=records, hwm=hwm):
                self.reconciled = True
                if records and records[0].offset == self.log.end_offset:
                    latest = self.log.latest_epoch()
                    self.log.append_records(records)
                    self.log.maybe_flush(now)
                    if records[-1].epoch != latest:  # new epoch-cache entries
                        out += [self._ev("epoch-start", epoch=e, start_offset=o)
                                for e, o in self.log.epoch_entries() if e > latest]
                self.hwm = max(self.hwm, min(hwm, self.log.settled_end))
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
        if self.role == Role.LEADER:
            out += self._retry_alter(now) + self._maybe_shrink(now)
            expired = [p for p in self.pending if now >= p.deadline]
            if expired:
                self.pending = [p for p in self.pending if now < p.deadline]
                out += [Reply(p.token, ErrorReply(E.REQUEST_TIMED_OUT, appended=True)) for p in expired]
            out += self._wake_parked(now)
            if self.parked_reads:
                out += self._wake_reads(now)
        self.log.maybe_flush(now)
        if self._progress_at is None or now - self._progress_at >= PROGRESS_MS:
            mark = (self.log.end_offset, self.hwm)
            if mark != self._progress_mark or self._progress_at is None:
                self._progress_at, self._progress_mark = now, mark
                out.append(self._ev("log-progress", role=self.role.value, leader_epoch=self.leader_epoch,
                                    log_end_offset=mark[0], hwm=mark[1]))
        return out

    # ---- storage -------------------------------------------------------------------------------

    def sync_outputs(self) -> list[Output]:
        """The log's next durability job for the runtime, if it has one (deferred syncs only)."""
        job = self.log.take_sync_job()
        return [Sync(self.topic, self.partition, job)] if job is not None else []

    def on_synced(self, job: SyncJob, now: int) -> list[Output]:
        """The runtime finished `job`: what waited for the log to settle may go on."""
        self.log.sync_done(job)
        out: list[Output] = []
        if self.role == Role.LEADER:
            out += self._complete_acks()
            out += self._advance_hwm(now)
            out += self._wake_parked(now)
        out += self.next_fetch(now)
        return out

    def log_info(self) -> LogInfo:
        return LogInfo(self.topic, self.partition, self.log.latest_epoch(), self.log.end_offset)


def _max_records(msg: ConsumerFetchRequest) -> int:
    return 1000 if msg.max_records is None else msg.max_records
