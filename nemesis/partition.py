"""Network partitions: pure "grudge" computation, and its application by iptables inside hosts.

A grudge maps each node name to the set of nodes whose packets it drops. Every grudge built
here is symmetric (if a drops b, b drops a), so TCP between the two is cut both ways and the
intended connectivity is exactly what each node sees. Randomness comes only from the
random.Random passed in, and nodes are sorted first, so a seed reproduces a partition.

Application puts DROP rules for the grudged source addresses in a dedicated chain, KCH-PART,
jumped to first from INPUT; healing removes that jump and chain and nothing else.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from control.parallel import on_hosts
from nemesis import iptables

if TYPE_CHECKING:
    from control.host import Host

CHAIN = "KCH-PART"

Grudge = dict[str, frozenset[str]]


# -- pure grudge computation --------------------------------------------------------------


def _nodes(nodes: Iterable[str], minimum: int, what: str) -> list[str]:
    names = sorted(set(nodes))
    if len(names) < minimum:
        raise ValueError(f"{what} needs at least {minimum} nodes, got {len(names)}")
    return names


def from_components(components: Sequence[Iterable[str]]) -> Grudge:
    """Each node drops every node outside its own component (components must be disjoint)."""
    groups = [frozenset(c) for c in components]
    everyone = frozenset().union(*groups)
    if sum(len(g) for g in groups) != len(everyone):
        raise ValueError("components overlap")
    return {node: everyone - group for group in groups for node in group}


def from_views(views: Mapping[str, Iterable[str]]) -> Grudge:
    """Each node drops every node it does not see; a node always sees itself."""
    everyone = frozenset(views)
    return {node: everyone - frozenset(seen) - {node} for node, seen in views.items()}


def isolate_node(nodes: Iterable[str], node: str) -> Grudge:
    """Cut node off from all others (e.g. the leader or the controller, chosen by the caller)."""
    names = _nodes(nodes, 2, "isolating a node")
    if node not in names:
        raise ValueError(f"cannot isolate {node!r}: not one of {names}")
    return from_components([[node], [n for n in names if n != node]])


def isolate_one(nodes: Iterable[str], rng: random.Random) -> Grudge:
    """Cut a random node off from all others."""
    names = _nodes(nodes, 2, "isolate-one")
    return isolate_node(names, rng.choice(names))


def halves(nodes: Iterable[str], rng: random.Random) -> Grudge:
    """Split the nodes at random into a minority and a majority half (equal if n is even)."""
    names = _nodes(nodes, 2, "halves")
    rng.shuffle(names)
    cut = len(names) // 2
    return from_components([names[:cut], names[cut:]])


def bridge(nodes: Iterable[str], rng: random.Random) -> Grudge:
    """Two halves that cannot talk to each other, and one random node that sees both."""
    names = _nodes(nodes, 3, "bridge")
    rng.shuffle(names)
    middle, rest = names[0], names[1:]
    cut = len(rest) // 2
    left, right = frozenset(rest[:cut]), frozenset(rest[cut:])
    grudge = {n: right for n in left} | {n: left for n in right}
    grudge[middle] = frozenset()
    return grudge


def majority_ring(nodes: Iterable[str], rng: random.Random) -> Grudge:
    """Every node sees a majority (itself included), and no two nodes see the same majority.

    The nodes are placed on a random ring and each sees its neighbours within radius r on
    both sides. The window 2r+1 is the smallest odd number >= a majority, which keeps the
    grudge symmetric (an even window would cut pairs one way only, leaving some node seeing
    less than a majority once TCP needs both directions). With 3 nodes no such window is
    smaller than the whole ring, so the ring degenerates into a line a-b-c: a and c each see
    a different majority, b sees everyone.
    """
    names = _nodes(nodes, 3, "majority-ring")
    rng.shuffle(names)
    n = len(names)
    if n == 3:
        a, b, c = names
        return from_views({a: [a, b], b: [a, b, c], c: [b, c]})
    majority = n // 2 + 1
    radius = majority // 2  # window 2r+1: majority if odd, majority+1 if even
    views = {}
    for p, node in enumerate(names):
        views[node] = [names[(p + d) % n] for d in range(-radius, radius + 1)]
    return from_views(views)


# Named partition generators for a nemesis schedule; isolate_node takes a chosen node instead.
GENERATORS: dict[str, Callable[[Iterable[str], random.Random], Grudge]] = {
    "isolate-one": isolate_one,
    "halves": halves,
    "majority-ring": majority_ring,
    "bridge": bridge,
}


def to_json(grudge: Mapping[str, frozenset[str]]) -> dict[str, list[str]]:
    """A stable, JSON-ready form for the history's nemesis operations."""
    return {node: sorted(grudge[node]) for node in sorted(grudge)}


def connected(grudge: Mapping[str, frozenset[str]], a: str, b: str) -> bool:
    """Whether a TCP connection between a and b can work under grudge (both directions)."""
    return b not in grudge.get(a, frozenset()) and a not in grudge.get(b, frozenset())


# -- application on hosts -----------------------------------------------------------------


def apply(hosts: Sequence[Host], grudge: Mapping[str, frozenset[str]]) -> None:
    """Make each host drop exactly the packets its grudge says; replaces any earlier partition.

    Hosts the grudge does not mention drop nothing.
    """
    by_name = {h.name: h for h in hosts}
    unknown = set(grudge).union(*grudge.values()) - set(by_name) if grudge else set()
    if unknown:
        raise ValueError(f"grudge names unknown hosts: {sorted(unknown)}")

    def one(host: Host) -> None:
        sources = sorted(by_name[n].address for n in grudge.get(host.name, frozenset()))
        iptables.apply(host, CHAIN, [f"-s {a}/32 -j DROP" for a in sources])

    on_hosts(hosts, one)


def heal(hosts: Sequence[Host]) -> None:
    """Remove our chain and its jump on every host; safe when nothing was applied."""
    on_hosts(hosts, lambda h: iptables.heal(h, CHAIN))


def rules(host: Host) -> list[str]:
    """The host's current KCH-PART rules (iptables -S form); [] when healed."""
    return iptables.rules(host, CHAIN)

