"""Apache Kafka's cluster state as the harness needs it: creating the test topic, waiting
until every partition has its full ISR, and each partition's leader, ISR and KIP-966 Eligible
Leader Replicas (docs/kafka.md).

confluent-kafka's admin client creates topics and lists brokers, but it does not expose ELR,
so partition states come from Kafka's DescribeTopicPartitions request (API key 75, added by
KIP-966 and served by 3.8 and later), spoken here directly over asyncio: one small request,
the same answer `kafka-topics.sh --describe` prints."""

from __future__ import annotations

import asyncio
import base64
import itertools
import struct
from collections.abc import Sequence
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from workloads.topics import full_isr

DESCRIBE_TOPIC_PARTITIONS = 75
_correlation = itertools.count(1)


class KafkaAdminError(RuntimeError):
    """A cluster that did not answer or answered with an error."""


# ---- DescribeTopicPartitions v0 (flexible versions: compact arrays, tagged fields) -------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _compact_string(s: str) -> bytes:
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def describe_request(topics: Sequence[str], correlation: int) -> bytes:
    """One size-prefixed DescribeTopicPartitions v0 request (request header v2)."""
    client = b"harness"
    header = struct.pack(">hhih", DESCRIBE_TOPIC_PARTITIONS, 0, correlation, len(client))
    header += client + b"\x00"
    body = _uvarint(len(topics) + 1)
    body += b"".join(_compact_string(t) + b"\x00" for t in topics)
    body += struct.pack(">i", 2000) + struct.pack(">b", -1) + b"\x00"  # limit, no cursor, tags
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def ints(self) -> list[int] | None:
        n = self.uvarint() - 1
        return None if n < 0 else [self.take(">i") for _ in range(n)]

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def parse_describe(frame: bytes) -> dict[str, list[dict[str, Any]]]:
    """topic -> its partitions' states, from a response frame (without the size prefix)."""
    r = _Reader(frame)
    r.take(">i")  # correlation id
    r.skip_tags()
    r.take(">i")  # throttle time
    topics: dict[str, list[dict[str, Any]]] = {}
    for _ in range(r.uvarint() - 1):
        error, name = r.take(">h"), r.string()
        # Kafka prints a topic id as URL-safe base64 without padding (its logs name topics so)
        topic_id = base64.urlsafe_b64encode(r.data[r.pos:r.pos + 16]).decode().rstrip("=")
        r.pos += 16 + 1  # topic id, is_internal
        partitions = []
        for _ in range(r.uvarint() - 1):
            p_error, index, leader, epoch = r.take(">h"), r.take(">i"), r.take(">i"), r.take(">i")
            replicas, isr, elr, last_known, _offline = (r.ints(), r.ints(), r.ints(), r.ints(),
                                                        r.ints())
            r.skip_tags()
            partitions.append({"partition": index, "error": p_error, "topic_id": topic_id,
                               "leader": leader if leader >= 0 else None, "leader_epoch": epoch,
                               "replicas": replicas or [], "isr": isr or [], "elr": elr or [],
                               "last_known_elr": last_known or []})
        r.take(">i")  # authorized operations
        r.skip_tags()
        if name is not None and error == 0:
            topics[name] = sorted(partitions, key=lambda p: p["partition"])
    return topics


async def describe_partitions(bootstrap: Sequence[str], topic: str,
                              timeout: float = 2.0) -> list[dict[str, Any]]:
    """The topic's partition states from the broker that answers first. Every broker is asked
    at once: one asked after another, each paused or cut-off broker would cost the whole
    timeout, and a fault aimed by role would start seconds late (docs/differential.md)."""
    asks = [asyncio.ensure_future(asyncio.wait_for(_ask(*_host_port(a), topic), timeout))
            for a in bootstrap]
    last: Exception | None = None
    try:
        for answer in asyncio.as_completed(asks):
            try:
                return await answer
            except (OSError, TimeoutError, struct.error, IndexError, KafkaAdminError) as e:
                last = e
    finally:
        for ask in asks:
            ask.cancel()
        await asyncio.gather(*asks, return_exceptions=True)
    raise KafkaAdminError(f"no broker described topic {topic!r}: {last}")


def _host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


async def _ask(host: str, port: int, topic: str) -> list[dict[str, Any]]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(describe_request([topic], next(_correlation)))
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        topics = parse_describe(await reader.readexactly(size))
    finally:
        writer.close()
    if topic not in topics:
        raise KafkaAdminError(f"{host}:{port} does not know topic {topic!r}")
    return topics[topic]


# ---- topic set-up and health ------------------------------------------------------------------


def _admin(bootstrap: Sequence[str]) -> AdminClient:
    # log_level 0: a broker that is down is the normal case here, not worth a stderr line
    return AdminClient({"bootstrap.servers": ",".join(bootstrap), "log_level": 0,
                        "socket.timeout.ms": 3000})


def _brokers_up(admin: AdminClient) -> int:
    try:
        return len(admin.list_topics(timeout=3).brokers)
    except ck.KafkaException:
        return 0


_E = ck.KafkaError
# A creation that failed so may work when asked again. librdkafka (2.10 and later) drops the
# handle of a broker that a metadata answer no longer names and fails the requests in flight
# on it with _DESTROY_BROKER ("Broker handle destroyed"): while a cluster starts, one broker's
# metadata may not name another that registered a moment before, and a CreateTopics request
# sent through that other failed so, once, at the start of a run.
_CREATE_AGAIN = {_E._DESTROY_BROKER, _E._TRANSPORT, _E._TIMED_OUT, _E._ALL_BROKERS_DOWN,
                 _E.NOT_CONTROLLER, _E.REQUEST_TIMED_OUT}


def create_again(err: ck.KafkaError) -> bool:
    """Whether a CreateTopics error is worth asking again (the topic may exist by then:
    TOPIC_ALREADY_EXISTS is success)."""
    return err.code() in _CREATE_AGAIN or err.retriable()


def _create(admin: AdminClient, topic: str, partitions: int, rf: int) -> str | None:
    """None once the topic exists; the error when asking again may help."""
    future = admin.create_topics([NewTopic(topic, partitions, rf)], operation_timeout=30)[topic]
    try:
        future.result()
    except ck.KafkaException as e:
        err = e.args[0]
        if err.code() == _E.TOPIC_ALREADY_EXISTS:
            return None
        if create_again(err):
            return err.str()
        raise KafkaAdminError(f"creating topic {topic!r}: {err.str()}") from None
    return None


async def create_topic(bootstrap: Sequence[str], brokers: int, topic: str, partitions: int,
                       replication_factor: int, timeout: float = 120) -> None:
    """Once `brokers` brokers are registered, create the topic (asked again after an error
    that may pass, until `timeout`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    admin = _admin(bootstrap)
    while (up := await asyncio.to_thread(_brokers_up, admin)) < brokers:
        if loop.time() > deadline:
            raise KafkaAdminError(f"{up} of {brokers} Kafka brokers registered within "
                                  f"{timeout:g} s")
        await asyncio.sleep(0.5)
    while (error := await asyncio.to_thread(_create, admin, topic, partitions,
                                            replication_factor)) is not None:
        if loop.time() > deadline:
            raise KafkaAdminError(f"creating topic {topic!r}: {error}, still after "
                                  f"{timeout:g} s")
        await asyncio.sleep(0.5)


async def wait_healthy(bootstrap: Sequence[str], topic: str, partitions: int,
                       timeout: float) -> bool:
    """Wait until every partition has a leader and its full replica set in the ISR."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            if full_isr(await describe_partitions(bootstrap, topic), partitions):
                return True
        except KafkaAdminError:
            pass
        await asyncio.sleep(0.3)
    return False
