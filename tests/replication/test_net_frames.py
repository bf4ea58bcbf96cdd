"""The wire's framing as reads cut it (replication/net.py), and Connection.call's outcomes
over a real TCP connection: an answer, a malformed answer, no answer in time, a closed peer."""

from __future__ import annotations

import asyncio
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from replication import errors as E
from replication.messages import ErrorReply, MetadataRequest, ProduceReply, ProduceRequest
from replication.net import MAX_FRAME, Connection, ConnectionLost, _Frames, encode_frame, serve


def test_frames_come_out_whole_however_the_stream_is_cut() -> None:
    frames = [encode_frame(ProduceRequest("t", p, tuple(str(v) for v in range(p * 7))), p)
              for p in range(12)]
    stream = b"".join(frames)
    rng = random.Random(5)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randrange(0, 40)))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        reader = _Frames()
        bodies = [body for piece in pieces for body in reader.feed(piece)]
        assert bodies == [f[4:] for f in frames]
    one_byte = _Frames()
    assert [body for b in stream for body in one_byte.feed(bytes([b]))] == [f[4:] for f in frames]


def test_an_oversized_frame_is_a_lost_connection() -> None:
    with pytest.raises(ConnectionLost, match="exceeds"):
        _Frames().feed(struct.pack(">I", MAX_FRAME + 1) + b"{")


def _run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), 30))


async def _call(conn: Connection, msg, timeout: float):
    done = asyncio.get_running_loop().create_future()
    conn.call(msg, timeout, done.set_result)
    return await done


def test_call_settles_with_the_typed_reply_connected_or_not() -> None:
    async def scenario() -> None:
        def on_request(request, respond) -> None:
            respond(ProduceReply(4, 2, 1) if isinstance(request, ProduceRequest)
                    else ErrorReply(E.UNKNOWN_TOPIC))

        server = await serve("127.0.0.1:0", on_request)
        conn = Connection(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        try:
            first = await _call(conn, ProduceRequest("t", 0, ("v",)), 2.0)  # connects first
            assert conn.connected
            answers = await asyncio.gather(*(_call(conn, ProduceRequest("t", 0, ("v",)), 2.0)
                                             for _ in range(50)),
                                           _call(conn, MetadataRequest(), 2.0))
            assert [first, *answers[:50]] == [ProduceReply(4, 2, 1)] * 51
            assert answers[50] == ErrorReply(E.UNKNOWN_TOPIC)
        finally:
            await conn.close()
            server.close()

    _run(scenario)


def test_call_without_an_answer_in_time_or_with_the_peer_gone_is_a_lost_connection() -> None:
    async def scenario() -> None:
        held: list = []

        def on_request(request, respond) -> None:
            if isinstance(request, MetadataRequest):
                respond(ErrorReply(E.UNKNOWN_TOPIC))  # answered: the connection is up
            else:
                held.append(respond)  # never answered

        server = await serve("127.0.0.1:0", on_request)
        conn = Connection(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        try:
            await _call(conn, MetadataRequest(), 2.0)
            late = await _call(conn, ProduceRequest("t", 0, ("v",)), 0.2)
            assert isinstance(late, ConnectionLost) and "no answer from" in str(late)
            pending = asyncio.ensure_future(_call(conn, ProduceRequest("t", 0, ("w",)), 10.0))
            while len(held) < 2:
                await asyncio.sleep(0.01)
            await conn.close()
            lost = await pending
            assert isinstance(lost, ConnectionLost) and str(lost).endswith(": closed")
        finally:
            server.close()

    _run(scenario)


def test_without_msgspec_frames_are_the_json_modules() -> None:
    """The PyPy simulator has no PyPI packages: net.py must import and frame without msgspec,
    with the same bytes."""
    program = (
        "import sys; sys.modules['msgspec'] = None\n"
        "from replication.net import encode_frame, decode_body\n"
        "from replication.messages import ProduceRequest\n"
        "frame = encode_frame(ProduceRequest('t', 1, ('a', 'b')), 3)\n"
        "assert decode_body(frame[4:])['id'] == 3\n"
        "sys.stdout.buffer.write(frame)\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout
    assert out == encode_frame(ProduceRequest("t", 1, ("a", "b")), 3)
