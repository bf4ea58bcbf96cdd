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
    127.0.0.1:8474            the HTTP API, on the host's loopback only

The server is `toxiproxy-server` (Shopify's Toxiproxy, built by `make bootstrap` into
.venv/bin), started and stopped over SSH like the node. Its API has no authentication: on any
address another machine or user can reach, anyone could list the proxies and add or remove
toxics in a running test. So it listens on the host's own loopback (inside a netns host's
namespace, or on a VM), and the harness reaches it through its SSH connection to the host: each
request is one direct-tcpip channel to 127.0.0.1:8474 there (`Remote.open_tunnel`; the netns
hosts' sshd permits exactly that forward and no other).

The harness talks to the API only through toxiproxy-python (PyPI `toxiproxy-python`, import
`toxiproxy`), wrapped thinly here because of four gaps of its 0.1.1 release:

- it sends its requests with `requests` to `http://APIConsumer.host:port`: its module's
  `requests` is replaced, once, by `_Tunnel`, which sends each over a channel to the host
  `api()` names, so no request can go anywhere else;
- it keeps the API host and port as *class* attributes of `APIConsumer`, shared by every
  caller: `api()` aims the tunnel under one process-wide lock for each use, which also makes
  it safe from the nemesis' worker threads (calls are serialised; on netns hosts a request
  takes about 1 ms, `toxics()` 2 ms and a toxic added and removed 9 ms, as directly over
  TCP before);
- its requests have no timeout: the lock is taken with one, a host whose API does not accept
  a connection within `CONNECT_TIMEOUT_S` is an error before any request is made, and each
  request's channel times out after `REQUEST_TIMEOUT_S`;
- it has no call to update a toxic: a toxic applied again is removed and added anew.

Its `Proxy.add_toxic` passes any toxic type through, so it knows every toxic Toxiproxy has.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import paramiko
import toxiproxy.api
from toxiproxy import Proxy, Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import NotFound

from control.host import Host
from control.remote import Remote, RemoteError
from control.tools import find_tool, tools_dir

VERSION = "2.12.0"  # the Toxiproxy release `make bootstrap` builds (Makefile: TOXIPROXY_VERSION)
BINARY = "toxiproxy-server"
DAEMON = "toxiproxy"  # its daemon (pidfile) name on the hosts
API_HOST = "127.0.0.1"  # on the host: its own loopback, reached through SSH
API_PORT = 8474
NODE_PORT = 19092  # the node's own listener, on loopback
OUT_BASE_PORT = 29100  # + i: a broker's local proxy to peer n<i>
INBOUND = "in"
INBOUND_PEERS = "in-peers"  # Kafka's layout: the inbound proxy its peers' proxies reach
CONNECT_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 30.0
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
    """The toxiproxy-server `make bootstrap` built (beside this interpreter, control.tools),
    else one on PATH; a clear error naming how to get one when there is none."""
    found = find_tool(BINARY)
    if found:
        return found
    raise ToxiproxyError(f"Toxiproxy is not installed ({BINARY} is neither in {tools_dir()} "
                         f"nor on the PATH), and a toxic fault needs it: install Go >= 1.21 "
                         f"and run `make bootstrap`, which builds v{VERSION} into .venv/bin, or "
                         f"put its release binary {BINARY}-linux-amd64 there as {BINARY} "
                         "(docs/toxiproxy.md)")


def node_port(index: int) -> int:
    """The local port of a broker's proxy to peer n<index>."""
    return OUT_BASE_PORT + index


def proxies_of(host: Host, peers: Sequence[Host], inbound_port: int,
               index_of: Callable[[Host], int],
               peer_port: int | None = None) -> list[dict[str, str]]:
    """The proxies a host's server holds: "in" for everyone, "to-<peer>" for each of `peers`
    (none on the controller, which opens no connections); `index_of(peer)` is its i in n<i>.
    With `peer_port` (Kafka's layout, control.kafka), a second inbound proxy "in-peers"
    listens there, and the "to-<peer>" proxies reach their peers at it."""
    out = [{"name": INBOUND, "listen": f"{host.address}:{inbound_port}",
            "upstream": f"127.0.0.1:{NODE_PORT}"}]
    if peer_port is not None:
        out.append({"name": INBOUND_PEERS, "listen": f"{host.address}:{peer_port}",
                    "upstream": f"127.0.0.1:{NODE_PORT}"})
    for peer in peers:
        if peer.name != host.name:
            out.append({"name": f"to-{peer.name}",
                        "listen": f"127.0.0.1:{node_port(index_of(peer))}",
                        "upstream": f"{peer.address}:{peer_port or inbound_port}"})
    return out


@dataclass(frozen=True)
class _Response:
    """What toxiproxy-python reads of a `requests` response."""

    status_code: int
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


class _Tunnel:
    """Stands in for `requests` in toxiproxy-python (its get, post and delete): every request
    goes to the API of the host `api()` aimed it at, over SSH, and nowhere else."""

    remote: Remote | None = None

    def get(self, url: str, params: Any = None, **_: Any) -> _Response:
        return self._request("GET", url)

    def delete(self, url: str, **_: Any) -> _Response:
        return self._request("DELETE", url)

    def post(self, url: str, data: Any = None, json: Any = None, **_: Any) -> _Response:
        return self._request("POST", url, json)

    def _request(self, method: str, url: str, body: Any = None) -> _Response:
        if self.remote is None:
            raise ToxiproxyError("toxiproxy API used outside control.toxiproxy.api()")
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        channel = None
        try:
            channel = self.remote.open_tunnel(API_HOST, API_PORT, timeout=CONNECT_TIMEOUT_S)
            channel.settimeout(REQUEST_TIMEOUT_S)
            channel.sendall(_request_bytes(method, path, body))
            response = http.client.HTTPResponse(channel, method=method)  # type: ignore[arg-type]
            response.begin()
            return _Response(response.status, response.read())
        except (OSError, EOFError, http.client.HTTPException, paramiko.SSHException,
                RemoteError) as e:
            raise ToxiproxyError(f"toxiproxy API of {self.remote.name}: {method} {path}: "
                                 f"{e}") from e
        finally:
            if channel is not None:
                channel.close()


def _request_bytes(method: str, path: str, body: Any) -> bytes:
    """One HTTP/1.1 request, headers and body in one write: sent in two (as http.client
    does), the body waited for the first part's delayed ACK in sshd's forward, 40 ms a call."""
    payload = b"" if body is None else json.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: {API_HOST}:{API_PORT}\r\n"
            f"Connection: close\r\nContent-Length: {len(payload)}\r\n"
            + ("Content-Type: application/json\r\n" if body is not None else "") + "\r\n")
    return head.encode() + payload


_tunnel = _Tunnel()
toxiproxy.api.requests = _tunnel  # toxiproxy-python's only way out: through `api()`'s host
APIConsumer.host, APIConsumer.port = API_HOST, API_PORT


@contextmanager
def api(host: Host) -> Iterator[Toxiproxy]:
    """toxiproxy-python's client aimed at this host's API, for the duration of the block."""
    if not _lock.acquire(timeout=LOCK_TIMEOUT_S):
        raise ToxiproxyError(f"toxiproxy API of {host.name}: another call held the client for "
                             f"{LOCK_TIMEOUT_S:g} s")
    try:
        if not _answers(host):
            raise ToxiproxyError(f"toxiproxy API of {host.name} ({API_HOST}:{API_PORT} there) "
                                 "does not accept connections")
        _tunnel.remote = host.remote
        yield Toxiproxy()
    finally:
        _tunnel.remote = None
        _lock.release()


def _answers(host: Host) -> bool:
    """Whether the API accepts a connection on the host's loopback (through SSH). A host whose
    sshd refuses the forward itself is an error naming the setting, not a wait."""
    try:
        host.remote.open_tunnel(API_HOST, API_PORT, timeout=CONNECT_TIMEOUT_S).close()
        return True
    except paramiko.ChannelException as e:
        if e.code == paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED:
            raise ToxiproxyError(
                f"sshd on {host.name} refuses to forward to {API_HOST}:{API_PORT}, the toxiproxy "
                "API: allow it there (AllowTcpForwarding local, PermitOpen "
                f"{API_HOST}:{API_PORT}; docs/toxiproxy.md)") from e
        return False
    except (RemoteError, paramiko.SSHException, OSError):
        return False


# -- the server -----------------------------------------------------------------------------


def start(host: Host, binary: str, seed: int = 0, timeout: float = 20.0) -> None:
    """Start the host's toxiproxy-server (if not running) with its API on the host's loopback,
    and wait until the API answers. `seed` makes toxicity draws reproducible."""
    if not host.remote.is_running(DAEMON):
        host.remote.start_daemon(DAEMON, [binary, "-host", API_HOST, "-port", str(API_PORT),
                                          "-seed", str(seed)], host.log_dir / "toxiproxy.log")
    deadline = time.monotonic() + timeout
    while not _answers(host):
        if not host.remote.is_running(DAEMON):
            tail = host.remote.run(["tail", "-n", "5", str(host.log_dir / "toxiproxy.log")],
                                   check=False).stdout.strip()
            raise ToxiproxyError(f"{binary} exited on {host.name}: {tail or 'no output'} (is it "
                                 "installed there? `make bootstrap` builds it; docs/toxiproxy.md)")
        if time.monotonic() > deadline:
            raise ToxiproxyError(f"toxiproxy API of {host.name} not up within {timeout:g} s")
        time.sleep(0.05)


def stop(host: Host) -> None:
    host.remote.stop_daemon(DAEMON)


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
            side = STREAMS[INBOUND if name in (INBOUND, INBOUND_PEERS) else "out"]
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
