"""A node cut off from the clients' host at its service port (client-partition): the rules
built, the kind's targets and roles (pure logic), and the cut itself between netns hosts
(root: the harness's side is this machine's root namespace, as the workload's clients are).
The real-Kafka run is in tests/workloads/test_rdkafka_ctp.py."""

from __future__ import annotations

import asyncio
import os
import random
import shlex
import socket
import sys
import time
from pathlib import Path

import pytest
from support.coordinator_targets import group_topology, resolve, state

from control import NetnsProvider
from control.cluster import PORT
from nemesis import client_partition as C
from nemesis import iptables
from nemesis.kinds import lookup
from nemesis.kinds.base import PlanParams
from nemesis.roles import as_fixed, role_entries, roles_now
from nemesis.schedule import RealisedFault, ScheduleParams, plan


def current_rules(host) -> list[str]:
    """The host's current rules of both chains (iptables -S form); [] when healed."""
    return iptables.rules(host, C.CHAIN_IN) + iptables.rules(host, C.CHAIN_OUT)


# -- pure ----------------------------------------------------------------------------------


def test_the_clients_address_is_the_client_field_of_ssh_connection():
    assert C.parse_clients_address("10.77.3.1 41234 10.77.3.12 22\n") == "10.77.3.1"


@pytest.mark.parametrize("value", ["", "10.77.3.1 41234", "::1 5 ::1 22",
                                   "10.77.3.1;reboot 1 10.0.0.2 22", "host 1 10.0.0.2 22"])
def test_anything_but_an_ipv4_client_field_is_refused_in_one_line(value):
    with pytest.raises(ValueError) as err:
        C.parse_clients_address(value)
    assert "\n" not in str(err.value)


def test_the_rules_drop_the_service_port_both_ways_and_nothing_else():
    inbound, outbound = C.rules("10.77.3.1")
    assert inbound == [f"-s 10.77.3.1/32 -p tcp -m tcp --dport {PORT} -j DROP"]
    assert outbound == [f"-d 10.77.3.1/32 -p tcp -m tcp --sport {PORT} -j DROP"]
    assert C.rules("10.0.0.9", 19092)[0] == ["-s 10.0.0.9/32 -p tcp -m tcp --dport 19092 -j DROP"]


@pytest.mark.parametrize(("address", "port"), [("10.0.0.1 -j ACCEPT", PORT), ("fe80::1", PORT),
                                               ("10.0.0.1", 0), ("10.0.0.1", 70000)])
def test_rules_refuse_what_is_not_an_ipv4_address_and_a_port(address, port):
    with pytest.raises(ValueError):
        C.rules(address, port)


def test_our_chains_hook_only_into_input_and_output():
    with pytest.raises(ValueError, match="hook"):
        iptables.apply(None, C.CHAIN_IN, [], hook="FORWARD; reboot")  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "selector"), [
    ("group-coordinator", "group-coordinator"), ("txn-coordinator", "txn-coordinator"),
    ("leader", "leader"), ("random", "random-broker")])
def test_the_cut_is_aimed_by_the_targets_mode(mode, selector):
    target = lookup("client-partition").plan_target(random.Random(1), PlanParams(3, 4, mode))
    assert target["select"] == selector


def test_the_cut_aimed_at_the_group_hits_its_coordinator_not_the_data_leader():
    topo = group_topology(state(1), state(3, replicas=(3, 1, 2)), txn=state(2))
    assert resolve("client-partition", {"select": "group-coordinator"}, topo) == ["n4"]


def test_a_cut_planned_for_the_group_is_recorded_by_role_and_cast_on_the_next_coordinator():
    entries = plan(ScheduleParams(seed=3, faults=("client-partition",), time_limit=30,
                                  interval=3, duration=3, partitions=3,
                                  targets="group-coordinator"))
    assert entries and all(e["target"]["select"] == "group-coordinator" for e in entries)
    then = group_topology(None, state(3, replicas=(3, 1, 2)))
    roles = asyncio.run(roles_now(then, entries[0]["target"]))
    fault = RealisedFault(0, "client-partition", 2.0, 5.0, entries[0]["target"],
                          resolved={"nodes": ["n4"]}, started_s=2.0, ended_s=7.0,
                          outcome="ok", roles=roles)
    [entry] = role_entries([fault])
    assert entry["target"]["roles"] == {"nodes": ["group-coordinator"]}
    now = group_topology(None, state(1, replicas=(1, 2, 3)))  # broker 1 (n2) coordinates on the replay
    cast = as_fixed(asyncio.run(roles_now(now, entry["target"])), entry["target"])
    assert resolve("client-partition", cast, now) == ["n2"]


def test_the_simulated_world_cannot_cut_clients_off():
    assert lookup("client-partition").simulated is False


# -- real, inside netns hosts ---------------------------------------------------------------

needs_hosts = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists(),
    reason="network namespaces, sshd and iptables need root and openssh-server",
)
OTHER_PORT = 9556  # a port beside the service port: the cut must leave it alone
LISTEN = """
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port)); s.listen(64)
    while True:
        s.accept()[0].close()
for port in sys.argv[2:]:
    threading.Thread(target=serve, args=(int(port),)).start()
"""
CONNECT = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])),"
           " timeout=3).close(); print('ok')\nexcept OSError: print('cut')")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    provider = NetnsProvider(tmp_path_factory.mktemp("kch") / "clients", 3)
    hosts = provider.up()
    n2 = hosts[1]
    listener = shlex.join([sys.executable, "-c", LISTEN, n2.address, str(PORT), str(OTHER_PORT)])
    n2.remote.run(["sh", "-c", f"nohup {listener} >/dev/null 2>&1 &"], timeout=30)
    yield hosts
    C.heal(hosts)
    provider.down()


def _from_clients(host, port: int) -> bool:
    """Whether the harness's side (this process, as the workload's clients) connects."""
    try:
        socket.create_connection((host.address, port), timeout=3).close()
        return True
    except OSError:
        return False


def _from_peer(src, dst, port: int) -> bool:
    out = src.remote.run([sys.executable, "-c", CONNECT, dst.address, str(port)], timeout=30)
    return out.stdout.strip() == "ok"


def _wait_listening(host) -> None:
    for _ in range(100):
        if _from_clients(host, PORT) and _from_clients(host, OTHER_PORT):
            return
        time.sleep(0.2)
    raise AssertionError("the test listener never came up")


@pytest.mark.netns
@needs_hosts
def test_the_cut_drops_the_clients_at_the_service_port_only_and_heals(hosts):
    n1, n2, n3 = hosts
    _wait_listening(n2)
    foreign = ["iptables", "-w", "-A", "INPUT", "-s", "192.0.2.78/32", "-j", "DROP"]
    n2.remote.run(foreign)
    try:
        assert C.cut(n2) == {"clients": C.clients_address(n2), "port": PORT}
        assert len(current_rules(n2)) == 2 and current_rules(n3) == []
        assert not _from_clients(n2, PORT)  # the clients' host is cut off from the port...
        assert _from_clients(n2, OTHER_PORT)  # ...and from nothing else
        assert n2.remote.run(["true"], timeout=10).ok  # SSH too: the harness keeps control
        assert _from_peer(n3, n2, PORT) and _from_peer(n1, n2, PORT)  # peers reach it
        C.restore(n2)
        C.restore(n2)  # idempotent
        assert current_rules(n2) == [] and _from_clients(n2, PORT)
        rules = n2.remote.run(["iptables", "-w", "-S"]).stdout
        assert "-A INPUT -s 192.0.2.78/32 -j DROP" in rules and "KCH-CLIENT" not in rules
    finally:
        n2.remote.run(["iptables", "-w", "-D", *foreign[3:]], check=False)


@pytest.mark.netns
@needs_hosts
def test_a_cut_left_behind_is_removed_by_the_heal_every_run_starts_with(hosts):
    _wait_listening(hosts[1])
    C.cut(hosts[1])
    C.heal(hosts)  # nemesis.hosts_world.heal_network's part for it
    assert all(current_rules(h) == [] for h in hosts) and _from_clients(hosts[1], PORT)
