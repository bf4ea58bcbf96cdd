"""Partitions: pure grudge properties, and real iptables partitions between netns hosts."""

from __future__ import annotations

import itertools
import json
import os
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from control import NetnsProvider
from nemesis import partition as P

NODES = [f"n{i}" for i in range(1, 10)]


def _symmetric(grudge):
    return all(a in grudge[b] for a in grudge for b in grudge[a])


def _sees(grudge, node):
    return frozenset(grudge) - grudge[node]


# -- pure ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(P.GENERATORS))
@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 9])
def test_generators_are_deterministic_symmetric_and_cover_all_nodes(name, n):
    gen = P.GENERATORS[name]
    nodes = NODES[:n]
    g1 = gen(list(reversed(nodes)), random.Random(42))  # input order must not matter
    assert g1 == gen(nodes, random.Random(42))
    assert set(g1) == set(nodes)
    assert _symmetric(g1)
    assert all(node not in g1[node] for node in nodes)
    assert any(g1.values()), "a partition must cut something"
    assert len({json.dumps(P.to_json(gen(nodes, random.Random(s)))) for s in range(30)}) > 1


def test_isolate_node():
    g = P.isolate_node(NODES[:5], "n3")
    assert g["n3"] == frozenset({"n1", "n2", "n4", "n5"})
    assert all(g[n] == {"n3"} for n in ["n1", "n2", "n4", "n5"])
    with pytest.raises(ValueError, match="not one of"):
        P.isolate_node(NODES[:5], "n9")


def test_isolate_one_picks_each_node_eventually():
    isolated = set()
    for seed in range(50):
        g = P.isolate_one(NODES[:5], random.Random(seed))
        (alone,) = [n for n in g if len(g[n]) == 4]
        isolated.add(alone)
    assert isolated == set(NODES[:5])


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_halves_split_into_minority_and_majority(n):
    g = P.halves(NODES[:n], random.Random(7))
    sizes = sorted({frozenset(_sees(g, node)) for node in g}, key=len)
    assert [len(s) for s in sizes] == [n // 2, n - n // 2]
    assert sizes[0] | sizes[1] == set(NODES[:n]) and not sizes[0] & sizes[1]


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 9])
def test_majority_ring_each_sees_a_distinct_majority(n):
    for seed in range(20):
        g = P.majority_ring(NODES[:n], random.Random(seed))
        views = [_sees(g, node) for node in g]
        # A view counts only nodes reachable both ways (TCP), which symmetry guarantees.
        assert all(len(v) > n // 2 for v in views)
        assert len(set(views)) == n
        assert all(len(v) < n for v in views) or n == 3


@pytest.mark.parametrize("n", [3, 4, 5, 7])
def test_bridge_joins_two_halves_through_one_node(n):
    g = P.bridge(NODES[:n], random.Random(3))
    (middle,) = [node for node in g if not g[node]]
    rest = [node for node in g if node != middle]
    for a, b in itertools.combinations(rest, 2):
        assert P.connected(g, a, b) == (_sees(g, a) == _sees(g, b))
    sides = {_sees(g, node) - {middle} for node in rest}
    assert len(sides) == 2 and sum(map(len, sides)) == n - 1


def test_too_few_nodes_and_bad_input():
    with pytest.raises(ValueError, match="at least 3"):
        P.majority_ring(["a", "b"], random.Random(0))
    with pytest.raises(ValueError, match="at least 3"):
        P.bridge(["a", "b"], random.Random(0))
    with pytest.raises(ValueError, match="at least 2"):
        P.halves(["a"], random.Random(0))
    with pytest.raises(ValueError, match="overlap"):
        P.from_components([["a", "b"], ["b", "c"]])


def test_to_json_is_sorted_lists():
    g = P.isolate_node(["n2", "n1", "n3"], "n2")
    assert P.to_json(g) == {"n1": ["n2"], "n2": ["n1", "n3"], "n3": ["n2"]}


# -- real, over SSH and iptables inside netns hosts ---------------------------------------

needs_hosts = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists(),
    reason="network namespaces, sshd and iptables need root and openssh-server",
)

# Tries a TCP connection to every address given (their sshd port) at once; prints reachability.
PROBE = """
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
def reach(addr):
    try:
        socket.create_connection((addr, 22), timeout=3).close()
        return True
    except OSError:
        return False
with ThreadPoolExecutor(len(sys.argv) - 1) as pool:
    print(json.dumps(dict(zip(sys.argv[1:], pool.map(reach, sys.argv[1:])))))
"""


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    provider = NetnsProvider(tmp_path_factory.mktemp("kch") / "partition", 5)
    yield provider.up()
    provider.down()


def _reachability(hosts) -> dict[tuple[str, str], bool]:
    by_address = {h.address: h.name for h in hosts}

    def from_host(src):
        others = [h.address for h in hosts if h is not src]
        out = src.remote.run([sys.executable, "-c", PROBE, *others], timeout=30).stdout
        return {(src.name, by_address[a]): ok for a, ok in json.loads(out).items()}

    with ThreadPoolExecutor(len(hosts)) as pool:
        result = {}
        for part in pool.map(from_host, hosts):
            result |= part
    return result


def _expected(grudge, hosts) -> dict[tuple[str, str], bool]:
    names = [h.name for h in hosts]
    return {(a, b): P.connected(grudge, a, b) for a in names for b in names if a != b}


@pytest.mark.netns
@needs_hosts
@pytest.mark.parametrize("name", ["halves", "majority-ring", "bridge"])
def test_partition_blocks_exactly_the_grudge_and_heal_restores(hosts, name):
    grudge = P.GENERATORS[name]([h.name for h in hosts], random.Random(5))
    assert not all(P.connected(grudge, a, b) for a in grudge for b in grudge if a != b)

    P.apply(hosts, grudge)
    try:
        assert _reachability(hosts) == _expected(grudge, hosts)
    finally:
        P.heal(hosts)
    assert all(_reachability(hosts).values())
    assert all(P.rules(h) == [] for h in hosts)


@pytest.mark.netns
@needs_hosts
def test_reapply_replaces_and_heal_removes_only_our_rules(hosts):
    n1 = hosts[0]
    foreign = ["iptables", "-w", "-A", "INPUT", "-s", "192.0.2.77/32", "-j", "DROP"]
    n1.remote.run(foreign)
    try:
        P.apply(hosts, P.isolate_node([h.name for h in hosts], "n2"))
        P.apply(hosts, P.isolate_node([h.name for h in hosts], "n1"))  # replaces, not adds
        assert len(P.rules(n1)) == 4
        assert all(len(P.rules(h)) == 1 for h in hosts[1:])
        reach = _reachability(hosts)
        assert reach[("n2", "n3")] and not reach[("n2", "n1")]
        P.heal(hosts)
        P.heal(hosts)  # idempotent
        rules = n1.remote.run(["iptables", "-w", "-S"]).stdout
        assert "-A INPUT -s 192.0.2.77/32 -j DROP" in rules and P.CHAIN not in rules
    finally:
        n1.remote.run(["iptables", "-w", "-D", *foreign[3:]], check=False)


@pytest.mark.netns
@needs_hosts
def test_partitions_never_cut_the_harness_off(hosts):
    P.apply(hosts, P.halves([h.name for h in hosts], random.Random(1)))
    try:
        assert all(h.remote.run(["true"]).ok for h in hosts)
    finally:
        P.heal(hosts)


def test_apply_rejects_unknown_hosts():
    with pytest.raises(ValueError, match="unknown hosts"):
        P.apply([], {"n1": frozenset({"n2"})})
