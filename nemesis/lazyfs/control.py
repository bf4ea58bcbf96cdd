"""Control socket of a mount: one JSON request line in, one JSON response line out.

Requests are objects with an "op" key (lose-unsynced, flush-all, report, torn,
slow-fsync, eio-write, eio-fsync, ping) and the op's arguments; responses are
{"ok": true, ...} or {"ok": false, "error": "..."}.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nemesis.lazyfs.faults import Faults

if TYPE_CHECKING:
    from nemesis.lazyfs.kernel import KernelCache
    from nemesis.lazyfs.store import Store

MAX_REQUEST = 1 << 16
log = logging.getLogger(__name__)


class LazyFSError(RuntimeError):
    """The daemon refused or failed a control request."""


def _int_arg(req: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = req.get(key, default)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ValueError(f"{key!r} must be a non-negative integer, got {value!r}")
    return value


def _bool_arg(req: dict[str, Any], key: str) -> bool:
    value = req.get(key)
    if not isinstance(value, bool):
        raise ValueError(f"{key!r} must be true or false, got {value!r}")
    return value


class Controller:
    """Executes control requests against one mount's store and fault switches.

    With write-back caching (`kernel` given) the pages the kernel holds are unsynced data
    too: every request that reads or changes the unsynced state pulls them in first, and a
    power loss ends by making the kernel forget what the store lost (kernel.py)."""

    def __init__(self, store: Store, faults: Faults, kernel: KernelCache | None = None) -> None:
        self.store = store
        self.faults = faults
        self.kernel = kernel
        self._ops: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "ping": lambda req: {"pid": os.getpid()},
            "lose-unsynced": lambda req: self._power_loss(store.lose_unsynced, tear=False),
            "flush-all": lambda req: self._pushed(store.flush_all),
            "report": lambda req: self._pushed(store.report),
            "torn": lambda req: self._power_loss(
                lambda: store.torn(_int_arg(req, "seed"), str(req.get("mode", "prefix"))), tear=True),
            "slow-fsync": self._slow_fsync,
            "eio-write": lambda req: self._eio_write(_bool_arg(req, "on")),
            "eio-fsync": lambda req: self._switch("eio_fsync", _bool_arg(req, "on")),
        }

    def _pushed(self, op: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if self.kernel is not None:
            self.kernel.push(self.store.open_files())
        return op()

    def _power_loss(self, loss: Callable[[], dict[str, Any]], *, tear: bool) -> dict[str, Any]:
        if self.kernel is None:
            return loss()
        open_files = self.store.open_files()
        if tear:  # the kernel's pages must be in the store to be torn with its own
            self.kernel.push(open_files)
        old_files, old_dirs = self.store.namespace()
        result = loss()
        self._drain(result, tear, open_files)
        files, dirs = self.store.namespace()
        self.kernel.resync([*old_files, *old_dirs], files, dirs)
        return result

    def _drain(self, result: dict[str, Any], tear: bool, open_files: list[str]) -> None:
        """What the kernel still holds is not worth taking in only to drop it (so a plain
        loss does not pull it in first): written back after the loss, each page is dropped
        (written before it) and counted with the rest. The files open before the loss are
        the ones whose pages may still be on their way."""
        assert self.kernel is not None
        self.kernel.push(open_files)
        for path, lost in self.store.take_late_losses().items():
            result["lost_bytes"] += lost
            if tear:  # torn replies say per file what was unsynced, kept and lost
                entry = result["files"].setdefault(
                    path, {"unsynced_bytes": 0, "kept_bytes": 0, "lost_bytes": 0})
                entry["unsynced_bytes"] += lost
                entry["lost_bytes"] += lost
            else:
                result["files"][path] = result["files"].get(path, 0) + lost

    def _eio_write(self, on: bool) -> dict[str, Any]:
        if self.kernel is None:
            return self._switch("eio_write", on)
        if on:  # what was written before the fault is cached as before
            self.kernel.push(self.store.open_files())
        result = self._switch("eio_write", on)
        self.kernel.expire_attributes(on, self.store.namespace()[0])
        return result

    def _slow_fsync(self, req: dict[str, Any]) -> dict[str, Any]:
        self.faults.slow_fsync_ms = _int_arg(req, "ms") or 0
        return {"slow_fsync_ms": self.faults.slow_fsync_ms}

    def _switch(self, name: str, on: bool) -> dict[str, Any]:
        setattr(self.faults, name, on)
        return {name: on}

    def handle(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise ValueError('request must be a JSON object with a string "op"')
            op = self._ops.get(req["op"])
            if op is None:
                raise ValueError(f"unknown op {req['op']!r}; known: {', '.join(sorted(self._ops))}")
            return {"ok": True, **op(req)}
        except (ValueError, OSError) as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        except Exception as exc:  # a bug must reach the caller, not kill the handler silently
            log.exception("control request %r failed", line)
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}


class ControlServer:
    """Serves a Controller on a Unix socket from a background thread."""

    def __init__(self, path: str, controller: Controller) -> None:
        if len(os.fsencode(path)) >= 108:
            raise ValueError(f"control socket path too long for a Unix socket: {path!r}")
        if os.path.exists(path):
            os.unlink(path)  # left by a daemon that was killed

        class _Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(MAX_REQUEST)
                if line:
                    reply = controller.handle(line)
                    self.wfile.write(json.dumps(reply).encode() + b"\n")

        self.path = path
        self._server = socketserver.ThreadingUnixStreamServer(path, _Handler)
        self._server.daemon_threads = True
        os.chmod(path, 0o600)
        self._thread = threading.Thread(target=self._server.serve_forever, name="lazyfs-control", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits forever on a server never started
            self._server.shutdown()
        self._server.server_close()
        if os.path.exists(self.path):
            os.unlink(self.path)


class LazyFSClient:
    """Talks to a mount's control socket; every method returns the daemon's JSON reply."""

    def __init__(self, sock_path: str, timeout: float = 60.0) -> None:
        self.sock_path = sock_path
        self.timeout = timeout

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.sock_path)
            except OSError as exc:
                raise LazyFSError(f"{self.sock_path}: cannot connect to the lazyfs control socket: {exc}") from exc
            sock.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        if not data:
            raise LazyFSError(f"{self.sock_path}: connection closed without a reply to {op!r}")
        reply = json.loads(data)
        if not reply.get("ok"):
            raise LazyFSError(f"{self.sock_path}: {op}: {reply.get('error')}")
        return reply

    def ping(self) -> dict[str, Any]:
        return self.request("ping")

    def lose_unsynced(self) -> dict[str, Any]:
        return self.request("lose-unsynced")

    def flush_all(self) -> dict[str, Any]:
        return self.request("flush-all")

    def report(self) -> dict[str, Any]:
        return self.request("report")

    def torn(self, seed: int | None = None, mode: str = "prefix") -> dict[str, Any]:
        return self.request("torn", seed=seed, mode=mode)

    def slow_fsync(self, ms: int) -> dict[str, Any]:
        return self.request("slow-fsync", ms=ms)

    def eio_write(self, on: bool) -> dict[str, Any]:
        return self.request("eio-write", on=on)

    def eio_fsync(self, on: bool) -> dict[str, Any]:
        return self.request("eio-fsync", on=on)
