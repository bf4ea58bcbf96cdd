"""A simulated TCP network, and a Pool/Connection pair with replication/net.py's interface.

Hosts are the node names (n1..nN) plus `CLIENT_HOST`, the harness's own machine, which is in
no grudge and has no link fault (as on real hosts, where the rules act on the node hosts
only). Messages are passed as objects, never encoded; `NetConfig.copy_messages` round-trips
each through JSON, as the wire does, to check that nothing depends on sharing objects.

The model, per TCP connection (`Stream`): two FIFO directions; each message (a request, a
reply, a FIN) arrives after a seeded latency, never before an earlier message of the same
direction. What a real blocked or degraded TCP connection does, this does:

- **Partitions** (a grudge: node -> nodes whose packets it drops; nemesis/partition.py) stall
  a direction, they do not lose data: TCP retransmits. A message that meets a dropping
  receiver waits, with everything behind it, until the path is open again and the next
  retransmission (RTO 200 ms doubling, capped at 120 s, counted from when the stall began)
  gets through. The requester meanwhile sees its own request timeout (ConnectionLost), as
  net.py does; the connection stays open. A new connection across a partition does not fail
  at once: its SYNs are dropped and retried (1 s, 3 s, 7 s, ...) until the caller's connect
  timeout gives up (ConnectFailed), as iptables DROP makes it.
- **Process death** (kill, power loss, clean exit): the host's kernel lives on (the harness
  kills processes, not kernels), so it closes the sockets: the peers get a FIN (after the
  data in front of it) and fail their requests in flight with ConnectionLost; data arriving
  afterwards is answered with a reset. Connecting to a host whose node is not listening is
  refused at once (ConnectFailed after one round trip).
- **Pause** (SIGSTOP): the kernel still accepts connections and buffers what arrives; the
  process handles it, in arrival order, when resumed. Its peers' requests time out meanwhile.
- **Link faults** act on what the target host *receives* (nemesis/link.py):
  `slow-link` holds each message `link_delay_ms` +- normal `link_jitter_ms`, in arrival order
  (one queue per host, like the NFQUEUE daemon); `lossy-link` drops `link_loss_percent` of the
  segments it receives, which TCP turns into **delay**, not loss: each consecutive loss costs
  one retransmission timeout (200 ms, doubling), and later messages of that direction wait
  behind it (head-of-line blocking). A real stream survives a 20 % loss rate (15 consecutive
  losses would kill it), so modelling loss as a reset would invent failures TCP hides; at
  100 % loss the direction stalls like a partition. `reset-link` answers
  `reset_probability` of the messages (and SYNs) it receives with a TCP reset: the sender's
  side dies at once (its requests in flight fail), the receiver's side lives on half-open
  until it next sends and is reset in turn; a reset SYN is a refused connection.

Latency (`Latency`, defaults): a lognormal body (median 0.3 ms, sigma 0.5: p99 about 1 ms)
plus, with probability 1 %, a uniform 2-20 ms tail (a scheduler or GC hiccup), per message,
drawn as one of 4,096 seeded draws of that distribution. That is about what the real cluster
on network namespaces shows (median acks=all latency 2.4 ms for a produce that takes 2-3
round trips and a 1 ms linger). Not modelled: processing time inside a node (it handles a
message in zero virtual time), message sizes (a message is one segment for loss and reset;
bandwidth and TCP windows do not exist; buffers are unbounded), keepalives.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nemesis.kinds import lookup, with_effect
from replication.messages import decode_request
from replication.net import ConnectFailed, ConnectionLost, settler, split_address
from runformat.effects import DEGRADES_LINK

CLIENT_HOST = "client"
PORT = 9092

_REQ, _REP, _FIN = 0, 1, 2
_LATENCY_BITS = 12


@dataclass(frozen=True)
class Latency:
    """One-way latency of a message: lognormal body plus a uniform tail, in milliseconds."""

    median_ms: float = 0.3
    sigma: float = 0.5
    tail_probability: float = 0.01
    tail_min_ms: float = 2.0
    tail_max_ms: float = 20.0

    def draw(self, rng: random.Random) -> float:
        """One latency in seconds."""
        d = math.exp(math.log(self.median_ms / 1000) + self.sigma * rng.gauss(0.0, 1.0))
        if self.tail_probability and rng.random() < self.tail_probability:
            d += (self.tail_min_ms + (self.tail_max_ms - self.tail_min_ms) * rng.random()) / 1000
        return d

    def table(self, rng: random.Random, bits: int = 12) -> list[float]:
        """2**bits seeded draws. A message's latency is a uniformly chosen entry (one
        getrandbits call instead of a Box-Muller draw: the network's hottest line); 4,096
        entries hold about 41 of the 1 % tail. `draw`'s arithmetic inlined, each draw the
        same float from the same calls of `rng`: five tables a run made this 1 % of it."""
        gauss, uniform, exp = rng.gauss, rng.random, math.exp
        mu, sigma, tail = math.log(self.median_ms / 1000), self.sigma, self.tail_probability
        tail_min, tail_span = self.tail_min_ms, self.tail_max_ms - self.tail_min_ms
        out: list[float] = []
        for _ in range(1 << bits):
            d = exp(mu + sigma * gauss(0.0, 1.0))
            if tail and uniform() < tail:
                d += (tail_min + tail_span * uniform()) / 1000
            out.append(d)
        return out


@dataclass(frozen=True)
class NetConfig:
    latency: Latency = field(default_factory=Latency)
    rto_s: float = 0.2  # first retransmission timeout of an established connection (Linux RTO_MIN)
    rto_max_s: float = 120.0  # Linux TCP_RTO_MAX
    syn_rto_s: float = 1.0  # first SYN retransmission timeout (Linux TCP_TIMEOUT_INIT)
    syn_retries: int = 6  # Linux tcp_syn_retries: then connect() fails with ETIMEDOUT
    max_losses: int = 15  # Linux tcp_retries2: consecutive losses of one segment kill a stream
    copy_messages: bool = False  # JSON round trip per message, as on the wire


@dataclass
class LinkFault:
    """What a degraded host does to the segments it receives."""

    kind: str
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0  # probability that one segment is dropped
    reset: float = 0.0  # probability that one segment is answered with a reset
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    @classmethod
    def from_settings(cls, kind: str, settings: Mapping[str, float], rng: random.Random) -> LinkFault:
        """What the link kind says it does in the simulator (nemesis.kinds.links: `simulated_link`,
        beside its netfilter rule), with [nemesis] settings; a setting left out is the kind's
        default."""
        known = with_effect(DEGRADES_LINK)  # the kinds that say they degrade links
        if kind not in known:
            raise ValueError(f"unknown link fault {kind!r}; known: {', '.join(known)}")
        link = lookup(kind)
        defaults = {key: setting.default for key, setting in link.settings.items()}
        return cls(kind, **link.simulated_link({**defaults, **settings}), rng=rng)


class Timer:
    """A cancellable timer of a simulated process (lighter than an asyncio.TimerHandle)."""

    __slots__ = ("fn", "args", "cancelled")

    def __init__(self, fn: Callable[..., None], args: tuple) -> None:
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.fn(*self.args)


class Process:
    """An OS process as the network sees it. Subclasses decide how arriving messages and
    timers reach it (a paused process keeps them until it runs again)."""

    host: str
    alive: bool = True
    paused: bool = False  # a paused process gets its arrivals through deliver()

    def __init__(self, host: str) -> None:
        self.host = host
        self.streams: dict[Stream, None] = {}  # every stream it holds a side of, in order

    def deliver(self, fn: Callable[..., None], *args: Any) -> None:
        """Something arrived for this process: run fn now, or when it can run."""
        fn(*args)

    def call_later(self, delay: float, fn: Callable[..., None], *args: Any) -> Any:
        """A timer of this process (on its own clock); returns a handle with cancel()."""
        raise NotImplementedError

    def on_request(self, stream: Stream, rid: int | None, msg: Any) -> None:
        raise NotImplementedError(f"{self.host} does not serve requests")


class ClientProcess(Process):
    """The harness's client process: always running, timers on the loop's clock."""

    def __init__(self, loop: asyncio.AbstractEventLoop, host: str = CLIENT_HOST) -> None:
        super().__init__(host)
        self.loop = loop
        self._deadlines: dict[float, _Deadlines] = {}

    def call_later(self, delay: float, fn: Callable[..., None], *args: Any) -> Timer:
        timer = Timer(fn, args)
        deadlines = self._deadlines.get(delay)
        if deadlines is None:
            deadlines = self._deadlines[delay] = _Deadlines(self.loop)
        deadlines.add(self.loop.time() + delay, timer)
        return timer


class _Deadlines:
    """The timers of one delay, which expire in the order they were made: a FIFO, and one loop
    event, armed for the earliest. Nearly all are request timeouts cancelled by the answer;
    one loop event per timer kept thousands of them in the loop's heap, each pushed and
    popped for nothing (the heap was a third of a run's time under PyPy)."""

    __slots__ = ("loop", "queue", "armed")

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.queue: deque[tuple[float, Timer]] = deque()
        self.armed = False

    def add(self, when: float, timer: Timer) -> None:
        self.queue.append((when, timer))
        if not self.armed:
            self.armed = True
            self.loop.at(when, self._expire)

    def _expire(self) -> None:
        """Fire what is due (and drop cancelled timers from the front), then arm for the next;
        `armed` stays set meanwhile, so a timer made by one that fires does not arm early."""
        queue = self.queue
        due = self.loop.time() + 1e-9  # what the loop runs as due now (SimLoop._run_once)
        while queue and (queue[0][1].cancelled or queue[0][0] < due):
            timer = queue.popleft()[1]
            if not timer.cancelled:
                timer.fn(*timer.args)
        if queue:
            self.loop.at(queue[0][0], self._expire)
        else:
            self.armed = False


class _Host:
    __slots__ = ("name", "drops", "link", "release", "listener")

    def __init__(self, name: str) -> None:
        self.name = name
        self.drops: frozenset[str] = frozenset()
        self.link: LinkFault | None = None
        self.release = 0.0  # when the slow-link queue lets its last message through
        self.listener: Process | None = None


class _Dir:
    """One direction of a stream: FIFO, possibly stalled behind a blocked path."""

    __slots__ = ("stream", "src", "dst", "host", "to_client", "last", "stuck", "since", "dead")

    def __init__(self, stream: Stream, src: str, dst: _Host, to_client: bool) -> None:
        self.stream = stream
        self.src = src
        self.dst = dst.name
        self.host = dst  # the receiving host: its grudge and link fault apply
        self.to_client = to_client
        self.last = 0.0  # arrival time of the latest message scheduled
        self.stuck: list | None = None  # messages waiting for the path to open, in order
        self.since = 0.0  # when the stall began (retransmissions count from there)
        self.dead = False  # reset or closed: nothing more goes out this way


class _Call:
    __slots__ = ("on_done", "timer", "request")

    def __init__(self, on_done: Callable[[Any], None], request: Any = None) -> None:
        self.on_done = on_done
        self.timer: Any = None
        self.request = request  # kept only to decode a copied answer (copy_messages)


def wire_copy(msg: Any, request: Any = None) -> Any:
    """What the other end would decode from msg's JSON frame. Plain dicts: a JSON round trip.
    Typed messages (replication.messages, if present): their wire form round-tripped, then
    decoded as net.py decodes it (a request by its type, an answer by its request's type)."""
    to_wire = getattr(msg, "to_wire", None)
    if to_wire is None:
        return json.loads(json.dumps(msg))
    wire = json.loads(json.dumps(to_wire()))
    if request is None:
        return decode_request(wire)
    reply_from_wire = getattr(request, "reply_from_wire", None)
    return reply_from_wire(wire) if reply_from_wire is not None else wire


class Stream:
    """A TCP connection between a client process and a server process."""

    __slots__ = ("sid", "conn", "client", "server", "up", "down", "client_open", "server_open",
                 "waiting")

    def __init__(self, sid: int, conn: Connection, client: Process, server: Process,
                 hosts: Mapping[str, _Host]) -> None:
        self.sid = sid
        self.conn = conn
        self.client = client
        self.server = server
        self.up = _Dir(self, client.host, hosts[server.host], False)
        self.down = _Dir(self, server.host, hosts[client.host], True)
        self.client_open = True
        self.server_open = True
        self.waiting: dict[int, _Call] = {}

    def __hash__(self) -> int:
        return self.sid

    def __repr__(self) -> str:
        return f"Stream({self.sid} {self.client.host}->{self.server.host})"


class _Attempt:
    """One connect() in progress: SYNs until it is established, refused or timed out."""

    __slots__ = ("conn", "dst", "start", "k", "timer", "done")

    def __init__(self, conn: Connection, dst: str, start: float) -> None:
        self.conn = conn
        self.dst = dst
        self.start = start
        self.k = 0
        self.timer: Any = None
        self.done = False


class Network:
    def __init__(self, loop: asyncio.AbstractEventLoop, rng: random.Random, hosts: Iterable[str],
                 config: NetConfig | None = None) -> None:
        self.loop = loop
        self.config = config or NetConfig()
        self.rng = rng
        self._table = self.config.latency.table(rng, _LATENCY_BITS)
        self._bits = rng.getrandbits
        self.hosts = {name: _Host(name) for name in [*hosts, CLIENT_HOST]}
        self._stalled: dict[_Dir, None] = {}
        self._sids = itertools.count(1)
        self.messages = 0
        self._stats = {"stalled": 0, "resets": 0, "losses": 0, "connects": 0, "refused": 0}

    @property
    def stats(self) -> dict[str, int]:
        return {"messages": self.messages, **self._stats}

    def latency(self) -> float:
        return self._table[self._bits(_LATENCY_BITS)]

    # ---- faults --------------------------------------------------------------------------------

    def set_grudge(self, grudge: Mapping[str, Iterable[str]]) -> None:
        """Each host drops the packets of the hosts its grudge names; replaces the last one."""
        names = set(self.hosts) - {CLIENT_HOST}
        unknown = (set(grudge) | set().union(*map(set, grudge.values()))) - names if grudge else set()
        if unknown:
            raise ValueError(f"grudge names unknown nodes: {sorted(unknown)}")
        for name, host in self.hosts.items():
            host.drops = frozenset(grudge.get(name, ()))
        self._paths_changed()

    def grudge(self) -> dict[str, frozenset[str]]:
        return {n: h.drops for n, h in sorted(self.hosts.items()) if h.drops}

    def set_link(self, host: str, fault: LinkFault | None) -> None:
        h = self.hosts[host]
        h.link = fault
        if fault is None or not fault.delay_s:
            h.release = 0.0
        self._paths_changed()

    def blocked(self, src: str, dst: str) -> bool:
        """Segments from src never reach dst now (dst drops src, or loses everything)."""
        h = self.hosts[dst]
        return src in h.drops or (h.link is not None and h.link.loss >= 1.0)

    def _paths_changed(self) -> None:
        now = self.loop.time()
        for d in list(self._stalled):
            if not self.blocked(d.src, d.dst):
                del self._stalled[d]
                self.loop.at(self._next_retransmit(d.since, now), self._retransmit, d)

    def _next_retransmit(self, since: float, now: float) -> float:
        """The first retransmission at or after now of a segment first sent at `since`."""
        c = self.config
        t, rto = since + c.rto_s, c.rto_s
        while t < now:
            rto = min(rto * 2, c.rto_max_s)
            t += rto
        return t

    def _retransmit(self, d: _Dir) -> None:
        stuck = d.stuck
        if stuck is None or d in self._stalled:
            return
        if self.blocked(d.src, d.dst):  # blocked again before the retransmission went out
            self._stalled[d] = None
            return
        d.stuck = None
        for seg in stuck:  # sent before the direction died (a FIN last): all go out
            self._enqueue(d, seg)

    # ---- sending -------------------------------------------------------------------------------

    def _transmit(self, d: _Dir, seg: tuple) -> None:
        if not d.dead:
            self._enqueue(d, seg)

    def _enqueue(self, d: _Dir, seg: tuple) -> None:
        if d.stuck is not None:
            d.stuck.append(seg)
            return
        loop = self.loop
        now = loop.now
        host = d.host
        link = host.link
        if (host.drops and d.src in host.drops) or (link is not None and link.loss >= 1.0):
            d.stuck = [seg]
            d.since = now
            self._stalled[d] = None
            self._stats["stalled"] += 1
            return
        self.messages += 1
        t = now + self._table[self._bits(_LATENCY_BITS)]
        if link is not None:
            t = self._degrade(link, host, t)
            if t is None:  # answered with a reset
                d.dead = True
                self._stats["resets"] += 1
                loop.at(now + 2 * self.latency(), self._reset, d.stream, not d.to_client)
                return
        if t < d.last:
            t = d.last
        d.last = t
        loop.at(t, self._arrive, d, seg)

    def _degrade(self, link: LinkFault, host: _Host, t: float, syn: bool = False) -> float | None:
        """When a segment sent to `host` arrives under its link fault; None if it is answered
        with a reset; for a SYN (syn=True), -1.0 if it is lost (the SYN is retried)."""
        rng = link.rng
        if link.reset and rng.random() < link.reset:
            return None
        if syn and link.loss:
            if rng.random() < link.loss:
                self._stats["losses"] += 1
                return -1.0
        elif link.loss:
            k = 0
            while k < self.config.max_losses and rng.random() < link.loss:
                k += 1
            if k:
                self._stats["losses"] += k
                t += self._backoff(k)
        if link.delay_s or link.jitter_s:
            t = max(host.release, t + max(0.0, rng.gauss(link.delay_s, link.jitter_s)))
            host.release = t
        return t

    def _backoff(self, k: int) -> float:
        """Time lost to k consecutive retransmission timeouts."""
        c = self.config
        total, rto = 0.0, c.rto_s
        for _ in range(k):
            total += rto
            rto = min(rto * 2, c.rto_max_s)
        return total

    def _arrive(self, d: _Dir, seg: tuple) -> None:
        stream = d.stream
        if d.to_client:
            proc, is_open = stream.client, stream.client_open
        else:
            proc, is_open = stream.server, stream.server_open
        if not is_open:
            if seg[0] != _FIN:  # data for a socket that is gone: the kernel answers a reset
                self._send_reset(d)
            return
        if proc.paused:
            proc.deliver(self._receive, d, seg)
        else:
            self._receive(d, seg)

    def _send_reset(self, d: _Dir) -> None:
        """dst's kernel resets the stream: the sender's side learns one latency later (a reset
        is never retransmitted, so a blocked path loses it)."""
        if self.blocked(d.dst, d.src):
            return
        self._stats["resets"] += 1
        self.loop.at(self.loop.time() + self.latency(), self._reset, d.stream, not d.to_client)

    def _reset(self, stream: Stream, client_side: bool) -> None:
        proc = stream.client if client_side else stream.server
        if (stream.client_open if client_side else stream.server_open) and proc.alive:
            proc.deliver(self.close_side, stream, client_side, "connection reset")

    def _receive(self, d: _Dir, seg: tuple) -> None:
        stream = d.stream
        kind = seg[0]
        if d.to_client:
            if not stream.client_open:
                return
            if kind == _REP:
                call = stream.waiting.pop(seg[1], None)
                if call is not None:
                    if call.timer is not None:
                        call.timer.cancel()
                    if self.config.copy_messages:
                        call.on_done(wire_copy(seg[2], call.request))
                    else:
                        call.on_done(seg[2])
            elif kind == _FIN:
                self.close_side(stream, True, "closed by peer")
        else:
            if not stream.server_open:
                return
            if kind == _REQ:
                stream.server.on_request(stream, seg[1], seg[2])
            elif kind == _FIN:
                self.close_side(stream, False, "closed by peer")

    def request(self, stream: Stream, rid: int | None, msg: Any) -> None:
        if self.config.copy_messages:
            msg = wire_copy(msg)
        self._transmit(stream.up, (_REQ, rid, msg))

    def reply(self, stream: Stream, rid: int | None, msg: Any) -> None:
        """The server side answers; lost if that side is closed (net.py checks is_closing).
        With copy_messages the answer is copied where it is received (its decoding needs the
        request)."""
        if not stream.server_open or rid is None:
            return
        self._transmit(stream.down, (_REP, rid, msg))

    # ---- closing -------------------------------------------------------------------------------

    def close_side(self, stream: Stream, client_side: bool, why: str, notify: bool = True) -> None:
        """One side closes its socket: FIN to the peer; a client side fails its requests."""
        if client_side:
            if not stream.client_open:
                return
            stream.client_open = False
            stream.client.streams.pop(stream, None)
            conn = stream.conn
            if conn.stream is stream:
                conn.stream = None
            waiting, stream.waiting = stream.waiting, {}
            self._transmit(stream.up, (_FIN, None, None))
            stream.up.dead = True
            if notify:
                exc = ConnectionLost(f"connection to {conn.address} {why}")
                for call in waiting.values():
                    if call.timer is not None:
                        call.timer.cancel()
                    call.on_done(exc)
        else:
            if not stream.server_open:
                return
            stream.server_open = False
            stream.server.streams.pop(stream, None)
            self._transmit(stream.down, (_FIN, None, None))
            stream.down.dead = True

    def close_server_side(self, stream: Stream) -> None:
        """The server's handler for this connection ended (net.serve's writer.close())."""
        self.close_side(stream, False, "closed")

    def process_died(self, proc: Process) -> None:
        """Its kernel closes every socket it had: FINs go out, nothing is called back."""
        for stream in list(proc.streams):
            if stream.client is proc:
                self.close_side(stream, True, "closed", notify=False)
            if stream.server is proc:
                self.close_side(stream, False, "closed")
        host = self.hosts[proc.host]
        if host.listener is proc:
            host.listener = None

    def listen(self, proc: Process) -> None:
        self.hosts[proc.host].listener = proc

    # ---- connecting ----------------------------------------------------------------------------

    def connect(self, conn: Connection, timeout: float) -> _Attempt:
        """Start connecting conn; conn.connect_done(stream or exception) is called back in
        the owner's context. The owner's timeout applies, as asyncio.wait_for does."""
        self._stats["connects"] += 1
        a = _Attempt(conn, conn.host, self.loop.time())
        a.timer = conn.proc.call_later(timeout, self._connect_timeout, a)
        if conn.host not in self.hosts or conn.port != PORT or conn.host == CLIENT_HOST:
            self.loop.at(self.loop.time(), self._connect_failed, a, OSError(f"cannot resolve {conn.address}"))
        else:
            self._syn(a)
        return a

    def _syn(self, a: _Attempt) -> None:
        if a.done:
            return
        src, dst = a.conn.proc.host, a.dst
        now = self.loop.time()
        if self.blocked(src, dst) or self.blocked(dst, src):
            self._syn_lost(a)
            return
        t = now + self.latency()
        link = self.hosts[dst].link
        if link is not None:
            t = self._degrade(link, self.hosts[dst], t, syn=True)
            if t is None:  # the SYN is answered with a reset: refused
                self._stats["resets"] += 1
                self.loop.at(now + 2 * self.latency(), self._refused, a)
                return
            if t < 0:  # lost: retried on the SYN schedule
                self._syn_lost(a)
                return
        self.loop.at(t, self._syn_arrives, a)

    def _syn_lost(self, a: _Attempt) -> None:
        a.k += 1
        if a.k > self.config.syn_retries:
            when = a.start + self.config.syn_rto_s * (2 ** a.k - 1)
            self.loop.at(when, self._connect_failed, a, TimeoutError("connect timed out"))
            return
        self.loop.at(a.start + self.config.syn_rto_s * (2 ** a.k - 1), self._syn, a)

    def _syn_arrives(self, a: _Attempt) -> None:
        if a.done:
            return
        listener = self.hosts[a.dst].listener
        if listener is None or not listener.alive:
            self.loop.at(self.loop.time() + self.latency(), self._refused, a)
            return
        src = a.conn.proc.host
        now = self.loop.time()
        t = now + self.latency()
        link = self.hosts[src].link
        if link is not None:
            t = self._degrade(link, self.hosts[src], t, syn=True)
            if t is None or t < 0:
                self._syn_lost(a)  # SYN-ACK reset or lost: the client's SYN is retried
                return
        self.loop.at(t, self._established, a, listener)

    def _refused(self, a: _Attempt) -> None:
        self._stats["refused"] += 1
        self._connect_failed(a, ConnectionRefusedError(f"connection to {a.conn.address} refused"))

    def _connect_failed(self, a: _Attempt, exc: Exception) -> None:
        if a.done or not a.conn.proc.alive:
            return
        a.conn.proc.deliver(self._finish_connect, a, exc)

    def _connect_timeout(self, a: _Attempt) -> None:
        if not a.done:
            self._finish_connect(a, TimeoutError())

    def _established(self, a: _Attempt, listener: Process) -> None:
        if a.done or not a.conn.proc.alive:
            return
        if not listener.alive:
            self._refused(a)
            return
        stream = Stream(next(self._sids), a.conn, a.conn.proc, listener, self.hosts)
        a.conn.proc.streams[stream] = None
        listener.streams[stream] = None
        a.conn.proc.deliver(self._finish_connect, a, stream)

    def _finish_connect(self, a: _Attempt, result: Stream | Exception) -> None:
        if a.done:
            if isinstance(result, Stream):  # the caller gave up meanwhile: hang up
                self.close_side(result, True, "abandoned", notify=False)
            return
        a.done = True
        if a.timer is not None:
            a.timer.cancel()
        if isinstance(result, Stream) and not result.client_open:
            result = ConnectionLost(f"connection to {a.conn.address} closed")
        a.conn.connect_done(result)

    def cancel_attempt(self, a: _Attempt) -> None:
        if not a.done:
            a.done = True
            if a.timer is not None:
                a.timer.cancel()


class _Waiter:
    """A request (or a bare connect, msg None) waiting for the connection, like a coroutine
    waiting for net.Connection's lock."""

    __slots__ = ("msg", "timeout", "on_done", "connect_only")

    def __init__(self, msg: Any, timeout: float, on_done: Callable[[Any], None], connect_only: bool) -> None:
        self.msg = msg
        self.timeout = timeout
        self.on_done = on_done
        self.connect_only = connect_only


class Connection:
    """net.Connection over the simulated network: `request(msg, timeout)`, `send_nowait`,
    `_ensure(timeout)`, `connected`, `close()`, plus `call(msg, timeout, on_done)`, the
    callback form the node runtimes use (on_done gets the reply or a ConnectionLost)."""

    def __init__(self, net: Network, proc: Process, address: str) -> None:
        self.net = net
        self.proc = proc
        self.address = address
        try:
            self.host, self.port = split_address(address)
        except ValueError:
            self.host, self.port = address, -1
        self._ids = itertools.count(1)
        self.stream: Stream | None = None
        self._queue: deque[_Waiter] = deque()
        self._attempt: _Attempt | None = None

    @property
    def connected(self) -> bool:
        s = self.stream
        return s is not None and s.client_open

    # ---- the callback form -------------------------------------------------------------------

    def call(self, msg: Any, timeout: float, on_done: Callable[[Any], None]) -> None:
        if self._queue or not self.connected:
            self._queue.append(_Waiter(msg, timeout, on_done, False))
            if self._attempt is None:
                self._connect_next()
            return
        self._send(msg, timeout, on_done)

    def _send(self, msg: Any, timeout: float, on_done: Callable[[Any], None]) -> None:
        stream = self.stream
        assert stream is not None
        rid = next(self._ids)
        call = _Call(on_done, msg if self.net.config.copy_messages else None)
        stream.waiting[rid] = call
        call.timer = self.proc.call_later(timeout, self._timed_out, stream, rid, timeout)
        self.net.request(stream, rid, msg)

    def _timed_out(self, stream: Stream, rid: int, timeout: float) -> None:
        call = stream.waiting.pop(rid, None)
        if call is not None:
            call.on_done(ConnectionLost(f"no answer from {self.address} within {timeout}s"))

    def _connect_next(self) -> None:
        if self._queue:
            self._attempt = self.net.connect(self, self._queue[0].timeout)

    def connect_done(self, result: Stream | Exception) -> None:
        self._attempt = None
        if isinstance(result, Exception):
            w = self._queue.popleft()
            if w.connect_only:
                w.on_done(result)
            else:
                w.on_done(ConnectFailed(f"cannot connect to {self.address}: "
                                        f"{result or type(result).__name__}"))
            self._connect_next()
            return
        self.stream = result
        while self._queue and self.connected:
            w = self._queue.popleft()
            if w.connect_only:
                w.on_done(None)
            else:
                self._send(w.msg, w.timeout, w.on_done)
        if self._queue:  # the connection broke while flushing: the rest connect again
            self._connect_next()

    def drop(self) -> None:
        """The owner is gone: forget everything, call nobody back."""
        self._queue.clear()
        if self._attempt is not None:
            self.net.cancel_attempt(self._attempt)
            self._attempt = None
        if self.stream is not None:
            self.net.close_side(self.stream, True, "closed", notify=False)

    def close_now(self) -> None:
        queue, self._queue = self._queue, deque()
        if self._attempt is not None:
            self.net.cancel_attempt(self._attempt)
            self._attempt = None
        if self.stream is not None:
            self.net.close_side(self.stream, True, "closed")
        exc = ConnectionLost("closed")
        for w in queue:
            w.on_done(exc)

    # ---- net.Connection's interface -------------------------------------------------------------

    async def _ensure(self, timeout: float) -> Connection:
        if self.connected and not self._queue:
            return self
        fut = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiter(None, timeout, settler(fut), True))
        if self._attempt is None:
            self._connect_next()
        await fut
        return self

    def request(self, msg: Any, timeout: float) -> asyncio.Future:
        """net.Connection.request: await it for the answer. A future rather than a coroutine,
        which would add a frame to every request for nothing."""
        fut = asyncio.get_running_loop().create_future()
        self.call(msg, timeout, settler(fut))
        return fut

    def send_nowait(self, msg: Any) -> None:
        """Fire and forget (acks=0): sent if connected, no answer expected."""
        if self.connected:
            assert self.stream is not None
            self.net.request(self.stream, None, msg)

    async def close(self) -> None:
        self.close_now()


class Pool:
    """net.Pool over the simulated network: one Connection per address."""

    def __init__(self, net: Network, proc: Process) -> None:
        self.net = net
        self.proc = proc
        self._conns: dict[str, Connection] = {}

    def get(self, address: str) -> Connection:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._conns[address] = Connection(self.net, self.proc, address)
        return conn

    async def close(self) -> None:
        self.close_now()

    def close_now(self) -> None:
        for conn in self._conns.values():
            conn.close_now()
        self._conns.clear()

    def drop(self) -> None:
        for conn in self._conns.values():
            conn.drop()
        self._conns.clear()
