"""The simulated network's TCP model, with a tiny echo server: what a blocked, dead, paused or
degraded peer does to requests, as replication/net.py would see it on real hosts."""

from __future__ import annotations

import asyncio
import random

import pytest

from replication.net import ConnectFailed, ConnectionLost
from simulation.loop import SimLoop
from simulation.network import ClientProcess, Latency, LinkFault, NetConfig, Network, Pool, Process

ECHO = "n2:9092"


class Echo(Process):
    """A server process that answers every request with the request itself, at once."""

    def __init__(self, net: Network, host: str) -> None:
        super().__init__(host)
        self.net = net
        self.loop = net.loop
        self.seen: list = []
        self.paused = False
        self.frozen: list = []

    def call_later(self, delay, fn, *args):
        return self.loop.call_later(delay, fn, *args)

    def deliver(self, fn, *args):
        if not self.alive:
            return
        if self.paused:
            self.frozen.append((fn, args))
        else:
            fn(*args)

    def resume(self) -> None:
        self.paused = False
        while self.frozen:
            fn, args = self.frozen.pop(0)
            fn(*args)

    def on_request(self, stream, rid, msg) -> None:
        self.seen.append(msg)
        self.net.reply(stream, rid, {"echo": msg})

    def die(self) -> None:
        self.alive = False
        self.net.process_died(self)


def world(config: NetConfig | None = None):
    loop = SimLoop()
    net = Network(loop, random.Random(1), ["n1", "n2"], config)
    server = Echo(net, "n2")
    net.listen(server)
    pool = Pool(net, ClientProcess(loop))
    return loop, net, server, pool


async def timed(loop: SimLoop, coro):
    t = loop.time()
    try:
        return await coro, loop.time() - t
    except Exception as e:
        return e, loop.time() - t


def test_requests_are_answered_in_order_after_a_small_latency():
    loop, net, server, pool = world()

    async def main():
        conn = pool.get(ECHO)
        replies = await asyncio.gather(*(conn.request({"n": i}, 1.0) for i in range(50)))
        assert [r["echo"]["n"] for r in replies] == list(range(50))
        assert server.seen == [{"n": i} for i in range(50)]  # FIFO on one connection
        _, rtt = await timed(loop, conn.request({"n": 50}, 1.0))
        assert 0 < rtt < 0.05
    loop.run(main())


def test_connecting_to_a_host_without_a_listener_is_refused_at_once():
    loop, net, server, pool = world()
    net.process_died(server)  # its kernel closed the listening socket

    async def main():
        err, took = await timed(loop, pool.get(ECHO).request({}, 5.0))
        assert isinstance(err, ConnectFailed)
        assert took < 0.05  # a reset from the host's kernel, not a timeout
    loop.run(main())


def test_a_partition_stalls_a_connection_and_healing_delivers_what_waited():
    loop, net, server, pool = world()

    async def main():
        conn = pool.get(ECHO)
        await conn.request({"n": 0}, 1.0)
        # Node-to-node traffic is what a grudge cuts (the harness's host is in none): a
        # client process on n1 talks to n2.
        n1 = ClientProcess(loop, "n1")
        conn = Pool(net, n1).get(ECHO)
        await conn.request({"n": 1}, 1.0)
        net.set_grudge({"n1": {"n2"}, "n2": {"n1"}})
        err, took = await timed(loop, conn.request({"n": 2}, 2.0))
        assert isinstance(err, ConnectionLost) and not isinstance(err, ConnectFailed)
        assert took == pytest.approx(2.0)  # the request times out; no failure before that
        assert conn.connected  # TCP keeps retransmitting: the connection is not closed
        assert {"n": 2} not in server.seen
        net.set_grudge({})
        reply = await conn.request({"n": 3}, 5.0)
        assert reply["echo"] == {"n": 3}
        # The stalled request went out with the retransmission, before the new one.
        assert server.seen[-2:] == [{"n": 2}, {"n": 3}]
    loop.run(main())


def test_connecting_across_a_partition_times_out_rather_than_failing_fast():
    loop, net, server, pool = world()
    net.set_grudge({"n1": {"n2"}, "n2": {"n1"}})
    n1 = ClientProcess(loop, "n1")

    async def main():
        err, took = await timed(loop, Pool(net, n1).get(ECHO).request({}, 3.0))
        assert isinstance(err, ConnectFailed)
        assert took == pytest.approx(3.0)
        # Healed before the SYN retransmission at 7 s (1, 3, 7 ...): that SYN gets through.
        net_conn = Pool(net, n1).get(ECHO)
        loop.call_later(2.0, net.set_grudge, {})
        reply, took = await timed(loop, net_conn.request({"late": 1}, 10.0))
        assert reply["echo"] == {"late": 1}
        assert 3.0 <= took <= 3.1
    loop.run(main())


def test_a_dying_server_fails_the_requests_in_flight_with_connection_lost():
    loop, net, server, pool = world()
    server.on_request = lambda stream, rid, msg: server.seen.append(msg)  # never answers

    async def main():
        conn = pool.get(ECHO)
        task = asyncio.ensure_future(conn.request({"n": 1}, 10.0))
        await asyncio.sleep(0.5)
        server.die()
        err, took = await timed(loop, task)
        assert isinstance(err, ConnectionLost) and "closed" in str(err)
        assert took < 0.05  # the kernel's FIN, not the timeout
        assert not conn.connected
        err, _ = await timed(loop, conn.request({"n": 2}, 1.0))
        assert isinstance(err, ConnectFailed)  # nothing listens any more: refused
    loop.run(main())


def test_a_paused_server_accepts_but_answers_only_once_resumed():
    loop, net, server, pool = world()

    async def main():
        conn = pool.get(ECHO)
        server.paused = True
        err, took = await timed(loop, conn.request({"n": 1}, 1.0))
        # the kernel accepted the connection (that took a round trip), then held the request
        assert isinstance(err, ConnectionLost) and 1.0 < took < 1.05
        assert server.seen == []
        server.resume()
        assert server.seen == [{"n": 1}]
        reply = await conn.request({"n": 2}, 1.0)
        assert reply["echo"] == {"n": 2}
    loop.run(main())


def test_slow_link_delays_what_the_target_receives():
    loop, net, server, pool = world()

    async def main():
        conn = pool.get(ECHO)
        await conn.request({}, 1.0)
        net.set_link("n2", LinkFault("slow-link", delay_s=0.3, jitter_s=0.0))
        _, rtt = await timed(loop, conn.request({}, 5.0))
        assert 0.3 <= rtt < 0.35  # only what n2 receives is held; its answers are not
        net.set_link("n2", None)
        _, rtt = await timed(loop, conn.request({}, 5.0))
        assert rtt < 0.05
    loop.run(main())


def test_lossy_link_turns_loss_into_retransmission_delay_and_total_loss_into_a_stall():
    loop, net, server, pool = world()

    async def main():
        conn = pool.get(ECHO)
        await conn.request({}, 1.0)
        net.set_link("n2", LinkFault("lossy-link", loss=0.5, rng=random.Random(3)))
        rtts = []
        for i in range(40):
            reply, rtt = await timed(loop, conn.request({"i": i}, 30.0))
            assert reply["echo"] == {"i": i}  # nothing is lost on a TCP stream
            rtts.append(rtt)
        assert min(rtts) < 0.05 and max(rtts) >= 0.2  # some waited for a retransmission
        net.set_link("n2", LinkFault("lossy-link", loss=1.0))
        err, _ = await timed(loop, conn.request({}, 1.0))
        assert isinstance(err, ConnectionLost) and conn.connected
        net.set_link("n2", None)
        reply = await conn.request({"after": 1}, 5.0)
        assert reply["echo"] == {"after": 1}
    loop.run(main())


def test_reset_link_kills_streams_and_refuses_connections():
    loop, net, server, pool = world()

    async def main():
        conn = pool.get(ECHO)
        await conn.request({}, 1.0)
        net.set_link("n2", LinkFault("reset-link", reset=1.0))
        err, took = await timed(loop, conn.request({}, 5.0))
        assert isinstance(err, ConnectionLost) and "reset" in str(err) and took < 0.05
        err, _ = await timed(loop, conn.request({}, 5.0))
        assert isinstance(err, ConnectFailed)  # a reset SYN: refused
        net.set_link("n2", None)
        assert (await conn.request({"ok": 1}, 1.0))["echo"] == {"ok": 1}
    loop.run(main())


def test_copied_messages_are_what_the_wire_would_carry():
    loop, net, server, pool = world(NetConfig(copy_messages=True))

    async def main():
        reply = await pool.get(ECHO).request({"t": (1, 2), 3: "x"}, 1.0)
        assert reply == {"echo": {"t": [1, 2], "3": "x"}}
    loop.run(main())


def test_client_timers_fire_at_their_own_times_in_order_and_cancelled_ones_never():
    """A client's timers of one delay share one loop event (network._Deadlines): each still
    fires at its own time, in the order made; cancelled ones never; one made while another
    fires waits for its own time; other delays interleave by time."""
    loop = SimLoop()
    client = ClientProcess(loop)
    fired: list[tuple[str, float]] = []

    def note(name: str) -> None:
        fired.append((name, round(loop.time(), 9)))
        if name == "a":  # made while firing: due 1.0 after now, behind "b"
            client.call_later(1.0, note, "late")

    def start() -> None:
        client.call_later(1.0, note, "a")
        loop.at(0.25, lambda: client.call_later(1.0, note, "b"))
        dead = client.call_later(1.0, note, "cancelled")
        loop.at(0.5, dead.cancel)
        loop.at(0.5, lambda: client.call_later(0.3, note, "short"))

    loop.at(0.0, start)
    loop.run_for(5.0)
    assert fired == [("short", 0.8), ("a", 1.0), ("b", 1.25), ("late", 2.0)]


def test_a_link_fault_is_what_its_kind_says_it_does_in_the_simulator():
    rng = random.Random(1)
    slow = LinkFault.from_settings("slow-link", {"link_delay_ms": 300.0, "toxics": {}}, rng)
    assert (slow.delay_s, slow.jitter_s, slow.loss, slow.reset) == (0.3, 0.05, 0.0, 0.0)
    assert slow.rng is rng  # the world's per-fault stream draws the jitter and the losses
    assert LinkFault.from_settings("lossy-link", {}, rng).loss == 0.2  # the kind's default
    assert LinkFault.from_settings("lossy-link", {"link_loss_percent": 100.0}, rng).loss == 1.0
    assert LinkFault.from_settings("reset-link", {"reset_probability": 0.5}, rng).reset == 0.5
    with pytest.raises(ValueError, match="unknown link fault 'kill'; known: slow-link"):
        LinkFault.from_settings("kill", {}, rng)


@pytest.mark.parametrize("latency", [Latency(), Latency(median_ms=5.0, sigma=1.2, tail_probability=0.3),
                                     Latency(tail_probability=0.0)])
def test_a_latency_table_holds_the_draws_of_the_same_seed(latency: Latency) -> None:
    # table() inlines draw()'s arithmetic: the same floats, from the same calls of the rng.
    drawn = random.Random(7)
    assert latency.table(random.Random(7), bits=10) == [latency.draw(drawn) for _ in range(1 << 10)]


def test_a_latency_table_differs_where_the_draws_differ() -> None:
    # The must-fail twin of the test above: a tail drawn otherwise shows in the comparison.
    drawn = random.Random(7)
    other = Latency(tail_max_ms=21.0)
    assert Latency().table(random.Random(7), bits=10) != [other.draw(drawn) for _ in range(1 << 10)]
