"""Toxiproxy beside every node: the server on each host, its proxies, and its toxics.

Layout on a host when a run uses Toxiproxy (`Cluster.toxiproxy`):

    host.address:9092         proxy "in": the node's advertised address; every connection
                              into the node (clients, peers' fetches, brokers' heartbeats to
                              the controller) crosses it
    127.0.0.1:19092           where the node itself listens (loopback: nothing from outside
                              reaches it except through "in")
    127.0.0.1:29100+i         proxy "to-n<i>" on brokers: the broker's own connections to
                              peer n<i> go through it (`--route`), so a toxic on a node acts
                              on what it receives over the connections it opened too (a
                              follower's fetch replies)
    host.address:8474         the HTTP API, bound to the host's own address only

The server is `toxiproxy-server` (Shopify's Toxiproxy, built by `make bootstrap` into
.venv/bin), started and stopped over SSH like the node. The harness talks to its API only
through toxiproxy-python (PyPI `toxiproxy-python`, import `toxiproxy`), wrapped thinly here
because of three gaps of its 0.1.1 release:

- it keeps the API host and port as *class* attributes of `APIConsumer`, shared by every
  caller: `api()` sets them under one process-wide lock for each use, which also makes it
  safe from the nemesis' worker threads (calls are serialised; each takes about a
  millisecond on our hosts);
- its requests have no timeout: the lock is taken with one, and a host whose API port does
  not accept a connection within `CONNECT_TIMEOUT_S` is an error before any request is made;
- it has no call to update a toxic: a toxic applied again is removed and added anew.

Its `Proxy.add_toxic` passes any toxic type through, so it knows every toxic Toxiproxy has.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toxiproxy import Proxy, Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import NotFound

from control.host import Host

VERSION = "2.12.0"  # the Toxiproxy release `make bootstrap` builds (Makefile: TOXIPROXY_VERSION)
BINARY = "toxiproxy-server"
DAEMON = "toxiproxy"  # its daemon (pidfile) name on the hosts
API_PORT = 8474
NODE_PORT = 19092  # the node's own listener, on loopback
OUT_BASE_PORT = 29100  # + i: a broker's local proxy to peer n<i>
INBOUND = "in"
CONNECT_TIMEOUT_S = 2.0
LOCK_TIMEOUT_S = 30.0
# Where a direction of a toxic goes on each proxy: on "in" the node is Toxiproxy's upstream,
# on a "to-*" proxy the node is its client.
STREAMS = {INBOUND: {"inbound": "upstream", "outbound": "downstream"},
           "out": {"inbound": "downstream", "outbound": "upstream"}}
DIRECTIONS = ("inbound", "outbound", "both")

_lock = threading.Lock()


class ToxiproxyError(OSError):
    """Toxiproxy missing, not answering, or refusing a request: the environment's fault, so
    `harness` prints it as one line and exits 3."""


def local_binary() -> str:
    """The toxiproxy-server `make bootstrap` built (beside this interpreter), else one on PATH;
    a clear error naming `make bootstrap` when there is none."""
    beside = Path(sys.executable).parent / BINARY
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(BINARY)
    if found:
        return found
    raise ToxiproxyError(f"{BINARY} not found (looked in {beside.parent} and on PATH): run "
                         "`make bootstrap`, which builds Toxiproxy "
                         f"v{VERSION} into .venv/bin (docs/toxiproxy.md)")


def node_port(index: int) -> int:
    """The local port of a broker's proxy to peer n<index>."""
    return OUT_BASE_PORT + index


def proxies_of(host: Host, peers: Sequence[Host], inbound_port: int,
               index_of: Callable[[Host], int]) -> list[dict[str, str]]:
    """The proxies a host's server holds: "in" for everyone, "to-<peer>" for each of `peers`
    (none on the controller, which opens no connections); `index_of(peer)` is its i in n<i>."""
    out = [{"name": INBOUND, "listen": f"{host.address}:{inbound_port}",
            "upstream": f"127.0.0.1:{NODE_PORT}"}]
    for peer in peers:
        if peer.name != host.name:
            out.append({"name": f"to-{peer.name}",
                        "listen": f"127.0.0.1:{node_port(index_of(peer))}",
                        "upstream": f"{peer.address}:{inbound_port}"})
    return out


@contextmanager
def api(host: Host) -> Iterator[Toxiproxy]:
    """toxiproxy-python's client aimed at this host's API, for the duration of the block."""
    if not _lock.acquire(timeout=LOCK_TIMEOUT_S):
        raise ToxiproxyError(f"toxiproxy API of {host.name}: another call held the client for "
                             f"{LOCK_TIMEOUT_S:g} s")
    try:
        if not _can_connect(host.address, API_PORT):
            raise ToxiproxyError(f"toxiproxy API of {host.name} ({host.address}:{API_PORT}) "
                                 "does not accept connections")
        APIConsumer.host, APIConsumer.port = host.address, API_PORT
        yield Toxiproxy()
    finally:
        _lock.release()


def _can_connect(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S).close()
        return True
    except OSError:
        return False


# -- the server -----------------------------------------------------------------------------


def start(host: Host, binary: str, seed: int = 0, timeout: float = 20.0) -> None:
    """Start the host's toxiproxy-server (if not running) with its API on the host's own
    address, and wait until the API answers. `seed` makes toxicity draws reproducible."""
    if not host.remote.is_running(DAEMON):
        host.remote.start_daemon(DAEMON, [binary, "-host", host.address, "-port", str(API_PORT),
                                          "-seed", str(seed)], host.log_dir / "toxiproxy.log")
    deadline = time.monotonic() + timeout
    while not _can_connect(host.address, API_PORT):
        if not host.remote.is_running(DAEMON):
            tail = host.remote.run(["tail", "-n", "5", str(host.log_dir / "toxiproxy.log")],
                                   check=False).stdout.strip()
            raise ToxiproxyError(f"{binary} exited on {host.name}: {tail or 'no output'} (is it "
                                 "installed there? `make bootstrap` builds it; docs/toxiproxy.md)")
        if time.monotonic() > deadline:
            raise ToxiproxyError(f"toxiproxy API of {host.name} not up within {timeout:g} s")
        time.sleep(0.05)


def stop(host: Host) -> None:
    host.remote.signal(DAEMON, "TERM")


def ensure_proxies(host: Host, proxies: Sequence[Mapping[str, str]]) -> None:
    """Exactly these proxies, enabled and without toxics (a leftover server keeps its own)."""
    with api(host) as server:
        server.reset()  # re-enables every proxy and removes every toxic
        existing = server.proxies()
        for spec in proxies:
            old = existing.get(spec["name"])
            if old is not None and (old.listen, old.upstream) != (spec["listen"], spec["upstream"]):
                old.destroy()
                old = None
            if old is None:
                server.create(upstream=spec["upstream"], name=spec["name"], listen=spec["listen"],
                              enabled=True)


# -- toxics --------------------------------------------------------------------------------


def toxic_name(kind: str, stream: str) -> str:
    return f"kch-{kind}-{stream}"


def add_toxic(host: Host, kind: str, toxic_type: str, direction: str,
              attributes: Mapping[str, int], toxicity: float = 1.0) -> list[dict[str, Any]]:
    """Add a toxic of `kind` on every proxy of the host, in `direction` as the node sees it
    (inbound, outbound or both); returns what was added, one entry per proxy and stream."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}: expected one of {', '.join(DIRECTIONS)}")
    wanted = ("inbound", "outbound") if direction == "both" else (direction,)
    added = []
    with api(host) as server:
        for name, proxy in sorted(server.proxies().items()):
            side = STREAMS[INBOUND if name == INBOUND else "out"]
            for d in wanted:
                stream = side[d]
                tname = toxic_name(kind, stream)
                _destroy_toxic(proxy, tname)  # applied again: replaced, not refused
                try:
                    proxy.add_toxic(name=tname, type=toxic_type, stream=stream,
                                    toxicity=float(toxicity), attributes=dict(attributes))
                except Exception as e:  # InvalidToxic, NotFound: the server's own words
                    raise ToxiproxyError(f"toxiproxy on {host.name} refused {toxic_type} on "
                                         f"{name}/{stream}: {e}") from e
                added.append({"proxy": name, "stream": stream, "name": tname})
    return added


def remove_toxics(host: Host, kind: str | None = None) -> int:
    """Remove the toxics of `kind` (every toxic with None) from every proxy; how many."""
    removed = 0
    with api(host) as server:
        for proxy in server.proxies().values():
            for tname in proxy.toxics():
                if kind is None or tname in (toxic_name(kind, "upstream"),
                                             toxic_name(kind, "downstream")):
                    removed += _destroy_toxic(proxy, tname)
    return removed


def toxics(host: Host) -> dict[str, list[dict[str, Any]]]:
    """proxy name -> its toxics (name, type, stream, toxicity, attributes)."""
    with api(host) as server:
        return {name: [{"name": t.name, "type": t.type, "stream": t.stream,
                        "toxicity": t.toxicity, "attributes": t.attributes}
                       for t in proxy.toxics().values()]
                for name, proxy in sorted(server.proxies().items())}


def _destroy_toxic(proxy: Proxy, name: str) -> int:
    try:
        proxy.destroy_toxic(name)
    except NotFound:
        return 0
    return 1
