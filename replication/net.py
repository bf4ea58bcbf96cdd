"""Length-prefixed JSON frames over TCP, with pipelined request/response.

Each request carries an `id`; the answer echoes it, so many requests can be in flight on one
connection and answers may come back in any order (a parked fetch does not block a produce).

This is where the typed messages (`replication.messages`) meet the wire: `serve` decodes every
frame into a `Request` before the node sees it, and answers a frame it cannot decode (not
JSON, not an object, an unknown type, a missing or mistyped field) with an `INVALID_REQUEST`
error reply saying what is wrong -- with the frame's `id` when it has one -- and goes on
reading; `Connection.request` decodes the answer to a typed request into its reply type."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import struct
from collections.abc import Awaitable, Callable
from typing import Any

try:
    import msgspec
except ImportError:  # the PyPy simulator has no PyPI packages (harness/pypy.py); it frames nothing
    msgspec = None

from replication.messages import (
    MalformedMessage,
    Message,
    Request,
    decode_request,
    invalid_request,
)

_HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024
# msgspec's JSON: the same text json.dumps(separators=(",", ":")) writes but for non-ASCII
# characters, written as UTF-8 rather than escaped, and values json.loads gives, in a fraction
# of the time: every record a broker replicates or serves is in a frame's JSON, and at 20,000
# sends/s json's encoder and decoder were the brokers' and the workload's largest single cost.
if msgspec is not None:
    _ENCODE = msgspec.json.Encoder().encode
    _DECODE = msgspec.json.Decoder().decode
    _REFUSED: type[Exception] = msgspec.DecodeError
else:
    def _ENCODE(wire: Any) -> bytes:
        return json.dumps(wire, separators=(",", ":")).encode()
    _DECODE, _REFUSED = json.loads, ValueError


def settler(fut: asyncio.Future) -> Callable[[Any], None]:
    """A callback that settles `fut` with its argument, an exception raised from it (unless
    `fut` was cancelled meanwhile): a callback-style call (Connection.call, Client.send)
    awaited as a future."""
    def settle(outcome: Any) -> None:
        if fut.done():
            return
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
    return settle

class ConnectionLost(ConnectionError):
    """The peer went away (or never answered) while a request was in flight."""


class ConnectFailed(ConnectionLost):
    """No connection could be made: the request was certainly not sent."""


def encode_frame(msg: Message, rid: int | None = None) -> bytes:
    """A frame for a message, with the request `id` when given."""
    wire = msg.to_wire()
    if rid is not None:
        wire["id"] = rid
    try:
        body = _ENCODE(wire)
    except UnicodeEncodeError:  # a lone surrogate (in an error message quoting bad input)
        body = json.dumps(wire, separators=(",", ":")).encode()
    return _HEADER.pack(len(body)) + body


_READ_SIZE = 256 * 1024


class _Frames:
    """Frames cut from a stream's bytes as they come: each read takes what has arrived and
    gives every whole frame in it, so a burst of frames costs one await, not the two
    readexactly() awaits a frame took."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The bodies of the frames `data` completes; ConnectionLost on an oversized frame."""
        buf = self._buf
        buf += data
        bodies: list[bytes] = []
        pos, size = 0, len(buf)
        while size - pos >= _HEADER.size:
            (length,) = _HEADER.unpack_from(buf, pos)
            if length > MAX_FRAME:
                raise ConnectionLost(f"frame of {length} bytes exceeds {MAX_FRAME}")
            end = pos + _HEADER.size + length
            if end > size:
                break
            bodies.append(bytes(buf[pos + _HEADER.size:end]))
            pos = end
        del buf[:pos]
        return bodies


async def _read_some(reader: asyncio.StreamReader) -> bytes:
    """What has arrived (b"" at the end of the stream, or when the peer reset it)."""
    try:
        return await reader.read(_READ_SIZE)
    except ConnectionError:
        return b""


def decode_body(body: bytes) -> Any:
    """A frame body's JSON value, as json.loads reads it: json takes what msgspec refuses
    (NaN, numbers past 64 bits, ...) and says what is wrong with the rest."""
    try:
        return _DECODE(body)
    except _REFUSED:
        pass
    try:
        return json.loads(body)
    except ValueError as e:  # the stream stays in step: the frame was read whole
        raise MalformedMessage(f"malformed frame: not JSON: {e}") from None


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


class Connection:
    """A client connection with any number of requests in flight."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def _ensure(self, timeout: float) -> asyncio.StreamWriter:
        async with self._lock:
            if not self.connected:
                host, port = split_address(self.address)
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
                self._writer = writer
                self._reader_task = asyncio.get_running_loop().create_task(self._read_loop(reader))
            assert self._writer is not None
            return self._writer

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        frames = _Frames()
        try:
            while data := await _read_some(reader):
                for body in frames.feed(data):
                    msg = decode_body(body)
                    rid = msg.get("id") if isinstance(msg, dict) else None
                    fut = self._waiting.pop(rid, None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
        except (ConnectionLost, ValueError):
            pass
        finally:
            self._fail_all(ConnectionLost(f"connection to {self.address} closed"))
            if self._writer is not None:
                # A reader left pending when its loop shut down (a run cancelled by SIGTERM or
                # Ctrl-C) is finalised later by the garbage collector, its loop closed
                with contextlib.suppress(RuntimeError):
                    self._writer.close()
            self._writer = None

    def _fail_all(self, exc: Exception) -> None:
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(exc)

    async def request(self, msg: Request, timeout: float) -> Message:
        """Send and await the answer, decoded into the request's reply type (an answer that
        does not decode counts as a lost connection: its outcome is unknown)."""
        try:
            writer = await self._ensure(timeout)
        except (TimeoutError, OSError) as e:
            raise ConnectFailed(f"cannot connect to {self.address}: {e or type(e).__name__}") from e
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            writer.write(encode_frame(msg, rid))
            await asyncio.wait_for(fut, timeout)
        except TimeoutError as e:
            raise ConnectionLost(f"no answer from {self.address} within {timeout}s") from e
        except OSError as e:
            if _cancelling():  # the connection closed as this request was cancelled (a loop
                raise asyncio.CancelledError from e  # shutting down): it ends cancelled
            raise ConnectionLost(f"{self.address}: {e}") from e
        finally:
            self._waiting.pop(rid, None)
        return self._reply(msg, fut.result())

    def _reply(self, msg: Request, answer: dict) -> Message:
        """The answer decoded into the request's reply type (ConnectionLost if it does not)."""
        try:
            return msg.reply_from_wire({k: v for k, v in answer.items() if k != "id"})
        except MalformedMessage as e:
            raise ConnectionLost(f"malformed answer from {self.address}: {e}") from e

    def call(self, msg: Request, timeout: float, on_done: Callable[[Any], None]) -> None:
        """`request` with a callback: on_done(the answer, or the ConnectionLost or other
        exception it raised) once, later, from the loop, unless the loop shuts down first.
        Connected, it writes at once and settles from the answer's future (or a timer), with
        no task, coroutine or wait_for a request (the workload's batches and polls and the
        nodes' fetches all come through here); to connect first it runs `request` in a task.
        The simulated network's Connection has the same method."""
        loop = asyncio.get_running_loop()
        if not self.connected:
            def finished(task: asyncio.Task) -> None:
                if not task.cancelled():
                    error = task.exception()
                    on_done(task.result() if error is None else error)
            loop.create_task(self.request(msg, timeout)).add_done_callback(finished)
            return
        assert self._writer is not None
        rid = next(self._ids)
        fut = self._waiting[rid] = loop.create_future()
        timer = loop.call_later(timeout, _expire, fut,
                                f"no answer from {self.address} within {timeout}s")

        def answered(done: asyncio.Future) -> None:
            timer.cancel()
            self._waiting.pop(rid, None)
            error = done.exception()
            if error is not None:  # timed out, or the connection closed (worded as request() does)
                on_done(error if isinstance(error, _Unanswered) else
                        ConnectionLost(f"{self.address}: {error}"))
                return
            try:
                reply = self._reply(msg, done.result())
            except ConnectionLost as e:
                on_done(e)
                return
            on_done(reply)
        fut.add_done_callback(answered)
        self._writer.write(encode_frame(msg, rid))

    def send_nowait(self, msg: Request) -> None:
        """Fire and forget (acks=0): written if connected, no answer expected."""
        if self.connected:
            assert self._writer is not None
            self._writer.write(encode_frame(msg))

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
        self._fail_all(ConnectionLost("closed"))


class Pool:
    """One connection per address."""

    def __init__(self) -> None:
        self._conns: dict[str, Connection] = {}

    def get(self, address: str) -> Connection:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._conns[address] = Connection(address)
        return conn

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()


Respond = Callable[[Message], None]


async def serve(address: str, on_request: Callable[[Request, Respond], Awaitable[None] | None]) -> asyncio.AbstractServer:
    """Listen on HOST:PORT; call `on_request(request, respond)` for every frame that decodes
    into a request, answer the others with INVALID_REQUEST."""
    host, port = split_address(address)

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def responder(rid):
            def respond(reply: Message) -> None:
                if not writer.is_closing():
                    writer.write(encode_frame(reply, rid))
            return respond
        frames = _Frames()
        try:
            while data := await _read_some(reader):
                for body in frames.feed(data):
                    try:
                        raw = decode_body(body)
                    except MalformedMessage as e:
                        responder(None)(invalid_request(str(e)))
                        continue
                    respond = responder(raw.get("id") if isinstance(raw, dict) else None)
                    try:
                        request = decode_request(raw)
                    except MalformedMessage as e:
                        respond(invalid_request(str(e)))
                        continue
                    result = on_request(request, respond)
                    if asyncio.iscoroutine(result):
                        await result
        except (ConnectionLost, ValueError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(client, host, port, reuse_address=True)


class _Unanswered(ConnectionLost):
    """No answer within the request's timeout (Connection.call's timer)."""


def _expire(fut: asyncio.Future, why: str) -> None:
    if not fut.done():
        fut.set_exception(_Unanswered(why))


def _cancelling() -> bool:
    """Whether the running task has been asked to stop: asyncio.wait_for hands back the inner
    future's exception instead of the cancellation when both arrive in one loop turn."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
