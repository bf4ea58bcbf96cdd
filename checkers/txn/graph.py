"""A dependency graph between transactions, its strongly connected components and a cycle
in each, as Elle searches: components first (iterative Tarjan, linear in the edges), then a
shortest cycle through an edge of the kind an anomaly needs, by breadth-first search inside
one component only.

Edge kinds are bits, so one edge (a, b) that several relations give is stored once.

Components are looked for only where a cycle can be. Each node has a rank, its place in an
order that most edges follow forward (the transactions by invocation: real-time and process
edges always do); the graph keeps the edges that go against it (`back`). A cycle climbs
from its lowest rank to its highest and must come down again by back edges only, so the
back edges' rank intervals [rank(b), rank(a)] cover its whole span: every cycle lies inside
one run of overlapping back intervals. Tarjan runs inside those runs alone, which in a
history of mostly forward edges are a few transactions each, instead of over the whole
graph once per cycle class.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Sequence

WW, WR, PROCESS, REALTIME = 1, 2, 4, 8
NAMES = {WW: "ww", WR: "wr", PROCESS: "process", REALTIME: "realtime"}
ALL = WW | WR | PROCESS | REALTIME


class Graph:
    def __init__(self, n: int, rank: Sequence[int] | None = None) -> None:
        """n nodes; `rank` a permutation of range(n), each node's place (default: its
        number)."""
        self.succ: list[dict[int, int]] = [{} for _ in range(n)]
        self.rank = list(range(n)) if rank is None else list(rank)
        self.by_rank = [-1] * n  # the nodes in rank order
        for node, r in enumerate(self.rank):
            if not 0 <= r < n or self.by_rank[r] != -1:
                raise ValueError("rank must be a permutation of the nodes")
            self.by_rank[r] = node
        if len(self.rank) != n:
            raise ValueError("rank must be a permutation of the nodes")
        self.back: dict[tuple[int, int], int] = {}  # edges to a lower rank, with their kinds

    def link(self, a: int, b: int, kind: int) -> None:
        self.link_all(((a, b),), kind)

    def link_all(self, pairs: Iterable[tuple[int, int]], kind: int) -> None:
        """Link every (a, b) of `pairs` with `kind` (a graph of millions of edges is built
        here, in one loop with its lookups bound once: a call per edge cost a third of it)."""
        succ, rank, back = self.succ, self.rank, self.back
        for a, b in pairs:
            if a != b:
                out = succ[a]
                out[b] = out.get(b, 0) | kind
                if rank[a] > rank[b]:
                    back[(a, b)] = back.get((a, b), 0) | kind

    def edges(self) -> int:
        return sum(len(s) for s in self.succ)


def spans(g: Graph, allowed: int) -> list[tuple[int, int]]:
    """The rank ranges [lo, hi] that hold every cycle over `allowed` edges: the runs of back
    edges' intervals that overlap or touch (a cycle may come down by two back edges that
    meet at one node)."""
    rank = g.rank
    intervals = sorted((rank[b], rank[a]) for (a, b), kind in g.back.items() if kind & allowed)
    runs: list[list[int]] = []
    for lo, hi in intervals:
        if runs and lo <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], hi)
        else:
            runs.append([lo, hi])
    return [(lo, hi) for lo, hi in runs]


def components(g: Graph, allowed: int) -> list[list[int]]:
    """Strongly connected components of more than one node, over edges of `allowed` kinds:
    Tarjan inside each span (above) alone."""
    found: list[list[int]] = []
    for lo, hi in spans(g, allowed):
        inside = g.by_rank[lo:hi + 1]
        found += tarjan(g, allowed, sorted(inside), set(inside))
    return found


def tarjan(g: Graph, allowed: int, roots: Iterable[int], within: Collection[int]
           ) -> list[list[int]]:
    """Strongly connected components of more than one node among `within`, searched from
    `roots` (Tarjan's algorithm with an explicit stack: histories are deep)."""
    succ = g.succ
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    found: list[list[int]] = []
    counter = 0
    for root in roots:
        if root in index:
            continue
        work = [(root, iter(succ[root].items()))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w, kind in it:
                if not kind & allowed or w not in within:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w].items())))
                    advanced = True
                    break
                if w in on_stack and index[w] < low[v]:
                    low[v] = index[w]
            if advanced:
                continue
            work.pop()
            if work and low[v] < low[work[-1][0]]:
                low[work[-1][0]] = low[v]
            if low[v] == index[v]:
                scc = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    scc.append(w)
                    if w == v:
                        break
                if len(scc) > 1:
                    found.append(scc)
    return found


def path(g: Graph, start: int, goal: int, allowed: int, within: set[int]) -> list[int] | None:
    """A shortest path start -> goal over `allowed` edges inside `within`, or None."""
    parent = {start: start}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        if v == goal:
            out = [v]
            while v != start:
                v = parent[v]
                out.append(v)
            return out[::-1]
        for w, kind in g.succ[v].items():
            if kind & allowed and w in within and w not in parent:
                parent[w] = v
                queue.append(w)
    return None


def step_kind(mask: int, allowed: int) -> int:
    """The kind an edge counts as in a cycle: its strongest allowed relation (data edges
    before process order before real time), so a cycle is called -process or -realtime
    only when some edge has nothing else to explain it."""
    for kind in (WW, WR, PROCESS, REALTIME):
        if mask & allowed & kind:
            return kind
    return 0


def cycle_in(g: Graph, scc: list[int], allowed: int, needs: tuple[int, ...], tries: int = 32
             ) -> list[tuple[int, int, int]] | None:
    """A cycle in component `scc` over `allowed` edges with a step of every kind in `needs`
    (tried through edges of the first), as steps (a, b, kind); None when `tries` edges
    gave none."""
    within = set(scc)
    through = needs[0]
    for a in scc:
        for b, mask in g.succ[a].items():
            if b not in within or step_kind(mask, allowed) != through:
                continue
            back = path(g, b, a, allowed, within)
            if back is not None:
                nodes = [a, *back]
                steps = [(x, y, step_kind(g.succ[x][y], allowed))
                         for x, y in zip(nodes, nodes[1:], strict=False)]
                if set(needs) <= {kind for _, _, kind in steps}:
                    return steps
            tries -= 1
            if tries <= 0:
                return None
    return None
