"""Link faults: the netem/iptables settings, and real degradation between netns hosts."""

from __future__ import annotations

import json
import os
import random
import shlex
import struct
import sys
import time
from pathlib import Path

import pytest

from control import NetnsProvider
from control.provider import CHECKOUT
from harness.config import load_config
from nemesis import link, linkdelay
from nemesis.kinds import all_kinds, lookup
from nemesis.schedule import ScheduleParams, plan

LINK_FAULTS = tuple(k.name for k in all_kinds() if k.family == "link")

# -- pure ----------------------------------------------------------------------------------


def test_settings_fill_in_defaults_and_each_kind_has_its_rule():
    s = link.settings({"link_delay_ms": 300, "link_jitter_ms": 0, "link_loss_percent": 2.5})
    assert s["reset_probability"] == 0.05
    # SSH and Toxiproxy's API are exempt (the harness keeps control), and loopback (a node
    # talks to its own Toxiproxy over it)
    assert link.rule("slow-link", s, 22) == (
        "! -i lo -p tcp -m multiport ! --ports 22,8474 -j NFQUEUE --queue-num 7341 "
        "--queue-bypass")
    assert link.rule("lossy-link", s, 2222).endswith(
        "! --ports 2222,8474 -m statistic --mode random --probability 0.025000 -j DROP")
    assert link.rule("reset-link", s, 22).endswith(
        "--probability 0.050000 -j REJECT --reject-with tcp-reset")
    assert lookup("slow-link").describe(s) == {"link_delay_ms": 300, "link_jitter_ms": 0}
    with pytest.raises(ValueError):
        link.rule("slow-disk", s, 22)


def test_link_faults_are_planned_against_hosts_and_configs_validate_their_settings():
    params = ScheduleParams(seed=3, faults=LINK_FAULTS, time_limit=600, interval=5,
                            duration=3, partitions=2, brokers=3)  # fmt: skip
    entries = plan(params)
    assert {e["kind"] for e in entries} == set(LINK_FAULTS)
    assert all("select" in e["target"] for e in entries)
    config = load_config("fast", ["nemesis.faults=['slow-link']", "nemesis.link_jitter_ms=0"])
    assert link.settings(config["nemesis"])["link_jitter_ms"] == 0
    with pytest.raises(ValueError, match="link_loss_percent"):
        load_config("fast", ["nemesis.link_loss_percent=120"])


def test_delayer_holds_each_packet_at_least_the_delay_and_never_reorders():
    d = linkdelay.Delayer(0.2, 0.05, random.Random(1))
    times = [d.release_at(now / 1000) for now in range(0, 2000, 3)]
    assert times == sorted(times)
    assert all(t >= now / 1000 for t, now in zip(times, range(0, 2000, 3), strict=True))
    assert linkdelay.Delayer(0.2, 0, random.Random(1)).release_at(5.0) == 5.2


def test_netlink_packet_messages_parse_to_their_ids():
    def packet(pid: int) -> bytes:
        hdr = struct.pack("!IHB", pid, 0x0800, 1)
        return linkdelay.message(linkdelay.NFQNL_MSG_PACKET, 7,
                                 linkdelay._attr(linkdelay.NFQA_PACKET_HDR, hdr), 0)  # fmt: skip

    ids, errors = linkdelay.parse(packet(5) + packet(6) + packet(70000))
    assert ids == [5, 6, 70000] and errors == []
    ack = struct.pack("=IHHII", 36, linkdelay.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -1)
    assert linkdelay.parse(ack + b"\0" * 16) == ([], [1])


# -- real, inside netns hosts ---------------------------------------------------------------

needs_hosts = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists(),
    reason="network namespaces, sshd, tc and iptables need root and openssh-server",
)

# Listens on a port in the background, accepting and closing connections, until killed.
LISTEN = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
while True:
    s.accept()[0].close()
"""
# Connects to addr:port once; prints {"ok": bool, "error": str, "seconds": float}.
CONNECT = """
import json, socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    out = {"ok": True, "error": ""}
except OSError as e:
    out = {"ok": False, "error": type(e).__name__}
out["seconds"] = time.monotonic() - t
print(json.dumps(out))
"""
PORT = 9555


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    provider = NetnsProvider(tmp_path_factory.mktemp("kch") / "link", 3)
    hosts = provider.up()
    n2 = hosts[1]
    listener = shlex.join([sys.executable, "-c", LISTEN, n2.address, str(PORT)])
    n2.remote.run(["sh", "-c", f"nohup {listener} >/dev/null 2>&1 &"], timeout=30)
    yield hosts
    link.heal(hosts)
    provider.down()


def _connect(src, dst, timeout: float = 5.0) -> dict:
    out = src.remote.run([sys.executable, "-c", CONNECT, dst.address, str(PORT), str(timeout)],
                         timeout=timeout + 30).stdout  # fmt: skip
    return json.loads(out)


def _wait_listening(src, dst) -> None:
    deadline = time.monotonic() + 20
    while not _connect(src, dst)["ok"]:
        assert time.monotonic() < deadline, "the test listener never came up"
        time.sleep(0.2)


@pytest.mark.netns
@needs_hosts
def test_slow_link_holds_what_the_host_receives_and_restore_removes_it(hosts):
    n1, n2 = hosts[0], hosts[1]
    _wait_listening(n1, n2)
    link.degrade(n2, "slow-link", link.settings({"link_delay_ms": 400, "link_jitter_ms": 0}),
                 sys.executable, code=str(CHECKOUT))  # fmt: skip
    try:
        assert n2.remote.is_running(link.DAEMON) and len(link.rules(n2)) == 1
        # the daemon imports the run's checkout first, as the nodes do (netns hosts share
        # this machine's files and its process table)
        environ = Path(f"/proc/{n2.remote.pid(link.DAEMON)}/environ").read_bytes().split(b"\0")
        assert f"PYTHONPATH={CHECKOUT}".encode() in environ
        # n1's SYN waits 400 ms in n2's queue: no connection can complete sooner
        deadline = time.monotonic() + 10
        while (slow := _connect(n1, n2))["seconds"] < 0.38:  # until the daemon has bound
            assert time.monotonic() < deadline, slow
        assert slow["ok"], slow
        assert n2.remote.run(["true"]).ok  # the harness's own SSH is exempt
    finally:
        link.restore(n2)
    assert link.rules(n2) == [] and not n2.remote.is_running(link.DAEMON)
    assert _connect(n1, n2)["ok"]


@pytest.mark.netns
@needs_hosts
def test_a_link_losing_every_packet_cuts_peers_off_but_never_the_harness(hosts):
    n1, n2 = hosts[0], hosts[1]
    _wait_listening(n1, n2)
    link.degrade(n2, "lossy-link", link.settings({"link_loss_percent": 100}), sys.executable)
    try:
        assert not _connect(n1, n2, timeout=2)["ok"]
        assert n2.remote.run(["true"], timeout=10).ok
    finally:
        link.heal(hosts)
    assert _connect(n1, n2)["ok"]


@pytest.mark.netns
@needs_hosts
def test_reset_link_resets_connections_and_heal_removes_only_our_chain(hosts):
    n1, n2 = hosts[0], hosts[1]
    _wait_listening(n1, n2)
    link.degrade(n2, "reset-link", link.settings({"reset_probability": 1.0}), sys.executable)
    try:
        refused = _connect(n1, n2)
        assert refused == {**refused, "ok": False, "error": "ConnectionRefusedError"}
        assert len(link.rules(n2)) == 1
        assert n2.remote.run(["true"]).ok
    finally:
        link.heal(hosts)
        link.heal(hosts)  # idempotent
    assert link.rules(n2) == []
    assert _connect(n1, n2)["ok"]


# Each kind once, aimed at partition 0's leader, on a cluster that must lose nothing.
LINK_PLAN = [
    {"id": 0, "kind": "slow-link", "start_s": 2.0, "duration_s": 5.0,
     "target": {"select": "leader", "partition": 0, "pick": 1}},
    {"id": 1, "kind": "lossy-link", "start_s": 8.0, "duration_s": 5.0,
     "target": {"select": "leader", "partition": 0, "pick": 2}},
    {"id": 2, "kind": "reset-link", "start_s": 14.0, "duration_s": 5.0,
     "target": {"select": "leader", "partition": 0, "pick": 3}},
]  # fmt: skip


@pytest.mark.netns
@needs_hosts
def test_a_run_under_link_faults_records_them_heals_them_and_loses_nothing(tmp_path):
    from harness.runner import run_test
    from harness.test import Plan, Test

    config = load_config("fast", ["nodes=4", "time_limit=22", "nemesis.faults=['slow-link', "
                                  "'lossy-link', 'reset-link']", "nemesis.link_delay_ms=300",
                                  "nemesis.reset_probability=0.2"])  # fmt: skip
    run_dir = run_test(Test.of(config, tmp_path, plan=Plan.scripted(LINK_PLAN)))
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    started = {o["f"]: o["value"] for o in ops if o["process"] == "nemesis"
               and o["f"].startswith("start-")}  # fmt: skip
    assert set(started) == {"start-slow-link", "start-lossy-link", "start-reset-link"}
    assert started["start-slow-link"]["link"]["link_delay_ms"] == 300
    assert all("error" not in v for v in started.values()), started
    schedule = json.loads((run_dir / "schedule.json").read_text())
    assert [f["outcome"] for f in schedule["faults"]] == ["ok", "ok", "ok"]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True, results["anomalies"]
