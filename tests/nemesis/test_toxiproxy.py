"""Toxic faults through Toxiproxy: kinds, config, and each toxic's measured effect on a real
cluster of netns hosts, every node behind its own toxiproxy-server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest
from support.procs import alive
from support.users import reaches

from checkers.check import check_path
from checkers.exitcodes import Exit, UserError
from control import cleanup
from control import toxiproxy as tp
from control.cluster import Cluster
from control.host import Host
from control.parallel import on_hosts
from control.provider import LocalNetnsProvider
from control.remote import Endpoint, Remote
from harness.cli import main as harness_main
from harness.config import ConfigError, load_config, typed
from harness.report import report_path
from harness.report.story import _fault_text
from harness.runner import run_test
from harness.sim_run import as_simulated
from harness.test import Plan, Test
from nemesis.kinds import all_kinds, lookup, needs_toxiproxy
from nemesis.schedule import ScheduleParams, plan
from replication.__main__ import _routes
from replication.client import Client, ProduceError
from replication.messages import MetadataRequest, ProduceReply
from replication.metadata import PartitionState
from replication.net import encode_frame
from simulation.world import Verbs
from workloads.topics import create_topic, wait_healthy

TOXIC_KINDS = tuple(k.name for k in all_kinds() if k.family == "toxic")

# -- pure ----------------------------------------------------------------------------------


def test_each_toxic_kind_is_registered_real_hosts_only_and_maps_to_its_toxic():
    assert set(TOXIC_KINDS) == {"bandwidth", "latency", "stall", "slicer", "limit-data",
                                "slow-close", "reset-peer"}
    types = {k: lookup(k).toxic_type for k in TOXIC_KINDS}
    assert types == {"bandwidth": "bandwidth", "latency": "latency", "stall": "timeout",
                     "slicer": "slicer", "limit-data": "limit_data", "slow-close": "slow_close",
                     "reset-peer": "reset_peer"}
    assert not any(lookup(k).simulated for k in TOXIC_KINDS)
    assert needs_toxiproxy(["kill", "stall"]) and not needs_toxiproxy(["kill", "slow-link"])
    entries = plan(ScheduleParams(seed=5, faults=TOXIC_KINDS, time_limit=900, interval=5,
                                  duration=3, partitions=2, brokers=3))
    assert {e["kind"] for e in entries} == set(TOXIC_KINDS)
    assert all("select" in e["target"] for e in entries)


def test_the_config_fills_in_and_records_each_toxic():
    config = load_config("fast", ["nemesis.faults=['latency']",
                                  "nemesis.toxics.latency.latency=250",
                                  "nemesis.toxics.latency.direction='outbound'"])
    t = typed(config)
    assert t.hosts.toxiproxy is True  # "auto" with a toxic kind listed
    assert typed(load_config("fast")).hosts.toxiproxy is False  # default runs: no extra hop
    spec = lookup("latency").describe(t.nemesis.settings)
    assert spec == {"type": "latency", "direction": "outbound", "toxicity": 1.0,
                    "attributes": {"latency": 250, "jitter": 0}}
    # two levels of merging: a later --set keeps what an earlier layer gave the same kind
    again = load_config(None, ["nemesis.toxics.slicer.delay=5", "nemesis.toxics.slicer.average_size=64"])
    assert again["nemesis"]["toxics"]["slicer"]["delay"] == 5
    assert again["nemesis"]["toxics"]["slicer"]["average_size"] == 64
    # a config stored before toxics existed (no [nemesis.toxics], no hosts.toxiproxy) loads
    old = json.loads(json.dumps(config))
    del old["nemesis"]["toxics"], old["hosts"]["toxiproxy"]
    assert typed(old).hosts.toxiproxy is True
    assert typed(old).nemesis.toxics["bandwidth"]["rate"] == 1


@pytest.mark.parametrize("item, words", [
    ("nemesis.toxics.bandwidth.rate=0", "bandwidth.rate: expected an integer in 1.."),
    ("nemesis.toxics.latency.latency=-5", "latency.latency"),
    ("nemesis.toxics.latency.latency=1.5", "latency.latency"),
    ("nemesis.toxics.stall.direction='sideways'", "stall.direction: expected one of inbound"),
    ("nemesis.toxics.reset-peer.toxicity=0", "reset-peer.toxicity"),
    ("nemesis.toxics.limit-data.byte=10", "unknown setting 'byte'; known: bytes"),
    ("nemesis.toxics.slicer.size_variation=40", "must be less than slicer.average_size"),
    ("nemesis.toxics.jitter.latency=1", "unknown toxic fault 'jitter'"),
])
def test_bad_toxic_settings_are_config_errors_naming_the_key(item, words):
    with pytest.raises(ConfigError, match="nemesis.toxics") as e:
        load_config("fast", [item])
    assert words in str(e.value)


def test_toxic_faults_without_toxiproxy_are_refused_and_harness_run_exits_3(capsys):
    with pytest.raises(ConfigError, match="hosts.toxiproxy = false"):
        load_config("fast", ["nemesis.faults=['bandwidth']", "hosts.toxiproxy=false"])
    with pytest.raises(ConfigError, match="hosts.toxiproxy"):
        load_config("fast", ["hosts.toxiproxy='sometimes'"])
    # bad toxic attributes stop `harness run` before any host is touched: exit 3, one line
    rc = harness_main(["run", "--config", "fast", "--nemesis", "latency",
                       "--set", "nemesis.toxics.latency.jitter=-1"])
    assert rc == Exit.ERROR
    assert "nemesis.toxics" in capsys.readouterr().err


def test_a_missing_toxiproxy_server_names_make_bootstrap(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_TOOLS", str(tmp_path))  # instead of .venv/bin (control.tools)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(tp.ToxiproxyError, match="make bootstrap") as e:
        tp.local_binary()
    assert isinstance(e.value, OSError)  # `harness` prints it as one line, exit 3


def test_the_simulator_refuses_toxic_kinds_by_name():
    config = load_config("fast", ["nemesis.faults=['kill', 'slicer', 'stall']"])
    with pytest.raises(UserError, match="cannot apply slicer, stall"):
        as_simulated(config)

    class NoWorld:  # the verbs never reach a world: the toxic is refused first
        pass

    with pytest.raises(NotImplementedError, match="need real hosts"):
        asyncio.run(Verbs(NoWorld()).add_toxic("n2", "stall", {}))


def test_the_report_tells_each_toxic_in_words():

    fault = {"kind": "limit-data", "resolved": {"nodes": ["n2", "n3"], "toxic": {}},
             "started_s": 1.0, "ended_s": 4.0}
    assert _fault_text(fault, None) == ("connections of brokers 1, 2 (n2, n3) are cut after a "
                                        "byte limit for 3.00 s")
    for kind in TOXIC_KINDS:
        text = _fault_text({**fault, "kind": kind}, None)
        assert text.startswith("connections of ") and "hit by" not in text, text


def _host(name: str, address: str) -> Host:
    endpoint = Endpoint(name, address, 22, "root", Path("k"), Path("kh"), Path("/r"))
    return Host(name, address, Path("/d") / name / "data", Path("/r"), Path("/l"),
                Remote(endpoint))


def test_nodes_listen_on_loopback_behind_their_proxies():
    hosts = [_host(f"n{i}", f"10.0.0.{i}") for i in (1, 2, 3)]
    plain = Cluster(hosts, {}, python="py")
    assert "--advertise" not in plain.node_argv(hosts[1])
    argv = plain.node_argv(hosts[1])
    assert argv[argv.index("--listen") + 1] == "10.0.0.2:9092"
    c = Cluster(hosts, {}, python="py", toxiproxy="/opt/toxiproxy-server")
    argv = c.node_argv(hosts[1])
    assert argv[argv.index("--listen") + 1] == "127.0.0.1:19092"
    assert argv[argv.index("--advertise") + 1] == "10.0.0.2:9092"
    routes = [argv[i + 1] for i, a in enumerate(argv) if a == "--route"]
    assert routes == ["10.0.0.1:9092=127.0.0.1:29101", "10.0.0.3:9092=127.0.0.1:29103"]
    assert _routes(routes) == {"10.0.0.1:9092": "127.0.0.1:29101",
                               "10.0.0.3:9092": "127.0.0.1:29103"}
    controller = c.node_argv(hosts[0])
    assert "--route" not in controller and controller[controller.index("--listen") + 1] == \
        "127.0.0.1:19092"
    proxies = tp.proxies_of(hosts[1], hosts, 9092, c._index)
    assert proxies == [
        {"name": "in", "listen": "10.0.0.2:9092", "upstream": "127.0.0.1:19092"},
        {"name": "to-n1", "listen": "127.0.0.1:29101", "upstream": "10.0.0.1:9092"},
        {"name": "to-n3", "listen": "127.0.0.1:29103", "upstream": "10.0.0.3:9092"}]
    with pytest.raises(ValueError, match="ADDRESS=VIA"):
        _routes(["10.0.0.1:9092"])


# -- real, on netns hosts, each node behind its host's toxiproxy-server ---------------------

_root_and_sshd = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists(),
    reason="network namespaces, sshd and iptables need root and openssh-server",
)


def needs_hosts(test):
    """Real, on netns hosts, with toxiproxy-server (the `toxiproxy` marker)."""
    return pytest.mark.toxiproxy(_root_and_sshd(test))


def _binary() -> str:
    """`make test` builds toxiproxy-server first: a missing one is a failure, not a skip
    (unless make bootstrap said it had no Go to build it: the marker skips the test then)."""
    try:
        return tp.local_binary()
    except tp.ToxiproxyError as e:
        pytest.fail(str(e))


TOPIC = "t"
SYSTEM = {"replica.lag.time.max.ms": 2000, "broker.session.timeout.ms": 3000,
          "broker.heartbeat.interval.ms": 200, "min.insync.replicas": 1}


@pytest.fixture(scope="module")
def cluster():
    """Controller and three brokers, one partition on all three, behind Toxiproxy."""
    binary = _binary()
    provider = LocalNetnsProvider(None, 4, prefix="kch-toxics-")
    hosts = provider.up()
    c = Cluster(hosts, SYSTEM, python=provider.python, toxiproxy=binary)
    try:
        on_hosts(hosts, lambda h: c.start_toxiproxy(h, seed=1))
        for h in hosts:
            c.start(h)
        asyncio.run(_create(c))
        yield c
    finally:
        # SIGKILL first: a broker's controlled shutdown would wait for the controller
        on_hosts(hosts, lambda h: h.remote.signal("node", "KILL"))
        on_hosts(hosts, lambda h: h.remote.stop_all())
        provider.down()


async def _create(c: Cluster) -> None:
    await create_topic(c.bootstrap(), 3, TOPIC, 1, 3)
    assert await wait_healthy(c.bootstrap(), TOPIC, 1, 30)


@pytest.fixture
def healed(cluster):
    """Each test starts and ends with no toxic anywhere and a full ISR."""
    on_hosts(cluster.hosts, tp.remove_toxics)
    yield cluster
    on_hosts(cluster.hosts, tp.remove_toxics)
    assert asyncio.run(wait_healthy(cluster.bootstrap(), TOPIC, 1, 30))


def listening(host: Host) -> list[tuple[str, int, str]]:
    """The host's listening TCP sockets, as (address, port, program), from `ss` run there."""
    out = host.remote.run(["ss", "-Hltnp"]).stdout
    found = set()
    for line in out.splitlines():
        fields = line.split()
        address, _, port = fields[3].rpartition(":")
        program = fields[5].split('"')[1] if len(fields) > 5 and '"' in fields[5] else "?"
        found.add((address.strip("[]"), int(port), program))
    return sorted(found)


@pytest.mark.toxiproxy
@pytest.mark.usefixtures("attacker")
def test_no_other_user_reaches_the_toxiproxy_api(cluster):
    """Toxiproxy's API has no authentication: it listens on each host's loopback, where the
    harness reaches it through its SSH connection, and an unprivileged user on this machine
    reaches nothing of a host but its sshd and its node's advertised address (the "in"
    proxy). The hosts' sshd forwards to the API and to nothing else."""
    for h in cluster.hosts:
        sockets = listening(h)
        print(h.name, sockets)  # the record of what listens: `pytest -s` shows it
        reachable = {p for p in {p for _, p, _ in sockets} if reaches(h.address, p)}
        assert reachable == {22, 9092}, (h.name, sockets)
        api = [(a, p) for a, p, prog in sockets if prog.startswith("toxiproxy") and p == 8474]
        assert api == [("127.0.0.1", 8474)], (h.name, sockets)
    n1 = cluster.hosts[1]
    held = tp.toxics(n1)  # the harness itself still reaches it
    assert "in" in held and all(t == [] for t in held.values())
    with pytest.raises(paramiko.ChannelException) as refused:
        n1.remote.open_tunnel("127.0.0.1", tp.NODE_PORT)
    assert refused.value.code == paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED


async def _state(c: Cluster) -> PartitionState:
    client = Client(c.bootstrap(), request_timeout_s=2)
    try:
        return await client.partition_state(TOPIC, 0, refresh=True)
    finally:
        await client.close()


def _leader(c: Cluster) -> Host:
    return c.broker_hosts[asyncio.run(_state(c)).leader]


def _metadata_frame() -> bytes:
    return encode_frame(MetadataRequest(), 1)


def _exchange(host: Host, *, close_write: bool = False, whole: bool = False,
              timeout: float = 5.0) -> dict:
    """One metadata request over a raw socket to the host's advertised address (its proxy):
    the bytes back until EOF, reset or timeout (or, with `whole`, the whole reply), how many
    reads brought them, and when."""
    t0 = time.monotonic()
    out = {"data": b"", "reads": 0, "end": None, "first_s": None}
    with socket.create_connection((host.address, 9092), timeout=timeout) as s:
        s.sendall(_metadata_frame())
        try:
            while True:
                if close_write and len(out["data"]) >= 4 and \
                        len(out["data"]) >= 4 + struct.unpack(">I", out["data"][:4])[0]:
                    s.shutdown(socket.SHUT_WR)  # the whole reply is in: we close our side
                    close_write = False
                    out["closed_at_s"] = time.monotonic() - t0
                chunk = s.recv(65536)
                if not chunk:
                    out["end"] = "eof"
                    break
                out["first_s"] = out["first_s"] or time.monotonic() - t0
                out["data"] += chunk
                out["reads"] += 1
                if whole and len(out["data"]) >= 4 and len(out["data"]) == _frame_length(out["data"]):
                    out["end"] = "whole"  # the reply is in: no need to wait for more
                    break
        except ConnectionResetError:
            out["end"] = "reset"
        except TimeoutError:
            out["end"] = "timeout"
    out["seconds"] = time.monotonic() - t0
    return out


def _frame_length(data: bytes) -> int:
    return 4 + struct.unpack(">I", data[:4])[0]


@pytest.mark.netns
@needs_hosts
def test_slicer_dribbles_replies_in_slices_and_they_still_frame(healed):
    n3 = healed.hosts[2]
    plain = _exchange(n3, whole=True)
    assert plain["end"] == "whole"
    tp.add_toxic(n3, "slicer", "slicer", "outbound",
                 {"average_size": 8, "size_variation": 4, "delay": 2000})
    sliced = _exchange(n3, whole=True)
    # a whole reply that decodes as the unsliced one does, in about one read per slice
    assert len(sliced["data"]) == _frame_length(sliced["data"])
    assert json.loads(sliced["data"][4:]).keys() == json.loads(plain["data"][4:]).keys()
    assert sliced["reads"] >= len(sliced["data"]) / 12 / 2, (sliced["reads"], len(sliced["data"]))
    # and the client reads whole replies through it
    assert asyncio.run(_state(healed)).leader is not None


@pytest.mark.netns
@needs_hosts
def test_stall_holds_every_byte_then_closes_after_its_timeout(healed):
    n3 = healed.hosts[2]
    tp.add_toxic(n3, "stall", "timeout", "both", {"timeout": 800})
    stalled = _exchange(n3)
    assert stalled["data"] == b"" and stalled["end"] == "eof", stalled
    assert 0.7 <= stalled["seconds"] <= 2.5, stalled
    tp.remove_toxics(n3, "stall")
    assert _exchange(n3, whole=True)["end"] == "whole"


@pytest.mark.netns
@needs_hosts
def test_reset_peer_resets_connections(healed):
    n3 = healed.hosts[2]
    tp.add_toxic(n3, "reset-peer", "reset_peer", "inbound", {"timeout": 300})
    reset = _exchange(n3)
    assert reset["end"] == "reset" and reset["data"] == b"", reset
    assert 0.25 <= reset["seconds"] <= 2.0, reset


@pytest.mark.netns
@needs_hosts
def test_slow_close_delivers_a_close_late(healed):
    n3 = healed.hosts[2]
    quick = _exchange(n3, close_write=True)
    assert quick["end"] == "eof" and quick["seconds"] - quick["closed_at_s"] < 0.5, quick
    tp.add_toxic(n3, "slow-close", "slow_close", "inbound", {"delay": 1200})
    slow = _exchange(n3, close_write=True)
    # our FIN reaches the node 1.2 s late, so its own close (the EOF we read) comes that late
    assert slow["end"] == "eof" and slow["seconds"] - slow["closed_at_s"] >= 1.1, slow


@pytest.mark.netns
@needs_hosts
def test_limit_data_cuts_a_reply_mid_frame(healed):
    n3 = healed.hosts[2]
    tp.add_toxic(n3, "limit-data", "limit_data", "outbound", {"bytes": 100})
    cut = _exchange(n3)
    assert cut["end"] == "eof" and len(cut["data"]) == 100 < _frame_length(cut["data"]), cut


async def _sends(c: Cluster, seconds: float, value: str, acks: str) -> list[tuple[str, float, ProduceReply | str]]:
    """Sequential sends for `seconds`: (value, latency s, reply or error) each; a value is
    the text `value` with a unique prefix."""
    client = Client(c.bootstrap(), request_timeout_s=3, linger_ms=0)
    out = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    try:
        i = 0
        while loop.time() < end:
            v = f"{i:06d}{value}"
            i += 1
            t = loop.time()
            try:
                reply = await client.produce(TOPIC, 0, v, acks=acks)
                out.append((v, loop.time() - t, reply))
            except ProduceError as e:
                out.append((v, loop.time() - t, "fail" if e.definite else "unknown"))
    finally:
        await client.close()
    return out


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


@pytest.mark.netns
@needs_hosts
def test_latency_shifts_acknowledged_sends_by_the_set_amount_per_direction(healed):
    leader = _leader(healed)
    base = _median([d for _, d, r in asyncio.run(_sends(healed, 1.0, "x", "1"))
                    if isinstance(r, ProduceReply)])
    tp.add_toxic(leader, "latency", "latency", "inbound", {"latency": 150, "jitter": 0})
    inbound = _median([d for _, d, r in asyncio.run(_sends(healed, 2.0, "x", "1"))
                       if isinstance(r, ProduceReply)])
    tp.remove_toxics(leader, "latency")
    tp.add_toxic(leader, "latency", "latency", "outbound", {"latency": 60, "jitter": 0})
    outbound = _median([d for _, d, r in asyncio.run(_sends(healed, 1.5, "x", "1"))
                        if isinstance(r, ProduceReply)])
    tp.add_toxic(leader, "latency", "latency", "outbound", {"latency": 60, "jitter": 40})
    jittery = sorted(d for _, d, r in asyncio.run(_sends(healed, 2.0, "x", "1"))
                     if isinstance(r, ProduceReply))
    p10, p90 = jittery[len(jittery) // 10], jittery[len(jittery) * 9 // 10]
    print(f"acks=1 send median: {base * 1000:.1f} ms, +150 ms inbound: {inbound * 1000:.1f} ms, "
          f"+60 ms outbound: {outbound * 1000:.1f} ms, 60 +- 40 ms outbound: p10 "
          f"{p10 * 1000:.1f} ms, median {_median(jittery) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms")
    # at least the set amount, and never twice it (each direction is delayed once)
    assert 0.140 <= inbound - base <= 0.240, (base, inbound)
    assert 0.055 <= outbound - base <= 0.105, (base, outbound)
    # Uniform jitter of +-40 ms around the same 60: p10 near 28 ms and p90 near 92 ms, 64 ms
    # apart. Held by the spread within this phase, not by p10 against the base: the base is
    # measured seconds earlier, and a bound of 45 ms on p10 minus base failed once in a full
    # suite on this shared machine (46.3 ms), where the spread is unmoved by a shift of all.
    assert 0.045 <= _median(jittery) - base <= 0.105, (base, jittery)
    assert 0.040 <= p90 - p10 <= 0.110, (p10, p90)


@pytest.mark.netns
@needs_hosts
def test_a_bandwidth_cap_bounds_the_targets_inbound_throughput(healed):
    leader = _leader(healed)
    payload = "v" * 8000

    def throughput(seconds: float) -> float:
        sends = asyncio.run(_sends(healed, seconds, payload, "1"))
        acked = [d for _, d, r in sends if isinstance(r, ProduceReply)]
        return len(acked) * len(payload) / max(sum(acked), 1e-9)

    free = throughput(1.0)
    tp.add_toxic(leader, "bandwidth", "bandwidth", "inbound", {"rate": 40})  # 40,000 B/s
    capped = throughput(3.0)
    print(f"acked payload into the leader: {free / 1000:.0f} KB/s free, "
          f"{capped / 1000:.1f} KB/s under a 40 KB/s cap")
    assert capped <= 40_000 * 1.1, capped
    assert capped >= 40_000 * 0.5, capped
    assert free >= 5 * 40_000, free


@pytest.mark.netns
@needs_hosts
def test_limit_data_gives_unknown_outcomes_never_wrong_ones(healed):
    leader = _leader(healed)
    tp.add_toxic(leader, "limit-data", "limit_data", "inbound", {"bytes": 1500})
    sends = asyncio.run(_sends(healed, 3.0, "y" * 200, "all"))
    tp.remove_toxics(leader, "limit-data")
    outcomes = {kind: [s for s in sends if (s[2] if isinstance(s[2], str) else "ok") == kind]
                for kind in ("ok", "fail", "unknown")}
    print({k: len(v) for k, v in outcomes.items()})
    assert outcomes["unknown"], "no connection was cut"
    assert outcomes["ok"], "nothing got through between the cuts"
    log = dict(asyncio.run(_read_all(healed)))
    for value, _, reply in outcomes["ok"]:
        assert log.get(reply.offset) == value  # acknowledged: there, at its offset
    assert not {v for v, _, _ in outcomes["fail"]} & set(log.values())  # failed: never there


async def _read_all(c: Cluster) -> list[tuple[int, str]]:
    client = Client(c.bootstrap(), request_timeout_s=5)
    records: list[tuple[int, str]] = []
    try:
        while True:
            reply = await client.fetch(TOPIC, 0, len(records), max_records=1000)
            if not reply.records:
                return records
            records += list(reply.records)
    finally:
        await client.close()


def _isr_changes(c: Cluster) -> list[list[int]]:
    path = Path(str(c.controller_host.work_dir)) / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e["isr"] for e in events if e.get("kind") == "partition-change"
            and e.get("reason") == "alter-partition" and e.get("topic") == TOPIC]


@pytest.mark.netns
@needs_hosts
def test_a_bandwidth_capped_follower_leaves_the_isr_and_rejoins_when_healed(healed):
    state = asyncio.run(_state(healed))
    follower_id = next(r for r in state.replicas if r != state.leader)
    follower = healed.broker_hosts[follower_id]
    before = len(_isr_changes(healed))
    tp.add_toxic(follower, "bandwidth", "bandwidth", "inbound", {"rate": 2})

    async def load_until(pred, timeout: float) -> float:
        """Send 8 KB values (acks=1) until the ISR satisfies pred; seconds it took."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while loop.time() - t0 < timeout:
            await _sends(healed, 0.5, "z" * 8000, "1")
            if pred((await _state(healed)).isr):
                return loop.time() - t0
        raise AssertionError(f"ISR never changed as expected within {timeout} s")

    shrunk_after = asyncio.run(load_until(lambda isr: follower_id not in isr, 20))
    tp.remove_toxics(follower, "bandwidth")
    assert asyncio.run(wait_healthy(healed.bootstrap(), TOPIC, 1, 30))
    changes = _isr_changes(healed)[before:]
    print(f"follower {follower_id} left the ISR {shrunk_after:.1f} s into the cap "
          f"(replica.lag.time.max.ms = 2000); ISR changes: {changes}")
    assert shrunk_after >= 1.5
    out = next(i for i, isr in enumerate(changes) if follower_id not in isr)
    assert any(follower_id in isr for isr in changes[out + 1:]), changes


# A run that crashed (SIGKILL: no finally, no down()) with Toxiproxy up on its hosts.
CRASHER = """
import sys
from control.cluster import Cluster
from control.provider import LocalNetnsProvider
from control import toxiproxy as tp
p = LocalNetnsProvider(None, 2, prefix="kch-toxcrash-")
hosts = p.up()
c = Cluster(hosts, {}, python=p.python, toxiproxy=tp.local_binary())
c.start_toxiproxy(hosts[1])
print(p.slot, hosts[1].remote.pid(tp.DAEMON), flush=True)
sys.stdin.read()
"""



@pytest.mark.netns
@needs_hosts
def test_cleanup_kills_the_toxiproxy_servers_of_a_crashed_run_and_only_those(cluster):
    _binary()
    proc = subprocess.Popen([sys.executable, "-c", CRASHER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        slot, pid = map(int, proc.stdout.readline().split())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert alive(pid)
    live = [h.remote.pid(tp.DAEMON) for h in cluster.hosts]
    cleaned = cleanup.cleanup_stale()  # only slots whose owner is dead: other runs go on
    assert slot in cleaned and not alive(pid)
    assert all(alive(p) for p in live)  # this module's live cluster kept its servers


# Each kind once, on a cluster that must lose nothing: recorded, healed, checked.
TOXIC_PLAN = [
    {"id": i, "kind": kind, "start_s": 1.0 + 2.0 * i, "duration_s": 1.5,
     "target": {"select": select, "partition": 0, "pick": i + 1}}
    for i, (kind, select) in enumerate([
        ("latency", "leader"), ("bandwidth", "followers"), ("limit-data", "leader"),
        ("stall", "leader"), ("slicer", "controller"), ("slow-close", "random-broker"),
        ("reset-peer", "leader")])
]  # fmt: skip


@pytest.mark.netns
@needs_hosts
def test_a_run_under_every_toxic_records_each_heals_them_and_loses_nothing(tmp_path):
    _binary()

    config = load_config("fast", ["nodes=4", "time_limit=16",
                                  f"nemesis.faults={list(TOXIC_KINDS)}",
                                  "nemesis.toxics.bandwidth.rate=4",
                                  "nemesis.toxics.limit-data.bytes=2000"])
    # Checked below by the single-process checker (checkers.reference, the same definitions):
    # a Spark session would triple this test's time; tests/checkers hold the two equal.
    run_dir = run_test(Test.of(config, tmp_path, plan=Plan.scripted(TOXIC_PLAN), check=False))
    results = check_path(run_dir, backend="reference")
    assert results["valid"] is True, results["anomalies"]
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    started = {o["f"][len("start-"):]: o["value"] for o in ops
               if o["process"] == "nemesis" and o["f"].startswith("start-")}
    assert set(started) == set(TOXIC_KINDS)
    assert all("error" not in v for v in started.values()), started
    assert started["bandwidth"]["toxic"] == {"type": "bandwidth", "direction": "inbound",
                                             "toxicity": 1.0, "attributes": {"rate": 4}}
    assert started["stall"]["toxic"]["type"] == "timeout"
    assert started["slicer"]["nodes"] == ["n1"]
    assert len(started["bandwidth"]["nodes"]) == 2  # both followers
    schedule = json.loads((run_dir / "schedule.json").read_text())
    assert [f["outcome"] for f in schedule["faults"]] == ["ok"] * len(TOXIC_PLAN)
    assert schedule["faults"][2]["resolved"]["toxic"]["attributes"] == {"bytes": 2000}
    assert "toxiproxy.log" in {p.name for p in (run_dir / "nodes" / "n2").iterdir()}
    # every acknowledged send is in the final read at its offset, no failed one is anywhere
    final: dict[int, dict[int, int]] = {}
    for o in ops:
        if o["f"] == "final-poll" and o["type"] == "ok":
            final.setdefault(o["partition"], {}).update({off: v for off, v in o["records"]})
    assert set(final) == {0, 1, 2}
    sends = [o for o in ops if o["f"] == "send" and o["type"] != "invoke"]
    oks = [o for o in sends if o["type"] == "ok"]
    assert len(oks) > 1000 and any(o["type"] == "info" for o in sends)  # limit-data cut some
    assert all(final[o["partition"]].get(o["offset"]) == o["value"] for o in oks)
    present = {v for records in final.values() for v in records.values()}
    assert not {o["value"] for o in sends if o["type"] == "fail"} & present
    report = report_path(run_dir).read_text()
    assert "limit_data" in report and "reset_peer" in report  # each toxic, in the faults table
