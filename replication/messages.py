"""The wire messages, typed: one frozen dataclass per request and per kind of answer.

Every request a node or client sends and every answer it gets is one of these classes. The
state machines dispatch on them with `match`; `net.py` turns them into JSON frames and back
(`to_wire`, `decode_request`, a request's `reply_from_wire`). The JSON is the protocol's
(docs/formats.md does not fix it; this module does): a request is an object with a `"type"`
and its fields, an answer has no type (the requester knows what it asked) and is either an
error (`{"error": NAME, ...}`, names from `replication.errors`) or the request's success shape.

    request (type)      sent by -> to           success answer
    metadata            client -> any node      MetadataReply
    register            broker -> controller    RegisterReply
    heartbeat           broker -> controller    HeartbeatReply
    create-topic        client -> controller    CreateTopicReply
    alter-partition     leader -> controller    AlterPartitionReply
    produce             client -> leader        ProduceReply (none for acks=0)
    fetch + replica     follower -> leader      FetchReply | DivergingReply
    fetch, no replica   consumer -> leader      ConsumerFetchReply
    any                                         ErrorReply

Decoding is strict about what it needs and says what is wrong (`MalformedMessage`, which a
node answers with `INVALID_REQUEST`); integers may also arrive as decimal strings, as the
dict-based code accepted them.

Only `net.py` (and the simulator, copying a message as it would cross the wire) turns JSON
into messages; everything else handles the typed messages and reads their attributes. Two
messages are equal when they are of one class with equal fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from replication import errors as E
from replication.log import Record
from replication.metadata import PartitionState

try:  # msgspec converts a consumer fetch's records in C (_pairs); without it, Python does
    import msgspec
except ImportError:
    msgspec = None


class MalformedMessage(ValueError):
    """A frame or dict that is not a valid message (unknown type, missing or bad field)."""


# ---- the base ----------------------------------------------------------------------------------


class Message:
    """A wire message. A plain base class, not an ABC: the state machines match on these
    classes for every message, and isinstance against an ABCMeta class goes through
    `ABCMeta.__instancecheck__`, which costs several times a plain class's check."""

    def to_wire(self) -> dict:
        raise NotImplementedError


class Request(Message):
    TYPE: ClassVar[str]

    @classmethod
    def from_wire(cls, d: Mapping) -> Request:
        raise NotImplementedError

    @classmethod
    def reply_from_wire(cls, d: Mapping) -> Message:
        """Decode an answer to a request of this type."""
        raise NotImplementedError


def _msg(**kw):
    """A message class: a frozen dataclass, equal to another of its class with equal fields."""
    return dataclass(frozen=True, **kw)


# ---- field decoding ----------------------------------------------------------------------------


_MISSING: Any = object()


def _get(d: Mapping, key: str, what: str) -> Any:
    try:
        return d[key]
    except KeyError:
        raise MalformedMessage(f"{what}: missing field {key!r}") from None


def _int(d: Mapping, key: str, what: str, default: Any = _MISSING) -> int:
    if key not in d and default is not _MISSING:
        return default
    v = _get(d, key, what)
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            pass
    raise MalformedMessage(f"{what}: field {key!r} must be an integer, got {v!r}")


def _opt_int(d: Mapping, key: str, what: str) -> int | None:
    return None if d.get(key) is None else _int(d, key, what)


def _str(d: Mapping, key: str, what: str) -> str:
    v = _get(d, key, what)
    if not isinstance(v, str):
        raise MalformedMessage(f"{what}: field {key!r} must be a string, got {v!r}")
    return v


def _bool(d: Mapping, key: str, what: str, default: bool) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise MalformedMessage(f"{what}: field {key!r} must be true or false, got {v!r}")
    return v


def _list(d: Mapping, key: str, what: str, default: Any = _MISSING) -> list:
    v = d.get(key, default) if default is not _MISSING else _get(d, key, what)
    if not isinstance(v, (list, tuple)):
        raise MalformedMessage(f"{what}: field {key!r} must be a list, got {v!r}")
    return list(v)


def _ints(d: Mapping, key: str, what: str) -> tuple[int, ...]:
    items = _list(d, key, what)
    return tuple(_int({"item": v}, "item", f"{what}.{key}") for v in items)


def _mapping(v: Any, what: str) -> Mapping:
    if not isinstance(v, Mapping):
        raise MalformedMessage(f"{what}: expected an object, got {v!r}")
    return v


def _state(v: Any, what: str) -> PartitionState:
    try:
        return PartitionState.from_dict(_mapping(v, what))
    except (KeyError, TypeError, ValueError) as e:
        raise MalformedMessage(f"{what}: bad partition state {v!r}: {e}") from None


# ---- shared parts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerEntry:
    address: str
    fenced: bool
    broker_epoch: int


@dataclass(frozen=True)
class ClusterMetadata:
    """The controller's snapshot that brokers and clients see."""

    version: int
    brokers: Mapping[int, BrokerEntry] = field(default_factory=dict)
    topics: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    partitions: tuple[PartitionState, ...] = ()

    def to_wire(self) -> dict:
        return {
            "version": self.version,
            "brokers": {str(b): {"address": e.address, "fenced": e.fenced, "broker_epoch": e.broker_epoch}
                        for b, e in self.brokers.items()},
            "topics": {t: dict(c) for t, c in self.topics.items()},
            "partitions": [s.to_dict() for s in self.partitions],
        }

    @classmethod
    def from_wire(cls, v: Any) -> ClusterMetadata:
        d = _mapping(v, "metadata")
        try:
            brokers = {int(b): BrokerEntry(str(e["address"]), bool(e["fenced"]), int(e["broker_epoch"]))
                       for b, e in _mapping(d.get("brokers", {}), "metadata.brokers").items()}
        except (KeyError, TypeError, ValueError) as e:
            raise MalformedMessage(f"metadata: bad brokers entry: {e}") from None
        topics = {str(t): {str(k): str(x) for k, x in _mapping(c, f"metadata.topics.{t}").items()}
                  for t, c in _mapping(d.get("topics", {}), "metadata.topics").items()}
        partitions = tuple(_state(s, "metadata.partitions") for s in _list(d, "partitions", "metadata", []))
        return cls(_int(d, "version", "metadata"), brokers, topics, partitions)


EMPTY_METADATA = ClusterMetadata(version=-1)


@dataclass(frozen=True)
class LogInfo:
    """A replica's log end, for unclean recovery (GetReplicaLogInfo, piggybacked)."""

    topic: str
    partition: int
    epoch: int
    end_offset: int

    def to_wire(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "epoch": self.epoch,
                "end_offset": self.end_offset}

    @classmethod
    def from_wire(cls, v: Any) -> LogInfo:
        d = _mapping(v, "log_info")
        return cls(_str(d, "topic", "log_info"), _int(d, "partition", "log_info"),
                   _int(d, "epoch", "log_info"), _int(d, "end_offset", "log_info"))


@dataclass(frozen=True)
class PartitionRef:
    topic: str
    partition: int

    def to_wire(self) -> dict:
        return {"topic": self.topic, "partition": self.partition}

    @classmethod
    def from_wire(cls, v: Any) -> PartitionRef:
        d = _mapping(v, "partition reference")
        return cls(_str(d, "topic", "partition reference"), _int(d, "partition", "partition reference"))


def encode_records(records: Sequence[Record]) -> list[list]:
    return [[r.offset, r.epoch, r.timestamp_ms, r.value.decode("latin-1")] for r in records]


def decode_records(rows: Sequence) -> tuple[Record, ...]:
    try:
        return tuple(Record(int(o), int(e), int(t), v.encode("latin-1")) for o, e, t, v in rows)
    except (TypeError, ValueError, AttributeError) as e:
        raise MalformedMessage(f"fetch reply: bad records: {e}") from None


# ---- answers -----------------------------------------------------------------------------------


@_msg()
class ErrorReply(Message):
    """Any request's failure. `appended`: the records were written to the leader's log before
    the error, so the outcome is unknown. Optional context: the leader the replica knows
    (`leader`, with NOT_LEADER_OR_FOLLOWER), the partition state the controller holds
    (`state`), the replica's HWM or log end. None fields are absent on the wire."""

    error: str
    message: str | None = None
    appended: bool = False
    leader: int | None = None
    state: PartitionState | None = None
    hwm: int | None = None
    log_end_offset: int | None = None

    def to_wire(self) -> dict:
        d: dict = {"error": self.error}
        if self.message is not None:
            d["message"] = self.message
        if self.appended:
            d["appended"] = True
        if self.leader is not None:
            d["leader"] = self.leader
        if self.state is not None:
            d["state"] = self.state.to_dict()
        if self.hwm is not None:
            d["hwm"] = self.hwm
        if self.log_end_offset is not None:
            d["log_end_offset"] = self.log_end_offset
        return d

    @classmethod
    def from_wire(cls, d: Mapping) -> ErrorReply:
        what = "error reply"
        message = d.get("message")
        return cls(_str(d, "error", what), None if message is None else str(message),
                   _bool(d, "appended", what, False), _opt_int(d, "leader", what),
                   None if d.get("state") is None else _state(d["state"], what),
                   _opt_int(d, "hwm", what), _opt_int(d, "log_end_offset", what))

    @property
    def definite(self) -> bool:
        """The records (of a produce) were certainly not written."""
        return not self.appended and self.error in E.DEFINITE


def invalid_request(message: str) -> ErrorReply:
    return ErrorReply(E.INVALID_REQUEST, message=message)


def _or_error(d: Mapping, decode) -> Message:
    if not isinstance(d, Mapping):
        raise MalformedMessage(f"expected an object, got {d!r}")
    if "error" in d:
        return ErrorReply.from_wire(d)
    return decode(d)


@_msg()
class MetadataReply(Message):
    """`broker` and `controller` are set when a broker answers: its id and the controller's
    address it was given (clients find the controller through them)."""

    metadata: ClusterMetadata
    broker: int | None = None
    controller: str | None = None

    def to_wire(self) -> dict:
        d: dict = {"metadata": self.metadata.to_wire()}
        if self.broker is not None:
            d["broker"] = self.broker
            d["controller"] = self.controller
        return d

    @classmethod
    def from_wire(cls, d: Mapping) -> MetadataReply:
        controller = d.get("controller")
        return cls(ClusterMetadata.from_wire(_get(d, "metadata", "metadata reply")),
                   _opt_int(d, "broker", "metadata reply"), None if controller is None else str(controller))


@_msg()
class RegisterReply(Message):
    broker_epoch: int

    def to_wire(self) -> dict:
        return {"broker_epoch": self.broker_epoch}


@_msg()
class HeartbeatReply(Message):
    fenced: bool
    broker_epoch: int
    shutdown_ok: bool
    metadata: ClusterMetadata | None = None  # only when the broker's version is not current
    log_info_requests: tuple[PartitionRef, ...] = ()

    def to_wire(self) -> dict:
        d: dict = {"fenced": self.fenced, "broker_epoch": self.broker_epoch, "shutdown_ok": self.shutdown_ok}
        if self.metadata is not None:
            d["metadata"] = self.metadata.to_wire()
        if self.log_info_requests:
            d["log_info_requests"] = [r.to_wire() for r in self.log_info_requests]
        return d

    @classmethod
    def from_wire(cls, d: Mapping) -> HeartbeatReply:
        what = "heartbeat reply"
        return cls(_bool(d, "fenced", what, True), _int(d, "broker_epoch", what),
                   _bool(d, "shutdown_ok", what, False),
                   None if d.get("metadata") is None else ClusterMetadata.from_wire(d["metadata"]),
                   tuple(PartitionRef.from_wire(r) for r in _list(d, "log_info_requests", what, [])))


@_msg()
class CreateTopicReply(Message):
    partitions: int

    def to_wire(self) -> dict:
        return {"partitions": self.partitions}


@_msg()
class AlterPartitionReply(Message):
    """The partition state after the change (unchanged if there was nothing to change)."""

    state: PartitionState

    def to_wire(self) -> dict:
        return {"state": self.state.to_dict()}


@_msg()
class ProduceReply(Message):
    """Acknowledged: the offset of the first record, in the leader's epoch, by broker `node`
    (offset None: acks=0, nothing was acknowledged)."""

    offset: int | None
    leader_epoch: int | None
    node: int | None

    def to_wire(self) -> dict:
        return {"offset": self.offset, "leader_epoch": self.leader_epoch, "node": self.node}

    @classmethod
    def from_wire(cls, d: Mapping) -> ProduceReply:
        what = "produce reply"
        return cls(_opt_int(d, "offset", what), _opt_int(d, "leader_epoch", what), _opt_int(d, "node", what))


@_msg()
class FetchReply(Message):
    """A follower's fetch: records from its offset (maybe none), the leader's HWM and epoch."""

    records: tuple[Record, ...]
    hwm: int
    leader_epoch: int

    def to_wire(self) -> dict:
        return {"records": encode_records(self.records), "hwm": self.hwm, "leader_epoch": self.leader_epoch}


@_msg()
class DivergingReply(Message):
    """KIP-101/KIP-320: the follower's last fetched epoch ends at `end_offset` on the leader
    (`epoch` is the largest epoch the leader knows at or below it)."""

    epoch: int
    end_offset: int
    hwm: int

    def to_wire(self) -> dict:
        return {"diverging": {"epoch": self.epoch, "end_offset": self.end_offset}, "hwm": self.hwm}


@_msg()
class ConsumerFetchReply(Message):
    """Records below the HWM as (offset, value) pairs, values as latin-1 text."""

    records: tuple[tuple[int, str], ...]
    hwm: int
    log_end_offset: int
    leader_epoch: int
    node: int

    def to_wire(self) -> dict:
        return {"records": [[o, v] for o, v in self.records], "hwm": self.hwm,
                "log_end_offset": self.log_end_offset, "leader_epoch": self.leader_epoch, "node": self.node}

    @classmethod
    def from_wire(cls, d: Mapping) -> ConsumerFetchReply:
        what = "fetch reply"
        return cls(_pairs(_list(d, "records", what), what), _int(d, "hwm", what),
                   _int(d, "log_end_offset", what), _int(d, "leader_epoch", what),
                   _int(d, "node", what))


_PAIRS = tuple[tuple[int, str], ...]


def _pairs(rows: list, what: str) -> _PAIRS:
    """A consumer fetch's records, (offset, value) pairs. msgspec converts rows that are all
    [int, str] pairs, as the nodes write them, in C: the workload decodes every record both
    consumers read (several times what it sends), and int() and str() of each in Python took
    longer than the frame's whole JSON decoding, and 2.3x msgspec's conversion. Other rows
    get int() and str(), as before, and their error."""
    if msgspec is not None:
        try:
            return msgspec.convert(rows, _PAIRS)
        except msgspec.ValidationError:
            pass
    try:
        return tuple((int(o), str(v)) for o, v in rows)
    except (TypeError, ValueError) as e:
        raise MalformedMessage(f"{what}: bad records: {e}") from None


# ---- requests ----------------------------------------------------------------------------------


@_msg()
class MetadataRequest(Request):
    TYPE = "metadata"

    def to_wire(self) -> dict:
        return {"type": self.TYPE}

    @classmethod
    def from_wire(cls, d: Mapping) -> MetadataRequest:
        return cls()

    @classmethod
    def reply_from_wire(cls, d: Mapping) -> Message:
        return _or_error(d, MetadataReply.from_wire)


@_msg()
class RegisterRequest(Request):
    """`clean_epoch`: the broker epoch of the clean-shutdown marker found at start, or None."""

    TYPE = "register"
    broker: int
    address: str
    clean_epoch: int | None

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "broker": self.broker, "address": self.address,
                "clean_epoch": self.clean_epoch}

    @classmethod
    def from_wire(cls, d: Mapping) -> RegisterRequest:
        return cls(_int(d, "broker", cls.TYPE), _str(d, "address", cls.TYPE), _opt_int(d, "clean_epoch", cls.TYPE))

    @classmethod
    def reply_from_wire(cls, d: Mapping) -> Message:
        return _or_error(d, lambda d: RegisterReply(_int(d, "broker_epoch", "register reply")))


@_msg()
class HeartbeatRequest(Request):
    TYPE = "heartbeat"
    broker: int
    broker_epoch: int | None
    want_shutdown: bool = False
    metadata_version: int = -1
    log_info: tuple[LogInfo, ...] = ()

    def to_wire(self) -> dict:
        d: dict = {"type": self.TYPE, "broker": self.broker, "broker_epoch": self.broker_epoch,
                   "want_shutdown": self.want_shutdown, "metadata_version": self.metadata_version}
        if self.log_info:
            d["log_info"] = [i.to_wire() for i in self.log_info]
        return d

    @classmethod
    def from_wire(cls, d: Mapping) -> HeartbeatRequest:
        t = cls.TYPE
        return cls(_int(d, "broker", t), _opt_int(d, "broker_epoch", t), _bool(d, "want_shutdown", t, False),
                   _int(d, "metadata_version", t, -1),
                   tuple(LogInfo.from_wire(i) for i in _list(d, "log_info", t, [])))

    @classmethod
    def reply_from_wire(cls, d: Mapping) -> Message:
        return _or_error(d, HeartbeatReply.from_wire)


@_msg()
class CreateTopicRequest(Request):
    TYPE = "create-topic"
    topic: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "topic": self.topic, "partitions": self.partitions,
                "replication_factor": self.replication_factor, "config": dict(self.config)}

    @classmethod
    def from_wire(cls, d: Mapping) -> CreateTopicRequest:
        t = cls.TYPE
        config = _mapping(d.get("config") or {}, f"{t}.config")
        return cls(_str(d, "topic", t), _int(d, "partitions", t), _int(d, "replication_factor", t),
                   {str(k): str(v) for k, v in config.items()})

    @classmethod
    def reply_from_wire(cls, d: Mapping) -> Message:
        return _or_error(d, lambda d: CreateTopicReply(_int(d, "partitions", "create-topic reply")))


@_msg()
class AlterPartitionRequest(Request):
    """The leader's proposed ISR, checked against its broker, leader and partition epochs."""

    TYPE = "alter-partition"
    broker: int
    broker_epoch: int | None
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "broker": self.broker, "broker_epoch": self.broker_epoch,
                "topic": self.topic, "partition": self.partition, "leader_epoch": self.leader_epoch,
                "partition_epoch": self.partition_epoch, "isr": list(self.isr)}

    @classmethod
    def from_wire(cls, d: Mapping) -> AlterPartitionRequest:
        t = cls.TYPE
        return cls(_int(d, "broker", t), _opt_int(d, "broker_epoch", t), _str(d, "topic", t),
                   _int(d, "partition", t), _int(d, "leader_epoch", t), _int(d, "partition_epoch", t),
                   _ints(d, "isr", t))

    @classmethod
    def reply_from_wire(cls, d: Mapping) -> Message:
        return _or_error(d, lambda d: AlterPartitionReply(_state(_get(d, "state", "alter-partition reply"),
                                                                 "alter-partition reply")))


@_msg()
class ProduceRequest(Request):
    """Values are text on the wire (stored UTF-8 encoded); in-process callers may pass bytes."""

    TYPE = "produce"
    topic: str
    partition: int
    values: tuple[str | bytes, ...]
    acks: str = "all"

    def to_wire(self) -> dict:
        return {"type": self.TYPE, "topic": self.topic, "partition": self.partition,
                "acks": self.acks, "values": list(self.values)}

    @classmethod
    def from_wire(cls, d: Mapping) -> ProduceRequest:
        t = cls.TYPE
        values = _list(d, "values", t)
        if not all(isinstance(v, (str, bytes)) for v in values):
            raise MalformedMessage(f"{t}: field 'values' must be a list of strings")
        return cls(_str(d, "topic", t), _int(d, "partition", t), tuple(values), str(d.get("acks", "all")))

    def value_bytes(self) -> list[bytes]:
        return [v.encode() if isinstance(v, str) else bytes(v) for v in self.values]

    @classmethod
    def reply_from_wire(cls, d: Mapping) -> Message:
        return _or_error(d, ProduceReply.from_wire)


@_msg()
class FetchRequest(Request):
    """A follower's fetch from its log end. `leader_epoch` None: the leader's own (unchecked);
    `wait` False: answer at once even with no records (Kafka would park the fetch)."""

    TYPE = "fetch"
    topic: str
    partition: int
    replica: int
    offset: int
    last_fetched_epoch: int = -1
    leader_epoch: int | None = None
    wait: bool = True

    def to_wire(self) -> dict:
        d: dict = {"type": self.TYPE, "topic": self.topic, "partition": self.partition,
                   "replica": self.replica, "offset": self.offset,
                   "last_fetched_epoch": self.last_fetched_epoch}
        if self.leader_epoch is not None:
            d["leader_epoch"] = self.leader_epoch
        if not self.wait:
            d["wait"] = False
        return d

    @classmethod
    def from_wire(cls, d: Mapping) -> FetchRequest:
        t = cls.TYPE
        return cls(_str(d, "topic", t), _int(d, "partition", t), _int(d, "replica", t),
                   _int(d, "offset", t), _int(d, "last_fetched_epoch", t, -1),
                   _opt_int(d, "leader_epoch", t), _bool(d, "wait", t, True))

    @classmethod
    def reply_from_wire(cls, d: Mapping) -> Message:
        def ok(d: Mapping) -> Message:
            if "diverging" in d:
                div = _mapping(d["diverging"], "diverging")
                return DivergingReply(_int(div, "epoch", "diverging"), _int(div, "end_offset", "diverging"),
                                      _int(d, "hwm", "fetch reply", 0))
            return FetchReply(decode_records(_list(d, "records", "fetch reply", [])),
                              _int(d, "hwm", "fetch reply", 0), _int(d, "leader_epoch", "fetch reply", -1))
        return _or_error(d, ok)


MAX_READ_WAIT_MS = 30_000  # the longest a consumer's long poll may be held at the leader


@_msg()
class ConsumerFetchRequest(Request):
    """A consumer's read below the HWM; `leader_epoch` (KIP-320) is checked when given. A
    long poll (Kafka's fetch.min.bytes and fetch.max.wait.ms, counted in records): with
    `max_wait_ms` > 0 the leader holds the read until `min_records` (at most `max_records`)
    are below its HWM, or until the wait is over, and then answers with what there is."""

    TYPE = "fetch"
    topic: str
    partition: int
    offset: int
    max_records: int | None = None  # None: 1000
    leader_epoch: int | None = None
    min_records: int = 1
    max_wait_ms: int = 0

    def to_wire(self) -> dict:
        d: dict = {"type": self.TYPE, "topic": self.topic, "partition": self.partition, "offset": self.offset}
        if self.max_records is not None:
            d["max_records"] = self.max_records
        if self.leader_epoch is not None:
            d["leader_epoch"] = self.leader_epoch
        if self.max_wait_ms:
            d["min_records"] = self.min_records
            d["max_wait_ms"] = self.max_wait_ms
        return d

    @classmethod
    def from_wire(cls, d: Mapping) -> ConsumerFetchRequest:
        t = cls.TYPE
        min_records, max_wait_ms = _int(d, "min_records", t, 1), _int(d, "max_wait_ms", t, 0)
        if min_records < 1 or not 0 <= max_wait_ms <= MAX_READ_WAIT_MS:
            raise MalformedMessage(f"{t}: min_records must be >= 1 and max_wait_ms within "
                                   f"0..{MAX_READ_WAIT_MS}, got {min_records} and {max_wait_ms}")
        return cls(_str(d, "topic", t), _int(d, "partition", t), _int(d, "offset", t),
                   _opt_int(d, "max_records", t), _opt_int(d, "leader_epoch", t),
                   min_records, max_wait_ms)

    @classmethod
    def reply_from_wire(cls, d: Mapping) -> Message:
        return _or_error(d, ConsumerFetchReply.from_wire)


# ---- decoding entry points ---------------------------------------------------------------------

_REQUESTS: dict[str, type[Request]] = {
    cls.TYPE: cls for cls in (MetadataRequest, RegisterRequest, HeartbeatRequest, CreateTopicRequest,
                              AlterPartitionRequest, ProduceRequest, ConsumerFetchRequest)
}


def decode_request(d: Any) -> Request:
    """A request from its wire form; MalformedMessage says what is wrong."""
    if not isinstance(d, Mapping):
        raise MalformedMessage(f"a request must be a JSON object, got {type(d).__name__}")
    kind = d.get("type")
    if kind == FetchRequest.TYPE and d.get("replica") is not None:
        return FetchRequest.from_wire(d)
    cls = _REQUESTS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MalformedMessage(f"unknown request {kind!r}")
    return cls.from_wire(d)
