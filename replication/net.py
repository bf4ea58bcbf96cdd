"""Length-prefixed JSON frames over TCP, with pipelined request/response.

Each request carries an `id`; the answer echoes it, so many requests can be in flight on one
connection and answers may come back in any order (a parked fetch does not block a produce)."""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
from collections.abc import Awaitable, Callable

_HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024


class ConnectionLost(ConnectionError):
    """The peer went away (or never answered) while a request was in flight."""


class ConnectFailed(ConnectionLost):
    """No connection could be made: the request was certainly not sent."""


def encode_frame(msg: dict) -> bytes:
    body = json.dumps(msg, separators=(",", ":")).encode()
    return _HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> dict | None:
    try:
        header = await reader.readexactly(_HEADER.size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ConnectionLost(f"frame of {length} bytes exceeds {MAX_FRAME}")
    try:
        body = await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return json.loads(body)


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
        try:
            while True:
                msg = await read_frame(reader)
                if msg is None:
                    break
                fut = self._waiting.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (ConnectionLost, ValueError):
            pass
        finally:
            self._fail_all(ConnectionLost(f"connection to {self.address} closed"))
            if self._writer is not None:
                self._writer.close()
            self._writer = None

    def _fail_all(self, exc: Exception) -> None:
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(exc)

    async def request(self, msg: dict, timeout: float) -> dict:
        try:
            writer = await self._ensure(timeout)
        except (TimeoutError, OSError) as e:
            raise ConnectFailed(f"cannot connect to {self.address}: {e or type(e).__name__}") from e
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            writer.write(encode_frame({**msg, "id": rid}))
            await asyncio.wait_for(fut, timeout)
        except TimeoutError as e:
            raise ConnectionLost(f"no answer from {self.address} within {timeout}s") from e
        except OSError as e:
            raise ConnectionLost(f"{self.address}: {e}") from e
        finally:
            self._waiting.pop(rid, None)
        return fut.result()

    def send_nowait(self, msg: dict) -> None:
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


Respond = Callable[[dict], None]


async def serve(address: str, on_request: Callable[[dict, Respond], Awaitable[None] | None]) -> asyncio.AbstractServer:
    """Listen on HOST:PORT; call `on_request(msg, respond)` for every frame."""
    host, port = split_address(address)

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def responder(rid):
            def respond(reply: dict) -> None:
                if not writer.is_closing():
                    writer.write(encode_frame({**reply, "id": rid}))
            return respond
        try:
            while True:
                msg = await read_frame(reader)
                if msg is None:
                    break
                result = on_request(msg, responder(msg.get("id")))
                if asyncio.iscoroutine(result):
                    await result
        except (ConnectionLost, ValueError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(client, host, port, reuse_address=True)
