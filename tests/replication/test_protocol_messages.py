"""The typed wire messages: every message's JSON form is the protocol's, decoding gives the
types back (or a clear INVALID_REQUEST, never a crash of a node), messages are values of their
class and not dicts, and the JSON-frame server answers malformed frames and keeps serving."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Mapping

import pytest
from support.memory_log import MemoryLog

from replication import errors as E
from replication.broker import Broker
from replication.config import NodeConfig
from replication.controller import Controller
from replication.log import Record
from replication.messages import (
    AlterPartitionReply,
    AlterPartitionRequest,
    ClusterMetadata,
    ConsumerFetchReply,
    ConsumerFetchRequest,
    CreateTopicReply,
    CreateTopicRequest,
    DivergingReply,
    ErrorReply,
    FetchReply,
    FetchRequest,
    HeartbeatReply,
    HeartbeatRequest,
    LogInfo,
    MalformedMessage,
    MetadataReply,
    MetadataRequest,
    PartitionRef,
    ProduceReply,
    ProduceRequest,
    RegisterReply,
    RegisterRequest,
    decode_request,
)
from replication.metadata import PartitionState
from replication.net import Connection, ConnectionLost, encode_frame, serve
from replication.outputs import Reply

STATE = PartitionState("t", 0, (1, 2, 3), leader=1, leader_epoch=2, partition_epoch=5, isr=(1, 2))
METADATA = ClusterMetadata(7, {}, {"t": {"min.insync.replicas": "2"}}, (STATE,))

REQUESTS = [
    (MetadataRequest(), {"type": "metadata"}),
    (RegisterRequest(1, "h:9092", None),
     {"type": "register", "broker": 1, "address": "h:9092", "clean_epoch": None}),
    (HeartbeatRequest(2, 5, False, 3, (LogInfo("t", 0, 1, 10),)),
     {"type": "heartbeat", "broker": 2, "broker_epoch": 5, "want_shutdown": False, "metadata_version": 3,
      "log_info": [{"topic": "t", "partition": 0, "epoch": 1, "end_offset": 10}]}),
    (CreateTopicRequest("t", 3, 2, {"min.insync.replicas": "2"}),
     {"type": "create-topic", "topic": "t", "partitions": 3, "replication_factor": 2,
      "config": {"min.insync.replicas": "2"}}),
    (AlterPartitionRequest(1, 4, "t", 0, 2, 5, (1, 2)),
     {"type": "alter-partition", "broker": 1, "broker_epoch": 4, "topic": "t", "partition": 0,
      "leader_epoch": 2, "partition_epoch": 5, "isr": [1, 2]}),
    (ProduceRequest("t", 0, ("a", "b"), "1"),
     {"type": "produce", "topic": "t", "partition": 0, "acks": "1", "values": ["a", "b"]}),
    (FetchRequest("t", 0, replica=2, offset=7, last_fetched_epoch=1, leader_epoch=2),
     {"type": "fetch", "topic": "t", "partition": 0, "replica": 2, "offset": 7,
      "last_fetched_epoch": 1, "leader_epoch": 2}),
    (ConsumerFetchRequest("t", 0, 3, max_records=10, leader_epoch=2),
     {"type": "fetch", "topic": "t", "partition": 0, "offset": 3, "max_records": 10, "leader_epoch": 2}),
    (ConsumerFetchRequest("t", 0, 3, min_records=5, max_wait_ms=50),
     {"type": "fetch", "topic": "t", "partition": 0, "offset": 3, "min_records": 5, "max_wait_ms": 50}),
]

REPLIES = [
    (MetadataRequest(), MetadataReply(METADATA, broker=2, controller="c:1"),
     {"metadata": METADATA.to_wire(), "broker": 2, "controller": "c:1"}),
    (MetadataRequest(), MetadataReply(METADATA), {"metadata": METADATA.to_wire()}),
    (RegisterRequest(1, "h", None), RegisterReply(4), {"broker_epoch": 4}),
    (HeartbeatRequest(1, 4), HeartbeatReply(False, 4, False, METADATA, (PartitionRef("t", 0),)),
     {"fenced": False, "broker_epoch": 4, "shutdown_ok": False, "metadata": METADATA.to_wire(),
      "log_info_requests": [{"topic": "t", "partition": 0}]}),
    (CreateTopicRequest("t", 1, 1), CreateTopicReply(1), {"partitions": 1}),
    (AlterPartitionRequest(1, 4, "t", 0, 2, 5, (1,)), AlterPartitionReply(STATE), {"state": STATE.to_dict()}),
    (AlterPartitionRequest(1, 4, "t", 0, 2, 5, (1,)), ErrorReply(E.FENCED_LEADER_EPOCH, state=STATE),
     {"error": E.FENCED_LEADER_EPOCH, "state": STATE.to_dict()}),
    (ProduceRequest("t", 0, ("a",)), ProduceReply(3, 2, 1), {"offset": 3, "leader_epoch": 2, "node": 1}),
    (ProduceRequest("t", 0, ("a",)), ErrorReply(E.REQUEST_TIMED_OUT, appended=True),
     {"error": E.REQUEST_TIMED_OUT, "appended": True}),
    (FetchRequest("t", 0, 2, 0), FetchReply((Record(0, 1, 99, b"x\xff"),), 1, 1),
     {"records": [[0, 1, 99, "x\xff"]], "hwm": 1, "leader_epoch": 1}),
    (FetchRequest("t", 0, 2, 0), DivergingReply(1, 4, 3), {"diverging": {"epoch": 1, "end_offset": 4}, "hwm": 3}),
    (FetchRequest("t", 0, 2, 9), ErrorReply(E.OFFSET_OUT_OF_RANGE, log_end_offset=5),
     {"error": E.OFFSET_OUT_OF_RANGE, "log_end_offset": 5}),
    (ConsumerFetchRequest("t", 0, 0), ConsumerFetchReply(((0, "a"),), 1, 2, 0, 1),
     {"records": [[0, "a"]], "hwm": 1, "log_end_offset": 2, "leader_epoch": 0, "node": 1}),
    (ConsumerFetchRequest("t", 0, 0), ErrorReply(E.OFFSET_NOT_AVAILABLE, hwm=0),
     {"error": E.OFFSET_NOT_AVAILABLE, "hwm": 0}),
]


@pytest.mark.parametrize(("msg", "wire"), REQUESTS, ids=lambda x: type(x).__name__)
def test_requests_have_the_protocols_json_and_decode_back(msg, wire) -> None:
    assert msg.to_wire() == wire
    through_json = json.loads(json.dumps(wire))
    assert decode_request(through_json) == msg
    assert type(decode_request(through_json)) is type(msg)


@pytest.mark.parametrize(("request_", "reply", "wire"), REPLIES, ids=lambda x: type(x).__name__)
def test_replies_have_the_protocols_json_and_decode_back(request_, reply, wire) -> None:
    assert reply.to_wire() == wire
    decoded = request_.reply_from_wire(json.loads(json.dumps(wire)))
    assert type(decoded) is type(reply) and decoded == reply


@pytest.mark.parametrize(("rows", "records"), [
    ([[0, "a"], [1, "b\xff"]], ((0, "a"), (1, "b\xff"))),  # as nodes write them: msgspec converts
    ([[2**70, ""]], ((2**70, ""),)),
    # what msgspec refuses still gets int() and str(), as before it was used
    ([["3", "a"], [True, 5], [4.0, None]], ((3, "a"), (1, "5"), (4, "None"))),
    ([], ()),
])
def test_a_consumer_fetchs_records_decode_as_int_and_str_pairs(rows, records) -> None:
    wire = {"records": rows, "hwm": 9, "log_end_offset": 9, "leader_epoch": 0, "node": 1}
    reply = ConsumerFetchRequest("t", 0, 0).reply_from_wire(wire)
    assert reply.records == records
    assert all(type(o) is int and type(v) is str for o, v in reply.records)
    assert type(reply.records) is tuple and all(type(r) is tuple for r in reply.records)


@pytest.mark.parametrize("rows", [[[0]], [[0, "a", "b"]], [["x", "a"]], [[None, "a"]], [5]])
def test_a_consumer_fetchs_bad_records_are_malformed(rows) -> None:
    wire = {"records": rows, "hwm": 9, "log_end_offset": 9, "leader_epoch": 0, "node": 1}
    with pytest.raises(MalformedMessage, match="fetch reply: bad records"):
        ConsumerFetchReply.from_wire(wire)


def test_messages_are_values_of_their_class_not_dicts() -> None:
    reply = ErrorReply(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, appended=True)
    assert reply == ErrorReply(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, appended=True)
    assert reply != ErrorReply(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert reply != reply.to_wire() and not isinstance(reply, Mapping)
    with pytest.raises(TypeError):
        reply["error"]  # noqa: B018 -- the read is the test
    # Equal fields of another class are another message: a follower's fetch is not a consumer's.
    assert FetchRequest("t", 0, replica=1, offset=0) != ConsumerFetchRequest("t", 0, 0)


@pytest.mark.parametrize(("frame", "complaint"), [
    ({"type": "fly"}, "unknown request 'fly'"),
    ({"topic": "t"}, "unknown request None"),
    ({"type": "produce", "topic": "t", "partition": 0}, "missing field 'values'"),
    ({"type": "produce", "topic": "t", "partition": "zero", "values": []}, "'partition' must be an integer"),
    ({"type": "produce", "topic": "t", "partition": 0, "values": [1]}, "list of strings"),
    ({"type": "heartbeat", "broker": 1, "broker_epoch": 1, "want_shutdown": "yes"}, "true or false"),
    ({"type": "alter-partition", "broker": 1, "broker_epoch": 1, "topic": "t", "partition": 0,
      "leader_epoch": 0, "partition_epoch": 0, "isr": "1,2"}, "must be a list"),
    ([1, 2], "must be a JSON object"),
    ({"type": "fetch", "topic": "t", "partition": 0, "offset": 0, "max_wait_ms": 10**9},
     "max_wait_ms within 0..30000"),
    ({"type": "fetch", "topic": "t", "partition": 0, "offset": 0, "min_records": 0}, "min_records must be >= 1"),
])
def test_malformed_requests_are_clear_errors(frame, complaint) -> None:
    with pytest.raises(MalformedMessage, match=complaint):
        decode_request(frame)


def test_nodes_answer_requests_for_the_other_role_with_invalid_request() -> None:
    controller = Controller(NodeConfig())
    broker = Broker(1, "h:1", NodeConfig(), lambda t, p: MemoryLog(), None)
    (reply,) = controller.handle("tok", ProduceRequest("t", 0, ("x",)), 0)
    assert reply == Reply("tok", ErrorReply(E.INVALID_REQUEST, message="unknown request 'produce'"))
    (reply,) = broker.handle("tok", RegisterRequest(1, "h", None), 0)
    assert reply == Reply("tok", ErrorReply(E.INVALID_REQUEST, message="unknown request 'register'"))


def _raw_frame(wire: object) -> bytes:
    """A frame holding any JSON value, as a faulty or hostile peer could send."""
    body = json.dumps(wire).encode()
    return struct.pack(">I", len(body)) + body


def test_a_malformed_answer_counts_as_a_lost_connection() -> None:
    """The connection decodes an answer into its request's reply type; one that does not decode
    is a ConnectionLost (outcome unknown), which a runtime hands to `on_send_failed`."""
    async def scenario() -> None:
        async def answer_badly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            rid = json.loads(await reader.readexactly(length))["id"]
            writer.write(_raw_frame({"broker_epoch": "soon", "id": rid}))

        server = await asyncio.start_server(answer_badly, "127.0.0.1", 0)
        conn = Connection(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        try:
            with pytest.raises(ConnectionLost, match="malformed answer.*broker_epoch"):
                await conn.request(RegisterRequest(1, "h", None), 2.0)
        finally:
            await conn.close()
            server.close()

    asyncio.run(scenario())
    broker = Broker(1, "h:1", NodeConfig(), lambda t, p: MemoryLog(), None)
    (send,) = broker.start(0)
    assert broker.registering
    assert broker.on_send_failed("controller", send.msg, 0) == []
    assert not broker.registering and broker.broker_epoch is None


def test_the_server_answers_malformed_frames_and_keeps_serving() -> None:
    async def scenario() -> list[dict]:
        seen = []

        def on_request(request, respond) -> None:
            seen.append(request)
            respond(ErrorReply(E.UNKNOWN_TOPIC))

        server = await serve("127.0.0.1:0", on_request)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = b"{not json"
        writer.write(struct.pack(">I", len(body)) + body)
        writer.write(_raw_frame({"type": "fly", "id": 7}))
        writer.write(_raw_frame({"type": "produce", "topic": "t", "partition": 0, "id": 8}))
        writer.write(encode_frame(MetadataRequest(), 9))
        answers = []
        for _ in range(4):
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            answers.append(json.loads(await reader.readexactly(length)))
        writer.close()
        # A typed request over a real connection comes back as its reply type.
        conn = Connection(f"127.0.0.1:{port}")
        typed = await conn.request(ProduceRequest("t", 0, ("v",)), 2.0)
        await conn.close()
        server.close()
        assert seen == [MetadataRequest(), ProduceRequest("t", 0, ("v",))]
        assert typed == ErrorReply(E.UNKNOWN_TOPIC) and isinstance(typed, ErrorReply)
        return answers

    answers = asyncio.run(scenario())
    assert answers[0]["error"] == E.INVALID_REQUEST and "not JSON" in answers[0]["message"]
    assert "id" not in answers[0]
    assert answers[1] == {"error": E.INVALID_REQUEST, "message": "unknown request 'fly'", "id": 7}
    assert answers[2]["id"] == 8 and "missing field 'values'" in answers[2]["message"]
    assert answers[3] == {"error": E.UNKNOWN_TOPIC, "id": 9}
